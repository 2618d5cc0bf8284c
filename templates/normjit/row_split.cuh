// Rows too long for one CTA (the LayerNorm and GroupNorm seeds: millions of elements per
// row): each row is split into P chunks of THREADS*K*V elements, one per CTA, and every CTA
// keeps its chunk in registers, so x is read from memory once.
//
// The grid holds `slots` groups of P co-resident CTAs (launched cooperatively, so all are
// resident at once); slot s works on rows s, s + slots, ... For each row a CTA publishes its
// chunk's (count, mean, M2), arrives on the slot's counter, waits for the other P-1 CTAs,
// merges the P partials with Chan's formula and normalizes its chunk from registers.
//
// Workspace: one region of 6P+2 floats per slot, the same whatever the launch's slot count:
// a u64 arrival counter, then partials[2][P][3]. Counters only
// grow, across launches too: the arrivals of one row are generation g = counter / P; the
// partials are double-buffered by g's parity, so a fast CTA writing row g+1 never overwrites
// what a slow CTA is still reading for row g. Launches sharing a workspace must be ordered
// (the engine keeps one workspace per stream).
#pragma once

#include "normjit/row_common.cuh"

namespace normjit {

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ float load_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// kStaged: the next row's chunk streams into shared memory (cp.async) while this row waits
// for its barrier, normalizes and stores, so memory stays busy through the barrier. The
// plan gives kChunk * sizeof(T) bytes of dynamic shared memory then, and only on sm_80+
// (cp.async).
template <class T, bool kRms, long long H, int THREADS, int V, int K, long long P, int G,
          long long S, int CG, bool kWeight, bool kBias, int kMinBlocks, bool kStaged>
__global__ void __launch_bounds__(THREADS, kMinBlocks) row_split(Params p) {
  constexpr long long kChunk = (long long)THREADS * K * V;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  T* stage = reinterpret_cast<T*>(dynamic_smem);
  constexpr int kWarps = THREADS / 32;
  __shared__ Stats scratch[kWarps];
  __shared__ unsigned long long generation;

  const long long slots = gridDim.x / P;
  const long long slot = blockIdx.x / P;
  const long long chunk = blockIdx.x - slot * P;
  const long long begin = chunk * kChunk;
  float* region = p.workspace + slot * (6 * P + 2);
  unsigned long long* counter = reinterpret_cast<unsigned long long*>(region);
  float* partials = region + 2;  // [2][P][3]
  const long long rows = total_rows<G>(p);

  // The slot's generation at launch: counters only grow by whole generations per launch, and
  // no generation completes without this CTA, so this read is exact; later rows add one each.
  // Reading it here keeps the round trip off every row's critical path.
  if (threadIdx.x == 0) generation = load_acquire(counter) / P;

  const T* x0 = static_cast<const T*>(p.x);
  float next_shift = 0.f;  // the shift of the row staged next, loaded with its prefetch
  if constexpr (kStaged) {
    if (slot < rows) {
      Slice<T, K, V, THREADS, H>().prefetch(x0 + slot * H, begin, threadIdx.x, stage);
      next_shift = row_shift<kRms>(x0 + slot * H);
    }
  }
  for (long long row = slot, iteration = 0; row < rows; row += slots, ++iteration) {
    Slice<T, K, V, THREADS, H> slice;
    const T* x = x0 + row * H;
    if constexpr (kStaged) {
      slice.load_staged(stage, begin, threadIdx.x, next_shift);
      if (row + slots < rows) {
        slice.prefetch(x + slots * H, begin, threadIdx.x, stage);
        next_shift = row_shift<kRms>(x + slots * H);
      }
    } else {
      slice.load(x, begin, threadIdx.x, row_shift<kRms>(x));
    }
    Stats mine;
    if constexpr (kRms) {
      mine = {0.f, 0.f, team_reduce<THREADS, 1>(slice.sum_squares(), reinterpret_cast<float*>(scratch))};
    } else {
      mine = team_reduce<THREADS, 1>(slice.stats(), scratch);
    }
    const unsigned long long g = generation + iteration;  // set before the first barrier
    if (threadIdx.x == 0) {
      float* out = partials + ((g & 1) * P + chunk) * 3;
      out[0] = mine.n, out[1] = mine.mean, out[2] = mine.m2;
      // Release: the partial is visible to whoever sees the arrival.
      asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(counter) : "memory");
      const unsigned long long target = (g + 1) * P;
      // A short sleep between polls: hundreds of CTAs spinning flat out on L2 slow the
      // memory traffic of the CTAs still loading (GroupNorm seeds ran slower without it).
      while (load_acquire(counter) < target) __nanosleep(64);
    }
    __syncthreads();
    const float* in = partials + (g & 1) * P * 3;
    // Merge the P partials: each thread takes every THREADS-th, then the block merges.
    Stats total = {0.f, 0.f, 0.f};
    for (long long c = threadIdx.x; c < P; c += THREADS) {
      const Stats s = {load_cg(in + c * 3), load_cg(in + c * 3 + 1), load_cg(in + c * 3 + 2)};
      total = kRms ? Stats{0.f, 0.f, total.m2 + s.m2} : merge(total, s);
    }
    float mean = 0.f, rstd;
    if constexpr (kRms) {
      const float sum = team_reduce<THREADS, 1>(total.m2, reinterpret_cast<float*>(scratch));
      rstd = rsqrtf(sum * (1.0f / H) + p.eps);
    } else {
      const Stats s = team_reduce<THREADS, 1>(total, scratch);
      mean = s.mean;
      rstd = rsqrtf(s.m2 * (1.0f / H) + p.eps);
    }
    constexpr bool kOneChannel = G > 0 && S % kChunk == 0;
    slice.template store<G, S, CG, kWeight, kBias, kOneChannel>(static_cast<T*>(p.y) + row * H, p,
                                                                row, begin, threadIdx.x, mean, rstd);
  }
}

}  // namespace normjit
