// Vector global accesses: V consecutive elements moved as one access of V*sizeof(T) bytes
// (16 bytes where the plan allows), converted to f32 in registers. The elements travel as
// 32-bit words in one vector access.
#pragma once

#include "normjit/dtype.cuh"

namespace normjit {

__device__ __forceinline__ unsigned int bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned int bits_of(half_t v) { return v.bits; }
__device__ __forceinline__ unsigned int bits_of(bf16_t v) { return v.bits; }

template <class T>
__device__ __forceinline__ T from_bits(unsigned int bits);
template <>
__device__ __forceinline__ float from_bits<float>(unsigned int bits) {
  return __uint_as_float(bits);
}
template <>
__device__ __forceinline__ half_t from_bits<half_t>(unsigned int bits) {
  return half_t{static_cast<unsigned short>(bits)};
}
template <>
__device__ __forceinline__ bf16_t from_bits<bf16_t>(unsigned int bits) {
  return bf16_t{static_cast<unsigned short>(bits)};
}

// Two elements converted and packed into one word, lo in the low half. On sm_80+ one
// cvt.rn.{bf16,f16}x2.f32 (round to nearest even, NaN kept, as from_float).
template <class T>
__device__ __forceinline__ unsigned int pack_pair(float lo, float hi) {
  return bits_of(from_float<T>(lo)) | bits_of(from_float<T>(hi)) << 16;
}
#if __CUDA_ARCH__ >= 800
template <>
__device__ __forceinline__ unsigned int pack_pair<bf16_t>(float lo, float hi) {
  unsigned int w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
template <>
__device__ __forceinline__ unsigned int pack_pair<half_t>(float lo, float hi) {
  unsigned int w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
#endif

// Word i of a vector of V elements.
template <class T, int V>
__device__ __forceinline__ unsigned int pack_word(const float (&in)[V], int i) {
  if constexpr (sizeof(T) == 4) {
    return bits_of(from_float<T>(in[i]));
  } else if constexpr (sizeof(T) == 2) {
    return pack_pair<T>(in[2 * i], in[2 * i + 1]);
  } else {
    static_assert(kFp8<T>, "1-byte elements are fp8");
    return static_cast<unsigned int>(fp8_pair<T>(in[4 * i], in[4 * i + 1])) |
           static_cast<unsigned int>(fp8_pair<T>(in[4 * i + 2], in[4 * i + 3])) << 16;
  }
}

// L2 eviction hints (sm_80+: createpolicy and .L2::cache_hint). A row kernel marks what it
// touches once (x, y) evict-first and what every row reads again (LayerNorm's weight and bias,
// as large as a row) evict-last, so the parameters stay in L2 while the rows stream past.
// NoHint is the plain access; GlobalLoad too, spelled ld.global (for a pointer that comes out of
// an asm, whose state space NVVM cannot infer, so it would issue a generic load).
struct NoHint {};
struct GlobalLoad {};
struct L2Hint {
  unsigned long long policy;
};
template <class Hint>
constexpr bool kHinted = true;
template <>
constexpr bool kHinted<NoHint> = false;
template <>
constexpr bool kHinted<GlobalLoad> = false;

#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ L2Hint l2_evict_first() {
  L2Hint h;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(h.policy));
  return h;
}
// Evict-last for half of the lines (by address), the others unchanged: parameters larger than
// what L2 keeps (LayerNorm f32, 32 MB) then keep half of their lines instead of evicting each
// other; on the LayerNorm seeds half did better than all or a third (normjit bench, H100).
__device__ __forceinline__ L2Hint l2_evict_last() {
  L2Hint h;
  asm volatile("createpolicy.fractional.L2::evict_last.L2::evict_unchanged.b64 %0, 0.5;"
               : "=l"(h.policy));
  return h;
}
// Evict-first where `first`, else the normal priority: one load path for both, the choice a
// launch argument's. (Not quite a plain access: on the H100 hinted loads of large launches ran
// 1-4% slower than plain ones, whatever the priority.) Both policies are created unpredicated,
// which ptxas folds to constants, and one selected: two predicated createpolicy became about 20
// instructions (FSEL, FMUL, F2I, R2UR) ahead of the first load of x, and the rows that choose ran
// 0.98-1.01x the time without them (H200, scripts/ab_bench.py on
// scripts/specs/evict-policy-select.txt; performance-notes, "The L2 policy of x by a select").
__device__ __forceinline__ L2Hint l2_evict_first_if(bool first) {
  L2Hint h;
  asm volatile(
      "{\n\t.reg .pred q;\n\t.reg .b64 f, n;\n\tsetp.ne.u32 q, %1, 0;\n\t"
      "createpolicy.fractional.L2::evict_first.b64 f, 1.0;\n\t"
      "createpolicy.fractional.L2::evict_normal.b64 n, 1.0;\n\t"
      "selp.b64 %0, f, n, q;\n\t}"
      : "=l"(h.policy)
      : "r"(static_cast<unsigned int>(first)));
  return h;
}
#endif

// kWords 32-bit words at p (aligned to 4 * kWords bytes).
template <int kWords>
__device__ __forceinline__ void load_raw(const void* p, unsigned int (&w)[kWords], NoHint) {
  if constexpr (kWords == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (kWords == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = *reinterpret_cast<const unsigned int*>(p);
  }
}
template <int kWords>
__device__ __forceinline__ void load_raw(const void* p, unsigned int (&w)[kWords], GlobalLoad) {
  if constexpr (kWords == 4) {
    asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "l"(p));
  } else if constexpr (kWords == 2) {
    asm("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  } else {
    asm("ld.global.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
  }
}
template <int kWords>
__device__ __forceinline__ void load_raw(const void* p, unsigned int (&w)[kWords], L2Hint h) {
  if constexpr (kWords == 4) {
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "l"(p), "l"(h.policy));
  } else if constexpr (kWords == 2) {
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                 : "=r"(w[0]), "=r"(w[1])
                 : "l"(p), "l"(h.policy));
  } else {
    asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(w[0]) : "l"(p), "l"(h.policy));
  }
}

