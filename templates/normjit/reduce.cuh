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
// `scratch` holds ROWS * max(1, TEAM / 32) values. kReuse: the caller writes `scratch` again
// after this call (another reduction), so the call ends with a barrier; without it the caller
// gives each reduction its own scratch and no thread waits for the others' reads.
// kTeamBarriers: in a CTA of several teams of whole warps, each team waits at its own named
// barrier (barrier 1 + threadIdx.y, TEAM threads; barrier 0 is __syncthreads') instead of the
// CTA's, so a team whose loads arrived first does not wait at every row for the slowest team of
// its CTA. The arithmetic and its order are the same either way.
template <int TEAM, int ROWS, bool kTeamBarriers>
__device__ __forceinline__ void team_sync() {
  if constexpr (kTeamBarriers && ROWS > 1) {
    static_assert(TEAM % 32 == 0, "a named barrier counts whole warps");
    static_assert(ROWS < 16, "16 barriers a CTA: barrier 0 and one for each team");
    asm volatile("bar.sync %0, %1;" ::"r"(threadIdx.y + 1), "n"(TEAM) : "memory");
  } else {
    __syncthreads();
  }
}

template <int TEAM, int ROWS, bool kReuse = true, bool kTeamBarriers = false, class V>
__device__ __forceinline__ V team_reduce(V v, V* scratch) {
  constexpr int kWidth = TEAM < 32 ? TEAM : 32;
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) v = merge(v, shfl_down(v, offset, kWidth));
  if constexpr (TEAM <= 32) {
    return shfl_first(v, kWidth);
  } else {
    constexpr int kWarps = TEAM / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    V* row_scratch = scratch + threadIdx.y * kWarps;
    if (lane == 0) row_scratch[warp] = v;
    team_sync<TEAM, ROWS, kTeamBarriers>();
    if constexpr (kWarps * sizeof(V) <= 32) {
      // Every thread merges the warps' values itself, value i with value i + offset, offset
      // halving: the order of the shuffles below, so the same bits, with one barrier and no
      // broadcast through shared memory (on few-row launches each barrier is latency).
      V part[kWarps];
#pragma unroll
      for (int i = 0; i < kWarps; ++i) part[i] = row_scratch[i];
#pragma unroll
      for (int offset = kWarps / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int i = 0; i < offset; ++i) part[i] = merge(part[i], part[i + offset]);
      }
      if constexpr (kReuse) team_sync<TEAM, ROWS, kTeamBarriers>();
      return part[0];
    } else {
      // Many warps (or wide values): the team's first warp merges them with shuffles (log2
      // steps, fewer registers than holding them all) and leaves the total in scratch.
      if (warp == 0) {
        V total = lane < kWarps ? row_scratch[lane] : V{};
#pragma unroll
        for (int offset = kWarps / 2; offset > 0; offset /= 2) {
          total = merge(total, shfl_down(total, offset, 32));
        }
        if (lane == 0) row_scratch[0] = total;
      }
      team_sync<TEAM, ROWS, kTeamBarriers>();
      const V total = row_scratch[0];
      if constexpr (kReuse) team_sync<TEAM, ROWS, kTeamBarriers>();
      return total;
    }
  }
}

}  // namespace normjit
