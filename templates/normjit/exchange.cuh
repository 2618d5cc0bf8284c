// The exchange between the P co-resident CTAs that share each row of a slot (row_split,
// row_stream): every CTA publishes its part's (mean, M2) for the row's generation, waits for
// the other P-1 partials and merges them with Chan's formula, in the same order everywhere.
//
// Workspace: one region of 16P+4 floats per slot, the same whatever the launch's slot count:
// two u64 arrival counters (by generation parity), then partials[4][P] (by generation mod 4),
// each one 64-bit word in a 16-byte slot. Row i of a slot is generation g. A partial is the
// chunk's (mean, M2); its count is not sent, since every reader knows it (min(kSeg,
// H - begin)). The sign bit of M2 (>= 0) carries the partial's tag, bit 2 of g inverted, so a
// merge polls the partials themselves, and has them once they are all there, instead of
// first polling a counter and then loading them: the word in slot g mod 4 holds generation g
// or g - 4 (never g + 4: a CTA publishes g+1 before awaiting g but never g+2 before g
// completed, so a slot is rewritten only after every CTA has read it), and the tag tells
// which. The fresh, zeroed workspace reads as tag 0, which no generation 0-3 expects. Each
// word is written and read with one strong 64-bit access, which the memory model makes
// single-copy atomic: a reader sees the old word or the new one, never half of each.
// The counters are off a row's critical path: each arrival adds 1 to counters[g & 1], which
// completes at (g/2 + 1) * P, and they only tell the next launch where its generations start
// (counters only grow, across launches too). Launches sharing a workspace must be ordered
// (the engine keeps one workspace per stream).
// (On the H100 polling the partials ran the LayerNorm seeds 2-6 points of copy faster than
// polling a counter first; 16-byte slots and a 256 ns sleep between polls ran the GroupNorm
// seed faster than 8-byte slots and 32 ns: docs/performance-notes.md.)
#pragma once

#include "normjit/reduce.cuh"

namespace normjit {

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// A CTA's partial statistics as one 64-bit word: mean in the low half, M2 in the high half
// with its sign bit replaced by the tag (see Workspace above).
__device__ __forceinline__ unsigned long long pack_partial(Stats s, unsigned int tag) {
  const unsigned int m2 = (__float_as_uint(s.m2) & 0x7fffffffu) | tag << 31;
  return static_cast<unsigned long long>(m2) << 32 | __float_as_uint(s.mean);
}
__device__ __forceinline__ unsigned int partial_tag(unsigned long long word) {
  return static_cast<unsigned int>(word >> 63);
}
__device__ __forceinline__ Stats unpack_partial(unsigned long long word, float n) {
  return {n, __uint_as_float(static_cast<unsigned int>(word)),
          __uint_as_float(static_cast<unsigned int>(word >> 32) & 0x7fffffffu)};
}
// The tag of generation g's partials.
__device__ __forceinline__ unsigned int generation_tag(unsigned long long g) {
  return static_cast<unsigned int>(g >> 2 & 1) ^ 1u;
}
// Strong (relaxed, gpu scope) 64-bit accesses: through L2, single-copy atomic.
__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// One slot's exchange for rows of H elements split over P CTAs of kSeg elements each (the last
// one what remains). The kernel declares one `__shared__ Exchange::Shared` and constructs the
// exchange of its CTA, which also says where the CTA works; every thread then calls start(),
// publish() and combine() alike.
template <int THREADS, long long P, long long kSeg, long long H, bool kRms>
struct Exchange {
  static constexpr int kWarps = THREADS / 32;
  static constexpr long long kPartialWords = 2;  // 64-bit words per partial's slot
  // The warps that merge the P partials (one per thread).
  static constexpr int kMergeWarps = (P + 31) / 32;
  static_assert(kMergeWarps <= kWarps, "one thread per partial");
  // Floats of one slot's region of the workspace (the plan allocates as many per slot).
  static constexpr long long kSlotFloats = 8 * kPartialWords * P + 4;

  struct Shared {
    Stats scratch[kWarps];
    Stats row_stats[2][kMergeWarps];  // the merged warps' totals, by generation parity
    unsigned long long base_generation;
  };

