// Rows too long for one CTA (the LayerNorm and GroupNorm seeds: millions of elements per
// row): each row is split into P chunks of THREADS*K*V elements, one per CTA, and every CTA
// keeps its chunk in registers, so x is read from memory once.
//
// The grid holds `slots` groups of P co-resident CTAs (launched cooperatively, so all are
// resident at once); slot s works on rows s, s + slots, ... For each row a CTA publishes its
// chunk's (count, mean, M2), arrives on a counter of the slot, waits for the other P-1 CTAs,
// merges the P partials with Chan's formula and normalizes its chunk from registers.
//
// kStaged (sm_80+, 4-16 byte vectors; the plan gives kChunk * sizeof(T) bytes of dynamic
// shared memory, then the resident parameters of KR below): the next row's chunk streams into
// shared memory (cp.async) while this row is in registers, and its partial is published *before*
// this row's barrier is awaited, so each row's barrier latency overlaps the previous row's
// normalize and store and the next row's load, instead of adding to them.
//
// kPrefetch (sm_90+, staged, rows with no parameters read again for every row): once the
// stage holds the next row, thread 0 starts pulling the chunk of the row after it into L2 with
// one bulk prefetch, so DRAM keeps reading while partials are exchanged and chunks normalized;
// the stage's copy of that row later finds it in L2. 1: right after the staged row's partial
// is published; 2: after this row's barrier, just before its store (GroupNorm: fewer of the
// prefetched lines evicted before use). Where LayerNorm's parameters stream from L2 for every
// row, the prefetched rows evicted them instead and the seeds ran slower
// (docs/performance-notes.md).
//
// L2 hints (sm_80+, vec.cuh): y is stored evict-first and LayerNorm's parameters, read again
// for every row, are loaded evict-last, so fewer of them are evicted by the streaming rows.
// x is not hinted where cp.async moves it (see Slice::prefetch).
//
// Workspace: one region of 16P+4 floats per slot, the same whatever the launch's slot count:
// two u64 arrival counters (by generation parity), then partials[4][P] of (n, mean, M2, -)
// as one 16-byte vector each, so a merge reads a partial in one access (by generation
// mod 4). Row i of a slot is generation g; its arrivals go to counters[g & 1], complete at
// (g/2 + 1) * P. A CTA publishes g+1 before awaiting g but never g+2 before g completed, so
// the two counters never mix generations, and a partial slot is rewritten (g+4) only after
// every CTA has read it. Counters only grow, across launches too; launches sharing a
// workspace must be ordered (the engine keeps one workspace per stream).
#pragma once

#include "normjit/row_common.cuh"

namespace normjit {

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// A CTA's partial statistics in the workspace: one 16-byte access each way, through L2
// (.cg: other CTAs wrote it; L1 could hold a stale copy).
__device__ __forceinline__ Stats load_partial(const float4* p) {
  float n, mean, m2, unused;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(n), "=f"(mean), "=f"(m2), "=f"(unused)
               : "l"(p));
  return {n, mean, m2};
}
__device__ __forceinline__ void store_partial(float4* p, Stats s) {
  asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(s.n), "f"(s.mean),
               "f"(s.m2), "f"(0.f)
               : "memory");
}