// Element j of the elements of T that the words w hold (4 / sizeof(T) to a word, the lowest
// bits first), as a float: what load_vec() gives, from raw words loaded earlier.
template <class T, int kWords>
__device__ __forceinline__ float word_value(const unsigned int (&w)[kWords], int j) {
  constexpr int kPerWord = 4 / sizeof(T), kShift = 32 / kPerWord;
  const unsigned int word = w[j / kPerWord];
  return to_float(from_bits<T>(kPerWord == 1 ? word : word >> (j % kPerWord * kShift)));
}

// Loads V elements at p (aligned to V*sizeof(T), at most 16 bytes) into out[0..V).
// Vectors wider than 16 bytes (f32 parameters beside 16-bit x) move as several 16-byte accesses.
template <class T, int V, class Hint = NoHint>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V], Hint hint = {}) {
  constexpr int kBytes = sizeof(T) * V;
  if constexpr (kBytes > 16) {
    constexpr int kPart = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < V / kPart; ++c) {
      float part[kPart];
      load_vec<T, kPart>(p + c * kPart, part, hint);
#pragma unroll
      for (int j = 0; j < kPart; ++j) out[c * kPart + j] = part[j];
    }
  } else if constexpr (kBytes < 4) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(p[j]);
  } else {
    unsigned int w[kBytes / 4];
    load_raw<kBytes / 4>(p, w, hint);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = word_value<T>(w, j);
  }
}

// The raw bits of V 16-bit elements at p (aligned to V*sizeof(T)), two per word.
template <class T, int V, class Hint = NoHint>
__device__ __forceinline__ void load_words(const T* p, unsigned int (&w)[V / 2], Hint hint = {}) {
  static_assert(sizeof(T) == 2 && V % 2 == 0, "pairs of 16-bit elements");
  load_raw<V / 2>(p, w, hint);
}

