// The backward of RMSNorm and LayerNorm over dim 1 of x[N, C, S] (normalized_dims=0; S = product
// of the spatial dims): dx from x, dy, the statistics the forward saved (save_stats: rstd, and
// layernorm's mean, of each (n, position s), at n * S + s) and the weight; dweight[c] and
// dbias[c] summed over n and the positions, deterministically.
//
// Per position, over its C channels, in f32: xhat = (x - mean) * rstd (rmsnorm: x * rstd),
// g = dy * (offset + w[c]), dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)) (rmsnorm:
// without mean_c(g)). With an activation after the affine step (kActivation), dy is first taken
// through its derivative at the forward's z = xhat * (offset + w[c]) + b[c] (through_activation,
// backward_common.cuh), everywhere it is read.
//
// A tile is TX * V consecutive positions of one n, as in the forward (channels_norm.cuh): thread
// (tx, ty) owns V of them and the channels ty, ty + TY, ..., so every access is a V-wide vector
// along the contiguous spatial dim. The grid is at most the CTAs the device holds; CTA b takes
// the tiles b, b + gridDim.x, ... With kCached the thread's x and dy stay in registers between
// the position's sums and dx; otherwise they are read again (from L1/L2: the CTA just read them).
// Each thread sums dy * xhat and dy of its channels over its positions of every tile; at the end
// the CTA adds its threads' sums of each channel in tx order into its workspace slot, the CTAs
// meet at a grid barrier, and each channel's slots are added in an order fixed by gridDim.x
// (backward_common.cuh): the same inputs on the same grid give the same bits.
//
// Workspace (floats): the grid barrier's counter (kWorkspaceHeaderFloats), then one slot of
// kWorkspaceSlotFloats per CTA: its dweight partial, then its dbias partial, C floats each padded
// to kSlotAlign.
#pragma once

#include "normjit/backward_common.cuh"
#include "normjit/params.cuh"
#include "normjit/vec.cuh"

