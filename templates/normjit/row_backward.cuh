// The backward of LayerNorm and RMSNorm over trailing dims, for rows that fit in the registers
// of one team: dx from x, dy, the statistics the forward saved (save_stats) and the weight; and
// dweight and dbias summed over every row, deterministically.
//
// blockDim = (TEAM, ROWS): each team of TEAM threads owns one row at a time, each thread the
// same K vectors of V elements (its columns) of every row it takes. The grid is at most the CTAs
// the device holds (launched cooperatively when there are parameters); CTA b takes the rows
// (b + i * gridDim.x) * ROWS + threadIdx.y, i = 0, 1, ... So each thread loads its weight once,
// and sums dy * xhat (dweight) and dy (dbias) of its columns over its rows in registers.
//
// Per row, in f32: xhat = (x - mean) * rstd (rmsnorm: x * rstd), g = dy * (offset + w),
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rmsnorm: without mean(g)),
// the two means from one team reduction of a pair (rmsnorm: of one float).
//
// Then, with no floating-point atomics: the CTA's teams add their sums in team order (shared
// memory), the CTA writes that partial to its workspace slot, every CTA meets at a grid barrier,
// and each column's partials are added in an order fixed by gridDim.x (kColumnLanes lanes each
// add every kColumnLanes-th slot in CTA order, then their sums in a fixed tree). The same inputs
// on the same grid give the same bits on every run.
//
// Workspace (floats): the grid barrier's counter (kWorkspaceHeaderFloats, 32 bytes), then one
// slot of kWorkspaceSlotFloats per CTA: its dweight partial, then its dbias partial, each a row
// of H floats padded to kSlotAlign.
#pragma once

#include "normjit/params.cuh"
#include "normjit/reduce.cuh"
#include "normjit/vec.cuh"

