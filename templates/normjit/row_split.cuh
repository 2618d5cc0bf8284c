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
// The exchange of partials between the CTAs of a row, and its workspace: exchange.cuh.
#pragma once

#include "normjit/exchange.cuh"
#include "normjit/row_common.cuh"

namespace normjit {

// Starts pulling this CTA's chunk of `row` (the one at `begin`) into L2 (prefetch_l2, vec.cuh).
template <class T, long long H, long long kChunk>
__device__ __forceinline__ void prefetch_chunk(const T* row, long long begin) {
  prefetch_l2(row, begin, begin + kChunk < H ? begin + kChunk : H);
}

// C: the row kernels' names (row_common.cuh), and
//   kThreads, kVectors     threads per CTA, vectors per thread (K)
//   kChunks                P: CTAs per row
//   kBlocksPerSm           CTAs per SM the launch bounds ask for
//   kStaged                the next row is staged in shared memory (cp.async)
//   kResidentVectors       KR: vectors per thread whose parameters stay in shared memory
//   kPrefetch              0: none; 1, 2: where the row after next is prefetched into L2
//   kDynamicSmemBytes      the plan's dynamic shared memory (checked against this kernel's use)
//   kWorkspaceSlotFloats   the plan's workspace floats per slot (checked against the exchange's)
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kBlocksPerSm) row_split(Params p) {
  using T = Held<C>;
  using P = typename C::Param;
  constexpr int THREADS = C::kThreads, V = C::kVec, KR = C::kResidentVectors;
  constexpr int kPrefetch = C::kPrefetch;
  constexpr bool kStaged = C::kStaged, kRms = C::kRms;
  constexpr long long H = C::kRowLength;
  using Chunk = Slice<C, C::kVectors>;
  constexpr long long kChunk = (long long)THREADS * C::kVectors * V;
  constexpr int kParams = C::kWeight + C::kBias;
  static_assert((C::kChunks - 1) * kChunk < H && H <= C::kChunks * kChunk,
                "P chunks cover the row, none empty");
  static_assert(C::kDynamicSmemBytes == (kStaged ? kChunk * sizeof(T) : 0) +
                                            (long long)KR * THREADS * V * sizeof(P) * kParams,
                "the plan's shared memory is the stage and the resident parameters");
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  T* stage = reinterpret_cast<T*>(dynamic_smem);
  // KR > 0 (LayerNorm-like rows, no groups): the weight and bias of the first KR vectors of each
  // thread stay in shared memory (after the stage, if any) for the whole launch, so every row
  // reads that part of its parameters from chip instead of from memory.
  P* resident = reinterpret_cast<P*>(dynamic_smem + (kStaged ? kChunk * sizeof(T) : 0));
  static_assert(KR == 0 || (C::kGroups == 0 && kParams > 0), "resident parameters");
  static_assert(kPrefetch == 0 || kPrefetch == 1 || (kStaged && kPrefetch == 2), "prefetch point");
  static_assert(!(kStaged && C::kResidual), "the stage holds x: no residual");
  using RowExchange = Exchange<THREADS, C::kChunks, kChunk, H, kRms>;
  static_assert(C::kWorkspaceSlotFloats == RowExchange::kSlotFloats,
                "the plan sizes the workspace as the exchange lays it out");
  __shared__ typename RowExchange::Shared exchange_shared;

  RowExchange exchange(exchange_shared, p.workspace);
  const long long slots = exchange.slots, slot = exchange.slot;
  const long long begin = exchange.chunk * kChunk;
  const long long rows = total_rows<C>(p);
  const int tid = threadIdx.x;
  exchange.start();
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
  const Epilogue<C> epi(p);
  // Every thread reads the generation below; thread 0 wrote it.
  __syncthreads();

  // One loop body serves every row, the first included, so that NVRTC compiles each part
  // once. A step publishes the partial of row `next` (staged: from the stage, before awaiting
  // the row in registers), awaits and stores the row in registers (generation g), then moves
  // `next` into registers and starts staging the row after it.
  if constexpr (KR > 0) {
    // Each thread copies, and later reads, only its own vectors: no block barrier needed.
    constexpr long long kResident = (long long)KR * THREADS * V;
    const P* params[2] = {static_cast<const P*>(C::kWeight ? p.weight : p.bias),
                          static_cast<const P*>(p.bias)};
#pragma unroll
    for (int i = 0; i < kParams; ++i) {
#pragma unroll
      for (int k = 0; k < KR; ++k) {
        const long long local = (long long)(tid + k * THREADS) * V;
        if (begin + local < H) {
          copy_async<P, V>(resident + i * kResident + local, params[i] + begin + local);
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
  unsigned long long g = exchange.base_generation() - 1;  // g + 1 is next's generation
  // Each row's place in the tensors is computed once, when it becomes the row after next, and
  // carried (the trailing forms' two-level strides make it dearer); GroupNorm's contiguous rows
  // are cheaper to place again at each use than to hold (fewer registers).
  RowIo<C> held(p, row), coming = held;  // the row in registers; `next`
  const auto at = [&](long long r, const RowIo<C>& carried) {
    if constexpr (C::kGroups > 0) {
      return RowIo<C>(p, r);
    } else {
      return carried;
    }
  };
  float next_shift = held.shift();
  if constexpr (kStaged) slice.prefetch(held.x, begin, tid, stage);
  for (;;) {
    const bool has_next = next < rows;
    const bool has_after = next + slots < rows;
    const RowIo<C> after_rows = C::kGroups > 0 ? held : RowIo<C>(p, next + slots);
    const auto after = [&] { return at(next + slots, after_rows); };  // used where has_after
    if constexpr (kStaged) {
      if (has_next) {
        exchange.publish(kRms ? Stats{0.f, 0.f, Chunk::staged_sum_squares(stage, begin, tid)}
                              : Chunk::staged_stats(stage, begin, tid, next_shift),
                         g + 1);
        // The stage has landed (publish read it): start the row after it towards L2.
        if (kPrefetch == 1 && tid == 0 && has_after) {
          prefetch_chunk<typename C::X, H, kChunk>(after().x, begin);
        }
      }
    }
    if (holding) {
      float mean, rstd;
      exchange.combine(g, p.eps, mean, rstd);
      if (kPrefetch == 2 && tid == 0 && has_after) {  // implies has_next
        prefetch_chunk<typename C::X, H, kChunk>(after().x, begin);
      }
      if (exchange.chunk == 0 && tid == 0) save_row_stats<C>(p, row, slice.shift_ + mean, rstd);
      constexpr bool kOneChannel = C::kGroups > 0 && C::kSpatial % kChunk == 0;
      slice.template store<kOneChannel, KR>(at(row, held), p, epi, row, begin, tid, mean, rstd,
                                            hints, resident);
    }
    if (!has_next) break;
    if constexpr (kStaged) {
      slice.load_staged(stage, begin, tid, next_shift);
      if (has_after) {
        slice.prefetch(after().x, begin, tid, stage);
        next_shift = after().shift();
      }
    } else {
      slice.load(at(next, coming), begin, tid, next_shift, hints.stream);
      exchange.publish(stats_of(slice), g + 1);
      if (has_after) {
        if (kPrefetch == 1 && tid == 0) prefetch_chunk<typename C::X, H, kChunk>(after().x, begin);
        next_shift = after().shift();
      }
    }
    held = coming;
    coming = after_rows;
    holding = true;
    row = next;
    next += slots;
    ++g;
  }
}

}  // namespace normjit
