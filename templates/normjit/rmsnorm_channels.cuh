// RMSNorm over dim 1 of x[N, C, S] (S = product of the spatial dims):
//   y[n, c, s] = x[n, c, s] / sqrt(mean_c x[n, c, s]^2 + eps) * weight[c]
//
// A CTA owns TX*V consecutive spatial positions of one n; thread (tx, ty) owns V of them
// and the channels ty, ty + TY, ... so every access is a V-wide vector along the
// contiguous spatial dim, coalesced across the warp. With kCached the thread's
// ceil(C/TY)*V values stay in registers between the reduction and the write (x is read
// once); otherwise the second pass reads them again.
#pragma once

#include "normjit/params.cuh"
#include "normjit/vec.cuh"

namespace normjit {

template <class T, int C, long long S, int TX, int TY, int V, bool kWeight, bool kCached>
__global__ void __launch_bounds__(TX* TY) rmsnorm_channels(Params p) {
  constexpr long long kTile = (long long)TX * V;
  constexpr long long kTiles = (S + kTile - 1) / kTile;
  constexpr int kPerThread = (C + TY - 1) / TY;  // channels per thread
  constexpr bool kEvenChannels = C % TY == 0;

  const long long n = blockIdx.x / kTiles;
  const long long tile = blockIdx.x - n * kTiles;
  const long long s = tile * kTile + (long long)threadIdx.x * V;
  const bool active = s < S;  // S % V == 0 whenever V > 1, so the whole vector is in range
  const T* x = static_cast<const T*>(p.x) + n * (C * S) + s;
  T* y = static_cast<T*>(p.y) + n * (C * S) + s;
  const T* weight = static_cast<const T*>(p.weight);

  float cached[kCached ? kPerThread : 1][V];
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.y + i * TY;
    if (active && (kEvenChannels || c < C)) {
      float v[V];
      load_vec<T, V>(x + c * S, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sum[j] += v[j] * v[j];
        if (kCached) cached[kCached ? i : 0][j] = v[j];
      }
    }
  }

  float inv[V];
  if (TY > 1) {
    __shared__ float partial[TY][V][TX];  // [ty][j][tx]: consecutive tx hit consecutive banks
#pragma unroll
    for (int j = 0; j < V; ++j) partial[threadIdx.y][j][threadIdx.x] = sum[j];
    __syncthreads();
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float total = 0.f;
#pragma unroll
      for (int t = 0; t < TY; ++t) total += partial[t][j][threadIdx.x];
      inv[j] = rsqrtf(total * (1.0f / C) + p.eps);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) inv[j] = rsqrtf(sum[j] * (1.0f / C) + p.eps);
  }
  if (!active) return;

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.y + i * TY;
    if (kEvenChannels || c < C) {
      float v[V];
      if (kCached) {
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = cached[kCached ? i : 0][j];
      } else {
        load_vec<T, V>(x + c * S, v);
      }
      const float w = kWeight ? to_float(weight[c]) : 1.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = v[j] * inv[j] * w;
      store_vec<T, V>(y + c * S, v);
    }
  }
}

}  // namespace normjit