namespace normjit {

// The grid barrier's counter, padded to 32 bytes (generator/plan.cpp: kBackwardHeaderFloats).
constexpr int kBarrierFloats = 8;
constexpr int kSlotAlign = 8;    // floats (generator/plan.cpp: kBackwardSlotAlign)
constexpr int kColumnLanes = 8;  // lanes that sum one column's partials (a power of 2 <= 32)

// LayerNorm's two row means in one team reduction: sum(g) and sum(g * xhat).
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

// What a row's team reduces: rmsnorm sum(g * xhat) alone, layernorm both sums.
template <bool kRms>
struct RowGradSums {
  using type = GradSums;
};
template <>
struct RowGradSums<true> {
  using type = float;
};

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

// C: the configuration generator/emit.cpp writes:
//   X, Param                  dtypes of x, dy and dx; of weight, bias, dweight and dbias
//   kRms                      rmsnorm (no mean); else layernorm
//   kWeight, kBias            the forward's affine step: y = xhat * (kWeightOffset + w) + b
//   kWeightOffset             added to the weight in f32 (Gemma)
//   kRowLength                H: elements normalized together
//   kThreads, kRowsPerBlock   TEAM, ROWS: blockDim = (TEAM, ROWS)
//   kVec, kVectors            V: elements per access (V divides H); K: vectors per thread
//   kWorkspaceHeaderFloats    the plan's floats before the slots (checked against the layout)
//   kWorkspaceSlotFloats      the plan's floats per CTA slot (checked against the layout)
template <class C>
__global__ void __launch_bounds__(C::kThreads* C::kRowsPerBlock) row_backward(Params p) {
  using X = typename C::X;
  using P = typename C::Param;
  constexpr int TEAM = C::kThreads, ROWS = C::kRowsPerBlock, V = C::kVec, K = C::kVectors;
  constexpr long long H = C::kRowLength;
  constexpr bool kRms = C::kRms, kWeight = C::kWeight, kBias = C::kBias;
  constexpr int kParams = kWeight + kBias;
  constexpr int kWarps = TEAM > 32 ? TEAM / 32 : 1;
  constexpr long long kPadded = (H + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  static_assert(H % V == 0, "vectors never straddle a row's end");
  static_assert((long long)K * TEAM * V >= H && (long long)(K - 1) * TEAM * V < H,
                "a team holds its whole row, and each thread's last vector is needed by some");
  static_assert(C::kWorkspaceSlotFloats == kParams * kPadded,
                "the plan's workspace slot is a CTA's dweight and dbias partials");
  static_assert(C::kWorkspaceHeaderFloats == (kParams > 0 ? kBarrierFloats : 0),
                "the plan's workspace starts with the grid barrier's counter");
  static_assert(V * sizeof(float) <= kSlotAlign * sizeof(float),
                "partials are stored as aligned vectors of V floats");
  static_assert(TEAM * ROWS % 32 == 0, "whole warps sum the partials");

  const int tid = threadIdx.x;
  // This thread's columns: vector k starts at element col(k); past the row's end it is not
  // loaded and its values stay 0.
  const auto col = [&](int k) { return (long long)(tid + k * TEAM) * V; };
  float w[kWeight ? K : 1][V];
  if constexpr (kWeight) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (col(k) < H) {
        load_vec<P, V>(static_cast<const P*>(p.weight) + col(k), w[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) w[k][j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < V; ++j) w[k][j] += C::kWeightOffset;
    }
  }
  float dw[kWeight ? K : 1][V] = {}, db[kBias ? K : 1][V] = {};

  using Sums = typename RowGradSums<kRms>::type;
  __shared__ Sums scratch[ROWS * kWarps];
  const long long rows = p.batch;
  for (long long base = (long long)blockIdx.x * ROWS; base < rows;
       base += (long long)gridDim.x * ROWS) {  // the same trip count for the whole CTA
    const long long row = base + threadIdx.y;
    const bool active = row < rows;  // an inactive team loads nothing but joins the reduction
    const X* x = static_cast<const X*>(p.x) + (active ? row : 0) * H;
    const X* dy = static_cast<const X*>(p.dy) + (active ? row : 0) * H;
    const float rstd = active ? p.rstd[row] : 0.f;
    const float mean = kRms || !active ? 0.f : p.mean[row];
    float xhat[K][V], g[K][V];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (active && col(k) < H) {
        load_vec<X, V>(x + col(k), xhat[k]);
        load_vec<X, V>(dy + col(k), g[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) xhat[k][j] = mean, g[k][j] = 0.f;
      }
    }
    Sums sums{};
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        xhat[k][j] = (xhat[k][j] - mean) * rstd;  // 0 past the row's end
        if constexpr (kWeight) dw[k][j] = fmaf(g[k][j], xhat[k][j], dw[k][j]);
        if constexpr (kBias) db[k][j] += g[k][j];
        if constexpr (kWeight) g[k][j] *= w[k][j];
        if constexpr (kRms) {
          sums = fmaf(g[k][j], xhat[k][j], sums);
        } else {
          sums.g += g[k][j];
          sums.gx = fmaf(g[k][j], xhat[k][j], sums.gx);
        }
      }
    }
    const Sums total = team_reduce<TEAM, ROWS>(sums, scratch);
    if (!active) continue;
    float mean_g = 0.f, mean_gx;
    if constexpr (kRms) {
      mean_gx = total * (1.0f / H);
    } else {
      mean_g = total.g * (1.0f / H);
      mean_gx = total.gx * (1.0f / H);
    }
    X* dx = static_cast<X*>(p.y) + row * H;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (col(k) >= H) continue;
      float out[V];
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = rstd * (g[k][j] - fmaf(xhat[k][j], mean_gx, mean_g));
      store_vec<X, V>(dx + col(k), out);
    }
  }

  if constexpr (kParams > 0) {
    // The CTA's partial: its teams' sums added in team order, written to its slot.
    if constexpr (ROWS > 1) {
      __shared__ float parts[kParams][ROWS][K * V][TEAM];  // [.][team][value][thread]: no conflicts
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if constexpr (kWeight) parts[0][threadIdx.y][k * V + j][tid] = dw[k][j];
          if constexpr (kBias) parts[kParams - 1][threadIdx.y][k * V + j][tid] = db[k][j];
        }
      }
      __syncthreads();
      if (threadIdx.y == 0) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            for (int r = 1; r < ROWS; ++r) {
              if constexpr (kWeight) dw[k][j] += parts[0][r][k * V + j][tid];
              if constexpr (kBias) db[k][j] += parts[kParams - 1][r][k * V + j][tid];
            }
          }
        }
      }
    }
    float* slots = p.workspace + kBarrierFloats;
    if (threadIdx.y == 0) {
      float* slot = slots + (long long)blockIdx.x * C::kWorkspaceSlotFloats;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (col(k) >= H) continue;
        if constexpr (kWeight) store_vec<float, V>(slot + col(k), dw[k]);
        if constexpr (kBias) store_vec<float, V>(slot + (kParams - 1) * kPadded + col(k), db[k]);
      }
    }
    grid_barrier(reinterpret_cast<unsigned int*>(p.workspace));

    // Each column's partials summed by Q lanes of one warp: lane q adds the slots q, q + Q,
    // q + 2Q, ... in order, then the Q sums are added in a fixed tree (shuffles), so the order
    // depends on gridDim.x only. Q lanes per column keep Q times as many loads in flight as one
    // thread per column would (a few thousand columns against hundreds of slots: one thread per
    // column would wait on hundreds of dependent L2 round trips).
    constexpr int Q = kColumnLanes, kColumnsPerWarp = 32 / Q;
    constexpr long long kColumns = kParams * H;
    const int lane = (threadIdx.y * TEAM + tid) % 32;
    const long long warps = (long long)gridDim.x * (TEAM * ROWS / 32);
    const long long warp =
        (long long)blockIdx.x * (TEAM * ROWS / 32) + (threadIdx.y * TEAM + tid) / 32;
    const int n = gridDim.x, q = lane % Q;
    // The same trip count for every lane of the warp (the shuffles need all 32).
    for (long long first = warp * kColumnsPerWarp; first < kColumns;
         first += warps * kColumnsPerWarp) {
      const long long c = first + lane / Q;
      const bool valid = c < kColumns;
      const int param = kParams == 2 && c >= H ? 1 : 0;
      const long long e = valid ? c - param * H : 0;
      const float* column = slots + param * kPadded + e;
      float sum = 0.f;
      if (valid) {
        int s = q;
        for (; s + 3 * Q < n; s += 4 * Q) {  // four loads in flight, added in order
          float part[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            part[i] = load_global_cg(column + (long long)(s + i * Q) * C::kWorkspaceSlotFloats);
          sum = (((sum + part[0]) + part[1]) + part[2]) + part[3];
        }
        for (; s < n; s += Q)
          sum += load_global_cg(column + (long long)s * C::kWorkspaceSlotFloats);
      }
#pragma unroll
      for (int offset = Q / 2; offset > 0; offset /= 2) {
        sum += __shfl_down_sync(0xffffffffu, sum, offset, Q);
      }
      if (valid && q == 0) {
        P* out = static_cast<P*>(kWeight && param == 0 ? p.dweight : p.dbias);
        out[e] = from_float<P>(sum);
      }
    }
  }
}

}  // namespace normjit
