// Rows too long to keep on chip even split over every SM (more than the split kernel's CTAs
// hold: 2^22 f32 elements on 132 SMs, fewer on smaller parts): each row is split over P
// co-resident CTAs (cooperative launch, as row_split), and each streams its part of kSeg
// elements twice: statistics, the exchange of partials with the row's other CTAs
// (exchange.cuh), then normalize. Correct for any length; x is read twice, but every SM
// streams it, however few the rows. Each pass over a part is a loop with a constant trip count
// of pieces of K vectors per thread (K vectors in flight per thread).
#pragma once

#include "normjit/exchange.cuh"
#include "normjit/row_common.cuh"

namespace normjit {

template <class T, bool kRms, long long H, int THREADS, int V, int K, long long P, long long kSeg,
          int G, long long S, int CG, bool kWeight, bool kBias>
__global__ void __launch_bounds__(THREADS, 1) row_stream(Params p) {
  using Piece = Slice<T, K, V, THREADS, H>;
  constexpr long long kPiece = (long long)THREADS * K * V;
  static_assert(kSeg % kPiece == 0, "a part is whole pieces");
  static_assert((P - 1) * kSeg < H && H <= P * kSeg, "P parts of kSeg cover the row");
  constexpr long long kPieces = kSeg / kPiece;  // per part; the last part's tail is masked
  using RowExchange = Exchange<THREADS, P, kSeg, H, kRms>;
  __shared__ typename RowExchange::Shared exchange_shared;

  const long long slots = gridDim.x / P;
  const long long slot = blockIdx.x / P;
  const long long chunk = blockIdx.x - slot * P;
  const long long begin = chunk * kSeg;
  RowExchange exchange(exchange_shared, p.workspace, slot, chunk);
  const long long rows = total_rows<G>(p);
  const int tid = threadIdx.x;
  exchange.start();
  if (slot >= rows) return;  // the whole CTA: no rows for this slot in this launch
  const T* x0 = static_cast<const T*>(p.x);
  T* y0 = static_cast<T*>(p.y);
  // Every thread reads the generation below; thread 0 wrote it.
  __syncthreads();
  unsigned long long g = exchange.base_generation();
  for (long long row = slot; row < rows; row += slots, ++g) {
    const T* x = x0 + row * H;
    const float shift = row_shift<kRms>(x);
    Stats acc = {0.f, 0.f, 0.f};
    for (long long i = 0; i < kPieces; ++i) {
      Piece piece;
      piece.load(x, begin + i * kPiece, tid, shift);
      if constexpr (kRms) {
        acc.m2 += piece.sum_squares();
      } else {
        acc = merge(acc, piece.stats());
      }
    }
    exchange.publish(acc, g);
    float mean, rstd;
    exchange.combine(g, p.eps, mean, rstd);
    for (long long i = 0; i < kPieces; ++i) {
      Piece piece;
      piece.load(x, begin + i * kPiece, tid, shift);
      piece.template store<G, S, CG, kWeight, kBias>(y0 + row * H, p, row, begin + i * kPiece, tid,
                                                     mean, rstd);
    }
  }
}

}  // namespace normjit