  // This CTA's place in the launch: `slots` groups of P CTAs; slot s works on rows s,
  // s + slots, ...; `chunk` is this CTA's part of each of them, 0..P-1.
  const long long slots = gridDim.x / P;
  const long long slot = blockIdx.x / P;
  const long long chunk = blockIdx.x - slot * P;
  Shared& sh;
  unsigned long long* const counters;
  unsigned long long* const partials;

  __device__ __forceinline__ Exchange(Shared& shared, float* workspace)
      : sh(shared),
        counters(reinterpret_cast<unsigned long long*>(workspace + slot * kSlotFloats)),
        partials(reinterpret_cast<unsigned long long*>(workspace + slot * kSlotFloats + 4)) {}

  // The slot's first generation of this launch. Counters grow by whole generations per
  // launch, and the generations in progress cannot complete without this CTA, so
  // floor(count / P) of each counter is exact. Thread 0 reads it; every thread may use it
  // after the next block barrier.
  __device__ __forceinline__ void start() {
    if (threadIdx.x == 0) {
      sh.base_generation = load_acquire(&counters[0]) / P + load_acquire(&counters[1]) / P;
    }
  }
  __device__ __forceinline__ unsigned long long base_generation() const {
    return sh.base_generation;
  }

  // A CTA's partial: block-reduced from each thread's, then published by thread 0.
  // (Publishing from warp 0 after a single block barrier, without handing the total to every
  // thread, ran the split seeds slower on the H100: docs/performance-notes.md.)
  __device__ __forceinline__ void publish(Stats mine, unsigned long long g) {
    if constexpr (kRms) {
      mine = {0.f, 0.f, team_reduce<THREADS, 1>(mine.m2, reinterpret_cast<float*>(sh.scratch))};
    } else {
      mine = team_reduce<THREADS, 1>(mine, sh.scratch);
    }
    if (threadIdx.x == 0) {
      store_relaxed(partials + ((g & 3) * P + chunk) * kPartialWords,
                    pack_partial(mine, generation_tag(g)));
      // Counts generations for the next launch only: nothing here waits on it.
      asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(&counters[g & 1]) : "memory");
    }
  }

  // Waits for generation g's P partials and merges them.
  __device__ __forceinline__ void combine(unsigned long long g, float eps, float& mean,
                                          float& rstd) {
    // The first ceil(P/32) warps poll the P partials, one per thread, until each carries g's
    // tag, and merge them per warp; after the barrier every thread merges the warps' totals
    // (in the same order everywhere: results do not depend on arrival order). They are left
    // in row_stats[g & 1]: alternating slots need no second barrier before the next combine
    // writes one, since the combine in between has its barrier after every thread read this
    // one. (On the H100 dropping that barrier ran every split seed faster.)
    const int tid = threadIdx.x;
    if (tid < kMergeWarps * 32) {
      Stats mine = {0.f, 0.f, 0.f};
      if (tid < P) {
        const unsigned long long* in = partials + ((g & 3) * P + tid) * kPartialWords;
        const unsigned int tag = generation_tag(g);
        unsigned long long word = load_relaxed(in);
        while (partial_tag(word) != tag) {
          // A short sleep between polls: hundreds of CTAs polling flat out on L2 slow the
          // memory traffic of the CTAs still loading.
          __nanosleep(256);
          word = load_relaxed(in);
        }
        // Every part but the last is full.
        mine = unpack_partial(word, float(tid + 1 < P ? kSeg : H - (P - 1) * kSeg));
      }
      __syncwarp();
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const Stats other = shfl_down(mine, offset, 32);
        mine = kRms ? Stats{0.f, 0.f, mine.m2 + other.m2} : merge(mine, other);
      }
      if (tid % 32 == 0) sh.row_stats[g & 1][tid / 32] = mine;
    }
    __syncthreads();
    Stats s = sh.row_stats[g & 1][0];
#pragma unroll
    for (int w = 1; w < kMergeWarps; ++w) {
      const Stats other = sh.row_stats[g & 1][w];
      s = kRms ? Stats{0.f, 0.f, s.m2 + other.m2} : merge(s, other);
    }
    mean = kRms ? 0.f : s.mean;
    rstd = rsqrtf(s.m2 * (1.0f / H) + eps);
  }
};

}  // namespace normjit