// Stores kWords 32-bit words at p (aligned to 4 * kWords bytes).
template <int kWords, class Hint = NoHint>
__device__ __forceinline__ void store_raw(void* p, const unsigned int (&w)[kWords],
                                          Hint hint = {}) {
  unsigned long long policy = 0;
  if constexpr (kHinted<Hint>) policy = hint.policy;
  // Written in PTX: NVVM otherwise splits a uint4 store of converted floats into scalar stores.
  if constexpr (kWords == 4 && kHinted<Hint>) {
    asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(w[0]),
                 "r"(w[1]), "r"(w[2]), "r"(w[3]), "l"(policy)
                 : "memory");
  } else if constexpr (kWords == 4) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3])
                 : "memory");
  } else if constexpr (kWords == 2 && kHinted<Hint>) {
    asm volatile("st.global.L2::cache_hint.v2.b32 [%0], {%1, %2}, %3;" ::"l"(p), "r"(w[0]),
                 "r"(w[1]), "l"(policy)
                 : "memory");
  } else if constexpr (kWords == 2) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
  } else if constexpr (kHinted<Hint>) {
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(p), "r"(w[0]), "l"(policy)
                 : "memory");
  } else {
    *reinterpret_cast<unsigned int*>(p) = w[0];
  }
}

// Stores in[0..V) as V elements at p (aligned to V*sizeof(T), at most 16 bytes).
template <class T, int V, class Hint = NoHint>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[V], Hint hint = {}) {
  constexpr int kBytes = sizeof(T) * V;
  if constexpr (kBytes > 16) {
    constexpr int kPart = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < V / kPart; ++c) {
      float part[kPart];
#pragma unroll
      for (int j = 0; j < kPart; ++j) part[j] = in[c * kPart + j];
      store_vec<T, kPart>(p + c * kPart, part, hint);
    }
  } else if constexpr (kBytes < 4) {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_float<T>(in[j]);
  } else {
    constexpr int kWords = kBytes / 4;
    unsigned int w[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = pack_word<T>(in, i);
    store_raw<kWords>(p, w, hint);
  }
}

// Starts pulling the elements [begin, end) of a tensor (a row, a unit, a chunk) into L2 (sm_90+:
// one bulk prefetch of their 16-byte-aligned bytes, issued by the calling thread). A hint: nothing
// waits for it.
template <class T>
__device__ __forceinline__ void prefetch_l2(const T* row, long long begin, long long end) {
#if __CUDA_ARCH__ >= 900
  const unsigned long long first =
      (reinterpret_cast<unsigned long long>(row + begin) + 15) & ~15ull;
  const unsigned long long last = reinterpret_cast<unsigned long long>(row + end) & ~15ull;
  if (last > first) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first),
                 "r"(static_cast<unsigned int>(last - first))
                 : "memory");
  }
#endif
}

// prefetch_l2(row, 0, n) where `issue`, returning row through the same asm: loads through the
// returned pointer depend on the asm, so ptxas cannot issue them ahead of the prefetch (given
// alone, it placed the prefetch after the loads that follow it in the source). Load through the
// returned pointer with GlobalLoad: NVVM no longer knows it points to global memory.
template <class T>
__device__ __forceinline__ const T* prefetch_l2_then(const T* row, long long n, bool issue) {
#if __CUDA_ARCH__ >= 900
  const unsigned long long first = (reinterpret_cast<unsigned long long>(row) + 15) & ~15ull;
  const unsigned long long last = reinterpret_cast<unsigned long long>(row + n) & ~15ull;
  unsigned long long out;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %2, 0;\n\t"
      "@p cp.async.bulk.prefetch.L2.global [%3], %4;\n\tmov.b64 %0, %1;\n\t}"
      : "=l"(out)
      : "l"(row), "r"(issue && last > first ? 1u : 0u), "l"(first),
        "r"(static_cast<unsigned int>(last - first))
      : "memory");
  return reinterpret_cast<const T*>(out);
#else
  return row;
#endif
}

// Starts pulling the 16-byte vector (or the line holding it) at p into L2: one thread's hint,
// nothing waits for it.
__device__ __forceinline__ void prefetch_l2_vector(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

}  // namespace normjit
