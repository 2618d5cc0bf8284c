// What the backward kernels share (row_backward.cuh, row_split_backward.cuh, group_backward.cuh,
// channels_backward.cuh): a pair of sums reduced together, reads of what other CTAs wrote, the
// grid barrier that orders their phases, and the fixed-order sum of the CTAs' partials of dweight
// and dbias. No floating-point atomics anywhere: CTAs exchange f32 partials through the workspace
// and add them in a fixed order.
#pragma once

#include "normjit/dtype.cuh"
#include "normjit/epilogue.cuh"
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

// The gradient that reaches the affine step's output where the forward applied an activation
// (C::kActivation, the epilogue's): dy * act'(z), z = xhat * w + b the forward's value before the
// activation (w the weight used, offset included, 1 without a weight; b the bias, 0 without).
// Every backward kernel takes it in place of dy, wherever it reads dy: the gradients of the
// norm, of the weight (sum dz * xhat) and of the bias (sum dz) are those of the plain norm
// with dy replaced by dz. Without an activation it is dy itself.
template <class C>
__device__ __forceinline__ float through_activation(float dy, float xhat, float w, float b) {
  if constexpr (C::kActivation == Activation::kNone) {
    return dy;
  } else {
    return dy * activation_slope<C::kActivation>(fmaf(xhat, w, b));
  }
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
// Thread 0 arrives with atom.add.release.gpu (the CTA's writes, ordered before the arrival by
// __syncthreads, released with it: release is cumulative) and polls with ld.acquire.gpu, a 64 ns
// sleep before each poll, instead of a relaxed atomic between two __threadfence() (membar.gl).
// On the H200 the row backward ran 0.95-1.00x the time with it over 31 rows, the channels,
// GroupNorm and split backward 0.92-1.00x over 14 problems, never slower (performance-notes,
// "The row backward's grid barrier with release and acquire" and "The other backward kernels'
// barriers with release and acquire").
__device__ __forceinline__ void grid_barrier(unsigned int* counter) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    unsigned int old, now;
    asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(counter), "r"(add)
                 : "memory");
    do {
      __nanosleep(64);
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(counter) : "memory");
    } while (((old ^ now) & 0x80000000u) == 0);
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
// The final sums number the grid's warps CTA-minor (sum_warp: warp w of CTA b is
// b + w * gridDim.x), so that consecutive groups of columns go to different CTAs: where the
// columns are fewer than the grid's warps take, every multiprocessor takes part. CTA-major
// (b * warps a CTA + w), rows of 4096 columns summed on the first 64 CTAs of 132 while the others
// exited; ConvNeXt's [32, 768, 7, 7] on the first 48 of 132. On the H200 (performance-notes,
// "CTA-minor final sums in the channels and split backward") 0.97-1.00x the time of CTA-major
// (again at 67d5564: 0.98-1.01x).
// Either way the same bits: the order of each column's additions does not change.
template <int kThreads>
__device__ __forceinline__ long long sum_warp(int tid) {
  return (long long)(tid / 32) * gridDim.x + blockIdx.x;
}

template <class P, int kThreads, int kParams, long long kLength, long long kPadded,
          long long kSlotFloats>
__device__ __forceinline__ void add_slots_in_order(const float* slots, int tid, void* out0,
                                                   void* out1) {
  static_assert(kThreads % 32 == 0, "whole warps sum the partials");
  constexpr int Q = kColumnLanes, kColumnsPerWarp = 32 / Q;
  constexpr long long kColumns = kParams * kLength;
  const int lane = tid % 32;
  const long long warps = (long long)gridDim.x * (kThreads / 32);
  const long long warp = sum_warp<kThreads>(tid);
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

// A float4 another CTA wrote before a grid barrier, through L2 (ld.global.cg.v4); p 16-byte
// aligned.
__device__ __forceinline__ float4 load_global_cg4(const float* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return float4{a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w};
}

// The float4 sums of Q adjacent lanes added in a fixed tree (offsets Q / 2, Q / 4, ... 1): lane 0
// of each group of Q gets their total.
template <int Q>
__device__ __forceinline__ float4 add4_over_lanes(float4 sum) {
#pragma unroll
  for (int offset = Q / 2; offset > 0; offset /= 2) {
    sum.x += __shfl_down_sync(0xffffffffu, sum.x, offset, Q);
    sum.y += __shfl_down_sync(0xffffffffu, sum.y, offset, Q);
    sum.z += __shfl_down_sync(0xffffffffu, sum.z, offset, Q);
    sum.w += __shfl_down_sync(0xffffffffu, sum.w, offset, Q);
  }
  return sum;
}

// add_slots_in_order on groups of 4 columns (kLength a multiple of 4): each group's partials
// summed by kQuadLanes lanes of one warp as float4s (lane q adds the slots q, q + kQuadLanes,
// ... in order, eight 16-byte loads in flight, then the lanes' sums in a fixed tree), the warps
// numbered CTA-minor. Lanes q and q + kQuadLanes read adjacent groups of one slot: whole 32-byte
// sectors, a quarter of the loads of one float a column. On the H200 (performance-notes, "The
// row backward's final sum over every CTA, and a barrier for each team") the LLM rows' backward
// at 1024-4096 tokens took 0.92-0.99x the time of the scalar sum's, CTA-major. The order depends
// on gridDim.x only.
constexpr int kQuadLanes = 16;
template <class P, int kThreads, int kParams, long long kLength, long long kPadded,
          long long kSlotFloats>
__device__ __forceinline__ void add_slot_quads_in_order(const float* slots, int tid, void* out0,
                                                        void* out1) {
  static_assert(kThreads % 32 == 0, "whole warps sum the partials");
  static_assert(kLength % 4 == 0 && kPadded % 4 == 0 && kSlotFloats % 4 == 0,
                "16-byte partials: groups of 4 columns, slots 16-byte aligned");
  constexpr int Q = kQuadLanes, kGroupsPerWarp = 32 / Q;
  constexpr long long kGroups = kParams * kLength / 4, kGroupsPerParam = kLength / 4;
  const int lane = tid % 32;
  const long long warps = (long long)gridDim.x * (kThreads / 32);
  const long long warp = sum_warp<kThreads>(tid);
  const int n = gridDim.x, q = lane % Q;
  // The same trip count for every lane of the warp (the shuffles need all 32).
  for (long long first = warp * kGroupsPerWarp; first < kGroups; first += warps * kGroupsPerWarp) {
    const long long g = first + lane / Q;
    const bool valid = g < kGroups;
    const int param = kParams == 2 && g >= kGroupsPerParam ? 1 : 0;
    const long long e = valid ? (g - param * kGroupsPerParam) * 4 : 0;
    const float* column = slots + param * kPadded + e;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    if (valid) {
      int s = q;
      for (; s + 7 * Q < n; s += 8 * Q) {  // eight loads in flight, added in order
        float4 part[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          part[i] = load_global_cg4(column + (long long)(s + i * Q) * kSlotFloats);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = add4(sum, part[i]);
      }
      for (; s < n; s += Q) sum = add4(sum, load_global_cg4(column + (long long)s * kSlotFloats));
    }
    sum = add4_over_lanes<Q>(sum);
    if (valid && q == 0) {
      P* out = static_cast<P*>(param == 0 ? out0 : out1) + e;
      out[0] = from_float<P>(sum.x), out[1] = from_float<P>(sum.y);
      out[2] = from_float<P>(sum.z), out[3] = from_float<P>(sum.w);
    }
  }
}

}  // namespace normjit