// Starts pulling this CTA's chunk of `row` (the one at `begin`) into L2: one bulk prefetch
// (sm_90+) of the chunk's 16-byte-aligned bytes, issued by one thread. A hint: nothing waits.
template <class T, long long H, long long kChunk>
__device__ __forceinline__ void prefetch_chunk(const T* row, long long begin) {
#if __CUDA_ARCH__ >= 900
  const long long end = begin + kChunk < H ? begin + kChunk : H;
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

template <class T, bool kRms, long long H, int THREADS, int V, int K, long long P, int G,
          long long S, int CG, bool kWeight, bool kBias, int kMinBlocks, bool kStaged, int KR,
          int kPrefetch>
__global__ void __launch_bounds__(THREADS, kMinBlocks) row_split(Params p) {
  using Chunk = Slice<T, K, V, THREADS, H>;
  constexpr long long kChunk = (long long)THREADS * K * V;
  constexpr int kWarps = THREADS / 32;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  T* stage = reinterpret_cast<T*>(dynamic_smem);
  // KR > 0 (LayerNorm-like rows, G == 0): the weight and bias of the first KR vectors of each
  // thread stay in shared memory (after the stage, if any) for the whole launch, so every row
  // reads that part of its parameters from chip instead of from memory.
  T* resident = stage + (kStaged ? kChunk : 0);
  static_assert(KR == 0 || (G == 0 && (kWeight || kBias)), "resident parameters");
  static_assert(kPrefetch == 0 || (kStaged && kPrefetch <= 2), "prefetch point");
  __shared__ Stats scratch[kWarps];
  __shared__ Stats row_stats[2];  // a row's merged statistics, by generation parity
  __shared__ unsigned long long base_generation;

  const long long slots = gridDim.x / P;
  const long long slot = blockIdx.x / P;
  const long long chunk = blockIdx.x - slot * P;
  const long long begin = chunk * kChunk;
  float* region = p.workspace + slot * (16 * P + 4);  // 16-byte aligned
  unsigned long long* counters = reinterpret_cast<unsigned long long*>(region);
  float4* partials = reinterpret_cast<float4*>(region + 4);
  const long long rows = total_rows<G>(p);
  const int tid = threadIdx.x;

  // The slot's first generation of this launch. Counters grow by whole generations per
  // launch, and the generations in progress cannot complete without this CTA, so
  // floor(count / P) of each counter is exact. Read by all after the barrier below.
  if (tid == 0) base_generation = load_acquire(&counters[0]) / P + load_acquire(&counters[1]) / P;

  // A CTA's partial: block-reduced from each thread's, then published by thread 0.
  auto publish = [&](Stats mine, unsigned long long g) {
    if constexpr (kRms) {
      mine = {0.f, 0.f, team_reduce<THREADS, 1>(mine.m2, reinterpret_cast<float*>(scratch))};
    } else {
      mine = team_reduce<THREADS, 1>(mine, scratch);
    }
    if (tid == 0) {
      store_partial(partials + (g & 3) * P + chunk, mine);
      // Release: the partial is visible to whoever sees the arrival.
      asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(&counters[g & 1]) : "memory");
    }
  };
  // Waits for generation g's P partials and merges them.
  auto combine = [&](unsigned long long g, float& mean, float& rstd) {
    if (tid == 0) {
      const unsigned long long target = (g / 2 + 1) * P;
      // A short sleep between polls: hundreds of CTAs spinning flat out on L2 slow the
      // memory traffic of the CTAs still loading.
      while (load_acquire(&counters[g & 1]) < target) __nanosleep(64);
    }
    // Warp 0 merges the P partials (the other warps would only wait) and leaves the row's
    // statistics in row_stats[g & 1]. Alternating slots need no second barrier before the
    // next combine writes one: the combine in between has its barrier after every thread
    // read this one. (On the H100 dropping that barrier ran every split seed faster.)
    if (tid < 32) {
      __syncwarp();  // lanes 1-31 wait here until lane 0 has seen the row complete
      const float4* in = partials + (g & 3) * P;
      Stats total = {0.f, 0.f, 0.f};
      // P is a constant: unrolled, the P/32 loads of a lane are all in flight at once.
#pragma unroll
      for (int i = 0; i < (P + 31) / 32; ++i) {
        const long long c = tid + i * 32;
        if (c < P) {
          const Stats s = load_partial(in + c);
          total = kRms ? Stats{0.f, 0.f, total.m2 + s.m2} : merge(total, s);
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const Stats other = shfl_down(total, offset, 32);
        total = kRms ? Stats{0.f, 0.f, total.m2 + other.m2} : merge(total, other);
      }
      if (tid == 0) row_stats[g & 1] = total;
    }
    __syncthreads();
    const Stats s = row_stats[g & 1];
    mean = kRms ? 0.f : s.mean;
    rstd = rsqrtf(s.m2 * (1.0f / H) + p.eps);
  };
  auto stats_of = [&](const Chunk& c) {
    return kRms ? Stats{0.f, 0.f, c.sum_squares()} : c.stats();
  };

  long long row = slot;
  if (row >= rows) return;  // the whole CTA: no rows for this slot in this launch
#if __CUDA_ARCH__ >= 800
  const L2Hints hints = {l2_evict_first(), l2_evict_last()};
#else
  const NoHints hints;
#endif
  const T* x0 = static_cast<const T*>(p.x);
  T* y0 = static_cast<T*>(p.y);
  // Every thread reads the generation below; thread 0 wrote it.
  __syncthreads();

  // One loop body serves every row, the first included, so that NVRTC compiles each part
  // once. A step publishes the partial of row `next` (staged: from the stage, before awaiting
  // the row in registers), awaits and stores the row in registers (generation g), then moves
  // `next` into registers and starts staging the row after it.
  if constexpr (KR > 0) {
    // Each thread copies, and later reads, only its own vectors: no block barrier needed.
    constexpr long long kResident = (long long)KR * THREADS * V;
    const T* params[2] = {static_cast<const T*>(kWeight ? p.weight : p.bias),
                          static_cast<const T*>(p.bias)};
#pragma unroll
    for (int i = 0; i < (kWeight && kBias ? 2 : 1); ++i) {
#pragma unroll
      for (int k = 0; k < KR; ++k) {
        const long long local = (long long)(tid + k * THREADS) * V;
        if (begin + local < H) {
          Chunk::copy_async(resident + i * kResident + local, params[i] + begin + local);
        }
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    // Staged, the first load_staged() waits for these copies too; unstaged, nothing else would.
    if constexpr (!kStaged) asm volatile("cp.async.wait_all;" ::: "memory");
  }
  Chunk slice;
  bool holding = false;  // the registers hold row `row`, generation g
  long long next = row;
  unsigned long long g = base_generation - 1;  // g + 1 is next's generation
  float next_shift = row_shift<kRms>(x0 + next * H);
  if constexpr (kStaged) slice.prefetch(x0 + next * H, begin, tid, stage);
  for (;;) {
    const bool has_next = next < rows;
    if constexpr (kStaged) {
      if (has_next) {
        publish(kRms ? Stats{0.f, 0.f, Chunk::staged_sum_squares(stage, begin, tid)}
                     : Chunk::staged_stats(stage, begin, tid, next_shift),
                g + 1);
        // The stage has landed (publish read it): start the row after it towards L2.
        if (kPrefetch == 1 && tid == 0 && next + slots < rows) {
          prefetch_chunk<T, H, kChunk>(x0 + (next + slots) * H, begin);
        }
      }
    }
    if (holding) {
      float mean, rstd;
      combine(g, mean, rstd);
      if (kPrefetch == 2 && tid == 0 && next + slots < rows) {  // implies has_next
        prefetch_chunk<T, H, kChunk>(x0 + (next + slots) * H, begin);
      }
      constexpr bool kOneChannel = G > 0 && S % kChunk == 0;
      slice.template store<G, S, CG, kWeight, kBias, kOneChannel, KR>(
          y0 + row * H, p, row, begin, tid, mean, rstd, hints, resident);
    }
    if (!has_next) break;
    if constexpr (kStaged) {
      slice.load_staged(stage, begin, tid, next_shift);
      if (next + slots < rows) {
        slice.prefetch(x0 + (next + slots) * H, begin, tid, stage);
        next_shift = row_shift<kRms>(x0 + (next + slots) * H);
      }
    } else {
      slice.load(x0 + next * H, begin, tid, next_shift, hints.stream);
      publish(stats_of(slice), g + 1);
      if (next + slots < rows) next_shift = row_shift<kRms>(x0 + (next + slots) * H);
    }
    holding = true;
    row = next;
    next += slots;
    ++g;
  }
}

}  // namespace normjit
