// What the backward kernels share (row_backward.cuh, row_split_backward.cuh, group_backward.cuh,
// channels_backward.cuh): a pair of sums reduced together, reads of what other CTAs wrote, the
// grid barrier that orders their phases, and the fixed-order sum of the CTAs' partials of dweight
// and dbias. No floating-point atomics anywhere: CTAs exchange f32 partials through the workspace
// and add them in a fixed order.
#pragma once

#include "normjit/dtype.cuh"
#include "normjit/reduce.cuh"

namespace normjit {

// The grid barrier's counter, padded to 32 bytes (generator/plan.cpp: kBackwardHeaderFloats).
constexpr int kBarrierFloats = 8;
constexpr int kSlotAlign = 8;    // floats (generator/plan.cpp: kBackwardSlotAlign)
constexpr int kColumnLanes = 8;  // lanes that sum one column's partials (a power of 2 <= 32)

// Floats rounded up to whole kSlotAlign: every workspace region starts 32-byte aligned.
__host__ __device__ constexpr long long padded_floats(long long floats) {
  return (floats + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
}

// Two sums reduced together: LayerNorm's row sums of g and g * xhat (row_backward.cuh);
// GroupNorm's sums of dy and dy * xhat (group_backward.cuh).
struct GradSums {
  float g, gx;
};
__device__ __forceinline__ GradSums merge(GradSums a, GradSums b) {
  return {a.g + b.g, a.gx + b.gx};
}
__device__ __forceinline__ GradSums shfl_down(GradSums s, int offset, int width) {
  return {__shfl_down_sync(0xffffffffu, s.g, offset, width),
          __shfl_down_sync(0xffffffffu, s.gx, offset, width)};
}
__device__ __forceinline__ GradSums shfl_first(GradSums s, int width) {
  return {__shfl_sync(0xffffffffu, s.g, 0, width), __shfl_sync(0xffffffffu, s.gx, 0, width)};
}

// A float another CTA wrote before a grid barrier: read through L2 (ld.global.cg), never
// from a stale L1 line.
__device__ __forceinline__ float load_global_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// Returns once every CTA of the grid has arrived (all co-resident: a cooperative launch); the
// writes of every CTA before it are visible to the reads of every CTA after it. Needs no reset:
// CTA 0 adds 2^31 - (gridDim.x - 1) and the others 1, so each barrier flips the counter's top
// bit whatever its value (the scheme of the CUDA cooperative groups' grid sync). Launches on one
// counter must be ordered (one workspace per stream).
__device__ __forceinline__ void grid_barrier(unsigned int* counter) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();
    const unsigned int old = atomicAdd(counter, add);
    while (((old ^ *static_cast<volatile unsigned int*>(counter)) & 0x80000000u) == 0) {
      __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}

// After a grid barrier: the parameters' gradients from the CTAs' f32 partials. CTA b's slot,
// slots + b * kSlotFloats, holds kParams partials of kLength columns each, kPadded apart; column
// e of partial i goes to out[i][e] in P (out[0]: dweight or, without a weight, dbias).
// Each column's partials summed by Q lanes of one warp: lane q adds the slots q, q + Q,
// q + 2Q, ... in order, then the Q sums are added in a fixed tree (shuffles), so the order
// depends on gridDim.x only. Q lanes per column keep Q times as many loads in flight as one
// thread per column would (a few thousand columns against hundreds of slots: one thread per
// column would wait on hundreds of dependent L2 round trips). Every thread of the grid calls it;
// `tid` is its index in its CTA of kThreads threads.
template <class P, int kThreads, int kParams, long long kLength, long long kPadded,
          long long kSlotFloats>
__device__ __forceinline__ void add_slots_in_order(const float* slots, int tid, void* out0,
                                                   void* out1) {
  static_assert(kThreads % 32 == 0, "whole warps sum the partials");
  constexpr int Q = kColumnLanes, kColumnsPerWarp = 32 / Q;
  constexpr long long kColumns = kParams * kLength;
  const int lane = tid % 32;
  const long long warps = (long long)gridDim.x * (kThreads / 32);
  const long long warp = (long long)blockIdx.x * (kThreads / 32) + tid / 32;
  const int n = gridDim.x, q = lane % Q;
  // The same trip count for every lane of the warp (the shuffles need all 32).
  for (long long first = warp * kColumnsPerWarp; first < kColumns;
       first += warps * kColumnsPerWarp) {
    const long long c = first + lane / Q;
    const bool valid = c < kColumns;
    const int param = kParams == 2 && c >= kLength ? 1 : 0;
    const long long e = valid ? c - param * kLength : 0;
    const float* column = slots + param * kPadded + e;
    float sum = 0.f;
    if (valid) {
      int s = q;
      for (; s + 3 * Q < n; s += 4 * Q) {  // four loads in flight, added in order
        float part[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          part[i] = load_global_cg(column + (long long)(s + i * Q) * kSlotFloats);
        sum = (((sum + part[0]) + part[1]) + part[2]) + part[3];
      }
      for (; s < n; s += Q) sum += load_global_cg(column + (long long)s * kSlotFloats);
    }
#pragma unroll
    for (int offset = Q / 2; offset > 0; offset /= 2) {
      sum += __shfl_down_sync(0xffffffffu, sum, offset, Q);
    }
    if (valid && q == 0) static_cast<P*>(param == 0 ? out0 : out1)[e] = from_float<P>(sum);
  }
}

}  // namespace normjit
