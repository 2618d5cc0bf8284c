// Reductions: partial statistics (count, mean, M2) merged with Chan's formula, and team
// reductions over TEAM threads (a warp segment, a warp, or several warps via shared memory).
// Variance never comes from E[x^2] - mean^2.
#pragma once

namespace normjit {

struct Stats {
  float n;  // elements
  float mean;
  float m2;  // sum of squared deviations from mean
};

// Chan et al.: the statistics of the union of two disjoint sets.
__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float delta = b.mean - a.mean;
  const float fb = __fdividef(b.n, n);  // a weight in [0, 1]: 2 ulp is plenty, and cheap
  return {n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.n * fb};
}

__device__ __forceinline__ float merge(float a, float b) { return a + b; }

__device__ __forceinline__ Stats shfl_down(Stats s, int offset, int width) {
  return {__shfl_down_sync(0xffffffffu, s.n, offset, width),
          __shfl_down_sync(0xffffffffu, s.mean, offset, width),
          __shfl_down_sync(0xffffffffu, s.m2, offset, width)};
}
__device__ __forceinline__ float shfl_down(float v, int offset, int width) {
  return __shfl_down_sync(0xffffffffu, v, offset, width);
}
__device__ __forceinline__ Stats shfl_first(Stats s, int width) {
  return {__shfl_sync(0xffffffffu, s.n, 0, width), __shfl_sync(0xffffffffu, s.mean, 0, width),
          __shfl_sync(0xffffffffu, s.m2, 0, width)};
}
__device__ __forceinline__ float shfl_first(float v, int width) {
  return __shfl_sync(0xffffffffu, v, 0, width);
}

// Reduces v over the TEAM threads with the same threadIdx.y (blockDim = (TEAM, ROWS)); every
// thread of the team gets the identical result. All threads of the block must call it.
// `scratch` holds ROWS * max(1, TEAM / 32) values.
template <int TEAM, int ROWS, class V>
__device__ __forceinline__ V team_reduce(V v, V* scratch) {
  constexpr int kWidth = TEAM < 32 ? TEAM : 32;
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) v = merge(v, shfl_down(v, offset, kWidth));
  if constexpr (TEAM <= 32) {
    return shfl_first(v, kWidth);
  } else {
    // Lane 0 of each warp leaves its value in scratch; the team's first warp merges them
    // with shuffles (log2 steps, not one sequential merge per warp in every thread) and
    // leaves the total in scratch for everyone.
    constexpr int kWarps = TEAM / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    V* row_scratch = scratch + threadIdx.y * kWarps;
    if (lane == 0) row_scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
      V total = lane < kWarps ? row_scratch[lane] : V{};
#pragma unroll
      for (int offset = kWarps / 2; offset > 0; offset /= 2) {
        total = merge(total, shfl_down(total, offset, 32));
      }
      if (lane == 0) row_scratch[0] = total;
    }
    __syncthreads();
    const V total = row_scratch[0];
    __syncthreads();  // scratch may be reused by the caller
    return total;
  }
}

}  // namespace normjit
