// The CUDA a normjit kernel uses, on the host (tests/emulation): each CTA of a launch runs in a
// process of its own (so the kernel's static __shared__ arrays are per CTA), each of its threads
// a ucontext fiber that runs until it waits (__syncthreads, a named barrier, a warp shuffle, a
// poll); device memory is mmap(MAP_SHARED) before the CTAs fork, so what one CTA writes another
// reads. The kernels' PTX statements are host code (host_templates.py). What this checks is the
// kernels' logic: indices, sizes, reductions and the order of their phases, for any grid. Not
// the GPU's timing, memory model or warp-level races (fibers switch only where they wait).
#pragma once

#include <sched.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct Fiber {
  ucontext_t context;
  Dim3 thread;
  bool done = false;
};

// The CTA's dynamic shared memory (host_templates.py turns `extern __shared__` into it).
extern unsigned char emu_dynamic_smem[];

namespace emu {

inline Fiber* current = nullptr;  // the running fiber
inline ucontext_t scheduler;
inline Dim3 block_index, block_size, grid_size;
inline unsigned threads = 0;  // of the CTA

inline void yield() { swapcontext(&current->context, &scheduler); }

// A barrier of `count` fibers: each arrival counts, the last starts a new generation; the others
// wait (yield) until it has.
struct Barrier {
  unsigned arrived = 0, generation = 0;
  void wait(unsigned count) {
    const unsigned g = generation;
    if (++arrived == count) {
      arrived = 0;
      ++generation;
    } else {
      while (generation == g) yield();
    }
  }
};
inline Barrier cta_barrier, named[16], warp_barrier[32];
inline float lanes[32][32];  // [warp][lane]: a shuffle's values

inline unsigned thread_index() { return current->thread.y * block_size.x + current->thread.x; }

// Lane `source(lane)`'s v, for every lane of the caller's warp (all 32 call it).
template <class F>
inline float shuffle(float v, F source) {
  const unsigned t = thread_index(), warp = t / 32, lane = t % 32;
  lanes[warp][lane] = v;
  warp_barrier[warp].wait(32);
  const int from = source(int(lane));
  const float out = from >= 0 && from < 32 ? lanes[warp][from] : v;
  warp_barrier[warp].wait(32);
  return out;
}

inline void named_barrier(unsigned id, unsigned count) { named[id].wait(count); }

}  // namespace emu

#define threadIdx (emu::current->thread)
#define blockIdx (emu::block_index)
#define blockDim (emu::block_size)
#define gridDim (emu::grid_size)

inline void __syncthreads() { emu::cta_barrier.wait(emu::threads); }
inline float __shfl_down_sync(unsigned, float v, unsigned offset, int width = 32) {
  return emu::shuffle(
      v, [&](int lane) { return lane % width + int(offset) < width ? lane + int(offset) : lane; });
}
inline float __shfl_xor_sync(unsigned, float v, int mask, int width = 32) {
  (void)width;
  return emu::shuffle(v, [&](int lane) { return lane ^ mask; });
}
inline float __shfl_sync(unsigned, float v, int source, int width = 32) {
  return emu::shuffle(v, [&](int lane) { return lane / width * width + source; });
}
// A poll's pause: other CTAs (processes) and the CTA's other fibers run.
inline void __nanosleep(unsigned) {
  sched_yield();
  emu::yield();
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float v) { return std::exp(v); }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline unsigned __cvta_generic_to_shared(const void* p) {
  return static_cast<unsigned>(reinterpret_cast<uintptr_t>(p));
}
#define __builtin_assume(x) ((void)0)
using std::fmaf;

struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

namespace emu {
// The generic address of a 32-bit shared-memory address (__cvta_generic_to_shared's low bits):
// a CTA's shared arrays, static and dynamic, lie in one image of the kernel's shared object.
inline void* shared_pointer(unsigned address) {
  const uintptr_t high = reinterpret_cast<uintptr_t>(emu_dynamic_smem) & ~uintptr_t{0xffffffffu};
  return reinterpret_cast<void*>(high | address);
}
// f32 to bf16 and f16 bits, rounded to nearest even (a NaN stays a quiet NaN).
inline unsigned bf16_bits(float v) {
  unsigned u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ((u >> 16) | 0x40u) & 0xffffu;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
inline unsigned f16_bits(float v) {
  const _Float16 h = static_cast<_Float16>(v);
  unsigned short bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
}  // namespace emu

// A warp's threads wait for one another (every lane of the mask calls it).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  emu::warp_barrier[emu::thread_index() / 32].wait(unsigned(__builtin_popcount(mask)));
}
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

namespace emu {
// f32 to OCP fp8 bits as cvt.rn.satfinite: round to nearest even, magnitudes past the largest
// finite value saturate to it, NaN stays NaN (0x7f). E4M3: 3 mantissa bits, bias 7, max 448;
// E5M2: 2 mantissa bits, bias 15, max 57344.
inline unsigned fp8_bits(float v, int mantissa_bits, int bias, double largest) {
  if (std::isnan(v)) return 0x7fu;
  const unsigned sign = std::signbit(v) ? 0x80u : 0u;
  const double a = std::fabs(double(v));
  const int emin = 1 - bias;
  int e = a > 0 ? int(std::floor(std::log2(a))) : emin;
  if (e < emin) e = emin;
  const double quantum = std::ldexp(1.0, e - mantissa_bits);
  double q = std::nearbyint(a / quantum) * quantum;  // the current (to-nearest-even) rounding
  if (q > largest) q = largest;
  if (q == 0) return sign;
  int ef = int(std::floor(std::log2(q)));
  unsigned exponent, mantissa;
  if (ef < emin) {  // subnormal
    exponent = 0;
    mantissa = unsigned(std::lround(q / std::ldexp(1.0, emin - mantissa_bits)));
  } else {
    exponent = unsigned(ef + bias);
    mantissa = unsigned(std::lround((q / std::ldexp(1.0, ef) - 1.0) * (1 << mantissa_bits)));
  }
  return sign | exponent << mantissa_bits | mantissa;
}
inline unsigned e4m3_bits(float v) { return fp8_bits(v, 3, 7, 448.0); }
inline unsigned e5m2_bits(float v) { return fp8_bits(v, 2, 15, 57344.0); }
}  // namespace emu
