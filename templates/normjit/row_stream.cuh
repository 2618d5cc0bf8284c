// The fallback for rows too long to keep on chip even split over every SM: one CTA per row
// streams it twice (statistics, then normalize). Correct for any length; reads x twice.
#pragma once

#include "normjit/row_common.cuh"

namespace normjit {

template <class T, bool kRms, long long H, int THREADS, int V, int G, long long S, int CG,
          bool kWeight, bool kBias>
__global__ void __launch_bounds__(THREADS) row_stream(Params p) {
  constexpr int kWarps = THREADS / 32;
  __shared__ Stats scratch[kWarps];
  const long long row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + row * H;
  const float shift = row_shift<kRms>(x);
  Stats acc = {0.f, 0.f, 0.f};
  float squares = 0.f;
  for (long long e = (long long)threadIdx.x * V; e < H; e += (long long)THREADS * V) {
    Slice<T, 1, V, THREADS, H> slice;
    slice.load(x, e - (long long)threadIdx.x * V, threadIdx.x, shift);
    if constexpr (kRms) {
      squares += slice.sum_squares();
    } else {
      acc = merge(acc, slice.stats());
    }
  }
  float mean = 0.f, rstd;
  if constexpr (kRms) {
    rstd = rsqrtf(team_reduce<THREADS, 1>(squares, reinterpret_cast<float*>(scratch)) * (1.0f / H) +
                  p.eps);
  } else {
    const Stats s = team_reduce<THREADS, 1>(acc, scratch);
    mean = s.mean;
    rstd = rsqrtf(s.m2 * (1.0f / H) + p.eps);
  }
  T* y = static_cast<T*>(p.y) + row * H;
  for (long long e = (long long)threadIdx.x * V; e < H; e += (long long)THREADS * V) {
    Slice<T, 1, V, THREADS, H> slice;
    const long long begin = e - (long long)threadIdx.x * V;
    slice.load(x, begin, threadIdx.x, shift);
    slice.template store<G, S, CG, kWeight, kBias>(y, p, row, begin, threadIdx.x, mean, rstd);
  }
}

}  // namespace normjit
