// Rows too long to keep on chip even split over every SM (more than the split kernel's CTAs
// hold: 2^22 f32 elements on 132 SMs, fewer on smaller parts): each row is split over P
// co-resident CTAs (cooperative launch, as row_split), and each streams its part of kSeg
// elements twice: statistics, the exchange of partials with the row's other CTAs
// (exchange.cuh), then normalize (a row a pass: the pieces in reverse, so that the first ones
// it reads are those the statistics read last, still in L2). Correct for any length; x is read
// twice, but every SM streams it, however few the rows; parameters as long as a row are read
// once per two rows. Each pass over a part is a loop with a constant trip count of pieces of K
// vectors per thread (K vectors in flight per thread).
#pragma once

#include "normjit/exchange.cuh"
#include "normjit/row_common.cuh"

namespace normjit {

// C: the row kernels' names (row_common.cuh), and
//   kThreads, kVectors     threads per CTA, vectors per thread per piece (K)
//   kParts                 P: CTAs per row
//   kSegment               elements of a row each CTA streams (kSeg)
//   kWorkspaceSlotFloats   the plan's workspace floats per slot (checked against the exchange's)
// With a residual, both passes read x and the residual (h is written in the second, after
// every CTA of the row took its shift), so the residual may be updated in place.
template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) row_stream(Params p) {
  constexpr int THREADS = C::kThreads;
  constexpr long long H = C::kRowLength, P = C::kParts, kSeg = C::kSegment;
  constexpr bool kRms = C::kRms;
  using Piece = Slice<C, C::kVectors>;
  constexpr long long kPiece = (long long)THREADS * C::kVectors * C::kVec;
  static_assert(kSeg % kPiece == 0, "a part is whole pieces");
  static_assert((P - 1) * kSeg < H && H <= P * kSeg, "P parts of kSeg cover the row");
  constexpr long long kPieces = kSeg / kPiece;  // per part; the last part's tail is masked
  using RowExchange = Exchange<THREADS, P, kSeg, H, kRms>;
  static_assert(C::kWorkspaceSlotFloats == RowExchange::kSlotFloats,
                "the plan sizes the workspace as the exchange lays it out");
  __shared__ typename RowExchange::Shared exchange_shared;

  RowExchange exchange(exchange_shared, p.workspace);
  const long long slots = exchange.slots, slot = exchange.slot;
  const long long begin = exchange.chunk * kSeg;
  const long long rows = total_rows<C>(p);
  const int tid = threadIdx.x;
  exchange.start();
  if (slot >= rows) return;  // the whole CTA: no rows for this slot in this launch
  const Epilogue<C> epi(p);
  // Where the parameters are as long as the row (LayerNorm, RMSNorm with a weight), two rows
  // of the slot are normalized in one pass over them, so they are read once per two rows: both
  // rows' partials are published (generations g and g+1) before either is awaited, which also
  // hides the first row's exchange behind the second's statistics.
  constexpr int kRowsPerPass = C::kGroups == 0 && (C::kWeight || C::kBias) ? 2 : 1;
  // A row a pass (no parameters as long as the row; GroupNorm): the second pass takes the
  // pieces in reverse, so that the first it reads are the last the statistics read, the ones
  // still in L2 (a part longer than L2 keeps evicts its first pieces before its last), and all
  // its accesses (x read for the last time, y, h) are evict-first, so that they go before the
  // lines of x still to be read again. Each piece is normalized alone: no bits change. On an
  // H200 (normjit bench, this build beside the previous one; performance-notes) that ran such
  // rows 2-6% faster, and rows of two a pass, done the same way, 5-6% slower: they keep the
  // forward order and plain accesses.
  constexpr bool kReverse = kRowsPerPass == 1;
#if __CUDA_ARCH__ >= 800
  const auto hints = [] {
    if constexpr (kReverse) {
      const L2Hint last_use = l2_evict_first();
      return L2Hints{last_use, last_use};
    } else {
      return NoHints{};
    }
  }();
#else
  const NoHints hints;
#endif
  // Every thread reads the generation below; thread 0 wrote it.
  __syncthreads();
  unsigned long long g = exchange.base_generation();
  for (long long row = slot; row < rows; row += kRowsPerPass * slots) {
    const int n = kRowsPerPass == 2 && row + slots < rows ? 2 : 1;  // the same in every CTA
    float shift[kRowsPerPass], mean[kRowsPerPass], rstd[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      if (r >= n) break;
      const RowIo<C> io(p, row + r * slots);
      shift[r] = io.shift();
      Stats acc = {0.f, 0.f, 0.f};
      for (long long i = 0; i < kPieces; ++i) {
        Piece piece;
        piece.load(io, begin + i * kPiece, tid, shift[r]);
        if constexpr (kRms) {
          acc.m2 += piece.sum_squares();
        } else {
          acc = merge(acc, piece.stats());
        }
      }
      exchange.publish(acc, g + r);
    }
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      if (r < n) {
        exchange.combine(g + r, p.eps, mean[r], rstd[r]);
        if (exchange.chunk == 0 && tid == 0) {
          save_row_stats<C>(p, row + r * slots, shift[r] + mean[r], rstd[r]);
        }
      }
    }
    const RowIo<C> io[2] = {RowIo<C>(p, row), RowIo<C>(p, n == 2 ? row + slots : row)};
    for (long long step = 0; step < kPieces; ++step) {
      const long long i = kReverse ? kPieces - 1 - step : step;  // (kReverse: above)
      const long long piece_begin = begin + i * kPiece;
      Piece piece[kRowsPerPass];
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r < n) piece[r].load(io[r], piece_begin, tid, shift[r], hints.stream);
      }
      // The second row's store finds the parameters the first one just read in L1 or L2.
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r < n) {
          piece[r].template store<false, 0, decltype(hints)>(
              io[r], p, epi, row + r * slots, piece_begin, tid, mean[r], rstd[r], hints);
        }
      }
    }
    g += n;
  }
}

}  // namespace normjit
