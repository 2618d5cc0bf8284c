// Storage types and their conversion to and from f32, written without cuda_fp16.h or
// cuda_bf16.h so that NVRTC needs no toolkit headers at run time.
#pragma once

namespace normjit {

struct alignas(2) half_t {
  unsigned short bits;
};
struct alignas(2) bf16_t {
  unsigned short bits;
};
// OCP fp8 (E4M3: max 448, no infinities; E5M2: max 57344), output only. Conversions saturate
// to the largest finite value (cvt.rn.satfinite: sm_89 and later; the plan refuses fp8 output
// on older targets).
struct alignas(1) e4m3_t {
  unsigned char bits;
};
struct alignas(1) e5m2_t {
  unsigned char bits;
};

template <class T>
constexpr bool kFp8 = false;
template <>
constexpr bool kFp8<e4m3_t> = true;
template <>
constexpr bool kFp8<e5m2_t> = true;

__device__ __forceinline__ float to_float(float v) { return v; }

__device__ __forceinline__ float to_float(half_t v) {
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(v.bits));
  return out;
}

__device__ __forceinline__ float to_float(bf16_t v) {
  return __uint_as_float(static_cast<unsigned int>(v.bits) << 16);
}

template <class T>
__device__ __forceinline__ T from_float(float v);

template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}

template <>
__device__ __forceinline__ half_t from_float<half_t>(float v) {
  half_t out;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(out.bits) : "f"(v));
  return out;
}

template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float v) {
  // Round to nearest even; NaN stays a (quiet) NaN.
  bf16_t out;
#if __CUDA_ARCH__ >= 800
  // One instruction (as pack_pair's cvt.rn.bf16x2.f32) where the integer rounding below takes
  // seven; the same bits for every finite value and infinities. 0.89-0.99x the time of the slab
  // kernel's element stores, odd rows and bf16 residuals on the H200 (performance-notes, "Single
  // f32 -> bf16 conversions by one instruction").
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(out.bits) : "f"(v));
#else
  unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    out.bits = static_cast<unsigned short>((u >> 16) | 0x40u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    out.bits = static_cast<unsigned short>(u >> 16);
  }
#endif
  return out;
}

// Two values converted and packed into 16 bits, lo in the low byte (defined for sm_89+).
template <class T>
__device__ __forceinline__ unsigned short fp8_pair(float lo, float hi);
#if __CUDA_ARCH__ >= 890
template <>
__device__ __forceinline__ unsigned short fp8_pair<e4m3_t>(float lo, float hi) {
  unsigned short out;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(out) : "f"(hi), "f"(lo));
  return out;
}
template <>
__device__ __forceinline__ unsigned short fp8_pair<e5m2_t>(float lo, float hi) {
  unsigned short out;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(out) : "f"(hi), "f"(lo));
  return out;
}
template <>
__device__ __forceinline__ e4m3_t from_float<e4m3_t>(float v) {
  return e4m3_t{static_cast<unsigned char>(fp8_pair<e4m3_t>(v, 0.f))};
}
template <>
__device__ __forceinline__ e5m2_t from_float<e5m2_t>(float v) {
  return e5m2_t{static_cast<unsigned char>(fp8_pair<e5m2_t>(v, 0.f))};
}
#endif

}  // namespace normjit
