// Rows too long for one CTA (the LayerNorm and GroupNorm seeds: millions of elements per
// row): each row is split into P chunks of THREADS*K*V elements, one per CTA, and every CTA
// keeps its chunk in registers, so x is read from memory once.
//
// The grid holds `slots` groups of P co-resident CTAs (launched cooperatively, so all are
// resident at once); slot s works on rows s, s + slots, ... For each row a CTA publishes its
// chunk's (mean, M2) in the slot's workspace, waits for the partials of the other P-1 CTAs,
// merges the P partials with Chan's formula and normalizes its chunk from registers.
//
// kStaged (sm_80+, 4-16 byte vectors; the plan gives kChunk * sizeof(T) bytes of dynamic
// shared memory, then the resident parameters of KR below): the next row's chunk streams into
// shared memory (cp.async) while this row is in registers, and its partial is published *before*
// this row's barrier is awaited, so each row's barrier latency overlaps the previous row's
// normalize and store and the next row's load, instead of adding to them.
//
// kPrefetch (sm_90+, rows with no parameters, or few, read again for every row): once a row's
// partial is published (staged: the stage holds it; unstaged: the registers do), thread 0
// starts pulling the chunk of the row `slots` after it into L2 with one bulk prefetch, so
// DRAM keeps reading while partials are exchanged and chunks normalized; the later copy of
// that row finds it in L2. 1: right after the partial is published; 2 (staged only): after
// this row's barrier, just before its store (GroupNorm: fewer of the prefetched lines evicted
// before use). Where LayerNorm's parameters stream from L2 for every row, the prefetched rows
// evicted them instead and the seeds ran slower (docs/performance-notes.md).
//
// L2 hints (sm_80+, vec.cuh): y is stored evict-first and LayerNorm's parameters, read again
// for every row, are loaded evict-last, so fewer of them are evicted by the streaming rows.
// x is not hinted where cp.async moves it (see Slice::prefetch).
//
// Workspace: one region of 16P+4 floats per slot, the same whatever the launch's slot count:
// two u64 arrival counters (by generation parity), then partials[4][P] (by generation mod 4),
// each one 64-bit word in a 16-byte slot. Row i of a slot is generation g. A partial is the
// chunk's (mean, M2); its count is not sent, since every reader knows it (min(kChunk,
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

#include "normjit/row_common.cuh"

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
  constexpr long long kPartialWords = 2;  // 64-bit words per partial's slot (see Workspace)
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  T* stage = reinterpret_cast<T*>(dynamic_smem);
  // KR > 0 (LayerNorm-like rows, G == 0): the weight and bias of the first KR vectors of each
  // thread stay in shared memory (after the stage, if any) for the whole launch, so every row
  // reads that part of its parameters from chip instead of from memory.
  T* resident = stage + (kStaged ? kChunk : 0);
  static_assert(KR == 0 || (G == 0 && (kWeight || kBias)), "resident parameters");
  static_assert(kPrefetch == 0 || kPrefetch == 1 || (kStaged && kPrefetch == 2), "prefetch point");
  __shared__ Stats scratch[kWarps];
  // The warps that merge the P partials (one per thread), and their totals by generation parity.
  constexpr int kMergeWarps = (P + 31) / 32;
  static_assert(kMergeWarps <= kWarps, "one thread per partial");
  __shared__ Stats row_stats[2][kMergeWarps];
  __shared__ unsigned long long base_generation;

  const long long slots = gridDim.x / P;
  const long long slot = blockIdx.x / P;
  const long long chunk = blockIdx.x - slot * P;
  const long long begin = chunk * kChunk;
  float* region = p.workspace + slot * (8 * kPartialWords * P + 4);  // 16-byte aligned
  unsigned long long* counters = reinterpret_cast<unsigned long long*>(region);
  unsigned long long* partials = reinterpret_cast<unsigned long long*>(region + 4);
  const long long rows = total_rows<G>(p);
  const int tid = threadIdx.x;

  // The slot's first generation of this launch. Counters grow by whole generations per
  // launch, and the generations in progress cannot complete without this CTA, so
  // floor(count / P) of each counter is exact. Read by all after the barrier below.
  if (tid == 0) base_generation = load_acquire(&counters[0]) / P + load_acquire(&counters[1]) / P;

  // A CTA's partial: block-reduced from each thread's, then published by thread 0.
  // (Publishing from warp 0 after a single block barrier, without handing the total to every
  // thread, ran the split seeds slower on the H100: docs/performance-notes.md.)
  auto publish = [&](Stats mine, unsigned long long g) {
    if constexpr (kRms) {
      mine = {0.f, 0.f, team_reduce<THREADS, 1>(mine.m2, reinterpret_cast<float*>(scratch))};
    } else {
      mine = team_reduce<THREADS, 1>(mine, scratch);
    }
    if (tid == 0) {
      store_relaxed(partials + ((g & 3) * P + chunk) * kPartialWords,
                    pack_partial(mine, generation_tag(g)));
      // Counts generations for the next launch only: nothing here waits on it.
      asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(&counters[g & 1]) : "memory");
    }
  };
  // Waits for generation g's P partials and merges them.
  auto combine = [&](unsigned long long g, float& mean, float& rstd) {
    // The first ceil(P/32) warps poll the P partials, one per thread, until each carries g's
    // tag, and merge them per warp; after the barrier every thread merges the warps' totals
    // (in the same order everywhere: results do not depend on arrival order). They are left
    // in row_stats[g & 1]: alternating slots need no second barrier before the next combine
    // writes one, since the combine in between has its barrier after every thread read this
    // one. (On the H100 dropping that barrier ran every split seed faster.)
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
        // Every chunk but the last is full.
        mine = unpack_partial(word, float(tid + 1 < P ? kChunk : H - (P - 1) * kChunk));
      }
      __syncwarp();
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const Stats other = shfl_down(mine, offset, 32);
        mine = kRms ? Stats{0.f, 0.f, mine.m2 + other.m2} : merge(mine, other);
      }
      if (tid % 32 == 0) row_stats[g & 1][tid / 32] = mine;
    }
    __syncthreads();
    Stats s = row_stats[g & 1][0];
#pragma unroll
    for (int w = 1; w < kMergeWarps; ++w) {
      const Stats other = row_stats[g & 1][w];
      s = kRms ? Stats{0.f, 0.f, s.m2 + other.m2} : merge(s, other);
    }
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
      if (kPrefetch == 1 && tid == 0 && next + slots < rows) {
        prefetch_chunk<T, H, kChunk>(x0 + (next + slots) * H, begin);
      }
      if (next + slots < rows) next_shift = row_shift<kRms>(x0 + (next + slots) * H);
    }
    holding = true;
    row = next;
    next += slots;
    ++g;
  }
}

}  // namespace normjit