namespace normjit {

// C: the configuration generator/emit.cpp writes:
//   X, Param                  dtypes of x, dy and dx; of weight, bias, dweight and dbias
//   kRms                      rmsnorm (no mean); else layernorm
//   kWeight, kBias            the forward's affine step: y = xhat * (kWeightOffset + w[c]) + b[c]
//   kWeightOffset             added to the weight in f32
//   kActivation               the forward's activation after the affine step (p.bias read
//                             for z where there is a bias)
//   kChannels, kSpatial       C, S
//   kThreadsX, kThreadsY      TX, TY: blockDim = (TX, TY)
//   kVec                      V: positions per access (V divides S, or V == 1)
//   kCached                   x and dy stay in registers between the sums and dx
//   kBlocksPerItem            the plan's tiles per n (checked against this kernel's tiling)
//   kWorkspaceHeaderFloats    the plan's floats before the slots (checked against the layout)
//   kWorkspaceSlotFloats      the plan's floats per CTA slot (checked against the layout)
template <class C>
__global__ void __launch_bounds__(C::kThreadsX* C::kThreadsY) channels_backward(Params p) {
  using X = typename C::X;
  using P = typename C::Param;
  constexpr int CH = C::kChannels, TX = C::kThreadsX, TY = C::kThreadsY, V = C::kVec;
  constexpr long long S = C::kSpatial;
  constexpr bool kRms = C::kRms, kWeight = C::kWeight, kBias = C::kBias, kCached = C::kCached;
  constexpr int kParams = kWeight + kBias;
  constexpr long long kTile = (long long)TX * V;
  constexpr long long kTiles = (S + kTile - 1) / kTile;
  constexpr int kPerThread = (CH + TY - 1) / TY;  // channels per thread
  constexpr bool kEvenChannels = CH % TY == 0;
  constexpr long long kPadded = (CH + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  static_assert(kTiles == C::kBlocksPerItem, "the plan's tiles per n are this kernel's");
  static_assert(V == 1 || S % V == 0, "vectors never straddle a channel's end");
  static_assert(!kRms || !kBias, "rmsnorm has no bias");
  static_assert(C::kWorkspaceSlotFloats == kParams * kPadded,
                "the plan's workspace slot is a CTA's dweight and dbias partials");
  static_assert(C::kWorkspaceHeaderFloats == (kParams > 0 ? kBarrierFloats : 0),
                "the plan's workspace starts with the grid barrier's counter");
  static_assert(TX * TY % 32 == 0, "whole warps");

  const int tx = threadIdx.x, ty = threadIdx.y;
  const auto has = [&](int i) { return kEvenChannels || ty + i * TY < CH; };
  float w[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    w[i] = 1.f;
    if constexpr (kWeight) {
      if (has(i)) w[i] = to_float(static_cast<const P*>(p.weight)[ty + i * TY]) + C::kWeightOffset;
    }
  }
  // With an activation and a bias: each channel's bias, for z.
  constexpr bool kActBias = C::kActivation != Activation::kNone && kBias;
  float bias[kActBias ? kPerThread : 1];
#pragma unroll
  for (int i = 0; i < (kActBias ? kPerThread : 1); ++i) {
    bias[i] = kActBias && has(i) ? to_float(static_cast<const P*>(p.bias)[ty + i * TY]) : 0.f;
  }
  const auto bias_of = [&](int i) { return kActBias ? bias[kActBias ? i : 0] : 0.f; };
  float dw[kWeight ? kPerThread : 1] = {}, db[kBias ? kPerThread : 1] = {};

  // Per position j: the sums over C of g and g * xhat, reduced over the TY threads of the
  // position in ty order; every thread of the CTA calls it.
  __shared__ GradSums partial[TY][V][TX];  // [ty][j][tx]: consecutive tx, consecutive banks
  const auto position_sums = [&](GradSums(&sums)[V]) {
    if constexpr (TY > 1) {
#pragma unroll
      for (int j = 0; j < V; ++j) partial[ty][j][tx] = sums[j];
      __syncthreads();
#pragma unroll
      for (int j = 0; j < V; ++j) {
        GradSums total{0.f, 0.f};
#pragma unroll
        for (int t = 0; t < TY; ++t) total = merge(total, partial[t][j][tx]);
        sums[j] = total;
      }
      __syncthreads();  // partial is written again by the next tile
    }
  };

  const long long tiles = p.batch * kTiles;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // the same for the CTA
    const long long n = tile / kTiles;
    const long long s = (tile - n * kTiles) * kTile + (long long)tx * V;
    const bool active = s < S;  // S % V == 0 whenever V > 1: the whole vector is in range
    // Channel ty + i * TY of this thread is at i * (TY * S) from one base.
    const long long first = n * (CH * S) + (long long)ty * S + s;
    const X* x = static_cast<const X*>(p.x) + first;
    const X* dy = static_cast<const X*>(p.dy) + first;
    float mean[V], rstd[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mean[j] = !kRms && active ? p.mean[n * S + s + j] : 0.f;
      rstd[j] = active ? p.rstd[n * S + s + j] : 0.f;
    }
    float xv[kCached ? kPerThread : 1][V], dyv[kCached ? kPerThread : 1][V];
    GradSums sums[V];
#pragma unroll
    for (int j = 0; j < V; ++j) sums[j] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (active && has(i)) {
        float a[V], b[V];
        load_vec<X, V>(x + i * (TY * S), a);
        load_vec<X, V>(dy + i * (TY * S), b);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xhat = (a[j] - mean[j]) * rstd[j];
          b[j] = through_activation<C>(b[j], xhat, w[i], bias_of(i));
          if constexpr (kWeight) dw[kWeight ? i : 0] = fmaf(b[j], xhat, dw[kWeight ? i : 0]);
          if constexpr (kBias) db[kBias ? i : 0] += b[j];
          const float g = b[j] * w[i];
          sums[j].g += g;
          sums[j].gx = fmaf(g, xhat, sums[j].gx);
          if constexpr (kCached) xv[kCached ? i : 0][j] = xhat, dyv[kCached ? i : 0][j] = g;
        }
      }
    }
    position_sums(sums);
    if (!active) continue;
    float mean_g[V], mean_gx[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mean_g[j] = kRms ? 0.f : sums[j].g * (1.0f / CH);
      mean_gx[j] = sums[j].gx * (1.0f / CH);
    }
    X* dx = static_cast<X*>(p.y) + first;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (!has(i)) continue;
      float xhat[V], g[V], out[V];
      if constexpr (kCached) {
#pragma unroll
        for (int j = 0; j < V; ++j)
          xhat[j] = xv[kCached ? i : 0][j], g[j] = dyv[kCached ? i : 0][j];
      } else {
        load_vec<X, V>(x + i * (TY * S), xhat);
        load_vec<X, V>(dy + i * (TY * S), g);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          xhat[j] = (xhat[j] - mean[j]) * rstd[j];
          g[j] = through_activation<C>(g[j], xhat[j], w[i], bias_of(i)) * w[i];
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = rstd[j] * (g[j] - fmaf(xhat[j], mean_gx[j], mean_g[j]));
      store_vec<X, V>(dx + i * (TY * S), out);
    }
  }

  if constexpr (kParams > 0) {
    // The CTA's partial: each channel's TX thread sums added in tx order, into its slot.
    float* slots = p.workspace + kBarrierFloats;
    float* slot = slots + (long long)blockIdx.x * C::kWorkspaceSlotFloats;
    __shared__ float parts[kParams][TY][TX];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if constexpr (kWeight) parts[0][ty][tx] = dw[kWeight ? i : 0];
      if constexpr (kBias) parts[kParams - 1][ty][tx] = db[kBias ? i : 0];
      __syncthreads();
      if (tx < kParams && has(i)) {
        float sum = 0.f;
        for (int t = 0; t < TX; ++t) sum += parts[tx][ty][t];
        slot[tx * kPadded + ty + i * TY] = sum;
      }
      __syncthreads();
    }
    grid_barrier(reinterpret_cast<unsigned int*>(p.workspace));
    add_slots_in_order<P, TX * TY, kParams, CH, kPadded, C::kWorkspaceSlotFloats>(
        slots, ty * TX + tx, kWeight ? p.dweight : p.dbias, p.dbias);
  }
}

}  // namespace normjit
