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
  // Channel c = threadIdx.y + i * TY of this thread is at x + i * (TY * S): constant offsets
  // from one base (less address arithmetic for NVRTC to fold: a faster compile).
  const long long first = n * (C * S) + (long long)threadIdx.y * S + s;
  const T* x = static_cast<const T*>(p.x) + first;
  T* y = static_cast<T*>(p.y) + first;
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
      load_vec<T, V>(x + i * (TY * S), v);
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
    // The TX*V totals, each over TY partials, are spread over the CTA's threads; then every
    // thread reads back its V factors: TY + V shared loads per thread instead of TY*V (and a
    // smaller unrolled body for NVRTC to compile).
    __shared__ float factor[V][TX];
    constexpr int kThreads = TX * TY, kSums = TX * V;
    const int tid = threadIdx.y * TX + threadIdx.x;
#pragma unroll
    for (int r = 0; r < (kSums + kThreads - 1) / kThreads; ++r) {
      const int k = tid + r * kThreads;
      if (kSums % kThreads == 0 || k < kSums) {
        const int j = k / TX, position = k % TX;
        float total = 0.f;
#pragma unroll
        for (int t = 0; t < TY; ++t) total += partial[t][j][position];
        factor[j][position] = rsqrtf(total * (1.0f / C) + p.eps);
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < V; ++j) inv[j] = factor[j][threadIdx.x];
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
        load_vec<T, V>(x + i * (TY * S), v);
      }
      const float w = kWeight ? to_float(weight[c]) : 1.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = v[j] * inv[j] * w;
      store_vec<T, V>(y + i * (TY * S), v);
    }
  }
}

}  // namespace normjit
