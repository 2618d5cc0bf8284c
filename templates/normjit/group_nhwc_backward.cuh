// The backward of GroupNorm over a channels-last x (layout=nhwc): x[N, C, *spatial] stored as
// [N, S, C] (S = product of the spatial dims), G groups of CG = C / G channels, the statistics
// the forward saved (save_stats: mean and rstd of each (n, g), at n * G + g). dx from x, dy, the
// statistics and the weight (dx channels last, as x); dweight[c] and dbias[c] summed over n and
// the positions, deterministically.
//
// As in group_backward.cuh: per (n, g), in f32, xhat = (x - mean) * rstd, g = dy * (offset +
// w[c]), dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), and the group's sums of g and
// g * xhat are sum_c w[c] * B[n, c] and sum_c w[c] * A[n, c], with A[n, c] = sum_s dy * xhat
// and B[n, c] = sum_s dy, which are dweight[c] and dbias[c] before the sum over n. With an
// activation after the affine step (kActivation), dy is first taken through its derivative at
// the forward's z = xhat * (offset + w[c]) + b[c] (through_activation, backward_common.cuh)
// wherever it is read.
//
// Channels last, a position's C channels are contiguous: a CTA of (TX, TY) threads covers every
// channel of TY consecutive positions at a time, thread (tx, ty) the V consecutive channels
// c0 = tx * V (TX * V == C), so its channels, their groups and their weights stay the same for
// the whole launch, and the CTA's accesses are TY * C contiguous elements. A unit is U = TY * K
// consecutive positions of one item (each thread K of them, ty + TY * k); T units cover S. The
// grid (persistent, launched cooperatively) takes the items in waves of R items, the units of a
// wave in turn (CTA b: units b, b + gridDim.x, ...), each wave in three steps:
//   1. each unit's sums: every thread adds dy * xhat and dy of its channels over its K
//      positions in order; the CTA adds its TY threads' sums of each channel in ty order (the
//      unit's A and B of each channel) and from them each group's sums of w * B and w * A, its
//      CG channels in order; the unit writes both to the workspace (channels: only with
//      parameters);
//   -- grid barrier --
//   2. each warp of the grid takes tasks, the T unit partials of one column added by its 32
//      lanes (lane l the units l, l + 32, ... in order, then the lanes in a fixed tree): a
//      group's (for each item of the wave: its means of g and g * xhat, written to the
//      workspace), or a channel's (the wave's items in order, added to the channel's
//      accumulators of dweight and dbias; after the last wave written to dweight and dbias);
//   -- grid barrier --
//   3. each unit writes dx, reading x and dy again (a wave is sized to stay in L2: the second
//      read rarely reaches DRAM), with its item's means of g and g * xhat.
// Every sum's order is fixed by the configuration: the bits of dx, dweight and dbias depend
// neither on the grid nor on the batch (dweight: the items in order), and two runs on the same
// inputs give the same bits. The workspace's regions are each written in one step and read in
// the next, two barriers apart, so one buffer of each serves every wave.
//
// Workspace (floats, each region padded to kSlotAlign): the grid barrier's counter, then the
// units' group partials [R][G][T] (pairs: w * B, w * A), the units' channel partials [R][C][T]
// (pairs: A, B; only with parameters), the wave's group means [R][G] (pairs: of g, of g * xhat),
// the channels' accumulators [C] (pairs: dweight, dbias; only with parameters).
#pragma once

#include "normjit/backward_common.cuh"
#include "normjit/params.cuh"
#include "normjit/row_common.cuh"
#include "normjit/vec.cuh"

namespace normjit {

// A pair of floats another CTA wrote before a grid barrier, through L2; p 8-byte aligned.
__device__ __forceinline__ float2 load_global_cg2(const float* p) {
  float2 v;
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
  return v;
}

// C: the configuration generator/emit.cpp writes:
//   X, Param                   dtypes of x, dy and dx; of weight, dweight and dbias
//   kWeight, kBias             the forward's affine step: y = xhat * (kWeightOffset + w) + b
//   kWeightOffset              added to the weight in f32
//   kActivation                the forward's activation after the affine step (p.bias read
//                              for z where there is a bias)
//   kChannels, kGroups         C, G
//   kChannelsPerGroup          CG = C / G
//   kSpatial                   S: positions per item
//   kThreadsX, kThreadsY       TX, TY: blockDim = (TX, TY), TX * V == C
//   kVec                       V: channels per access (V divides C)
//   kPositions                 K: positions per thread per unit (U = TY * K)
//   kUnitsPerItem              T: units of U positions that cover S
//   kWaveItems                 R: items per wave
//   kMinBlocksPerSm            CTAs an SM the launch bounds ask for (caps the registers)
//   kWorkspaceFloats           the plan's workspace (checked against the layout above)
template <class C>
__global__ void __launch_bounds__(C::kThreadsX* C::kThreadsY, C::kMinBlocksPerSm)
    group_nhwc_backward(Params p) {
  using X = typename C::X;
  using P = typename C::Param;
  constexpr int TX = C::kThreadsX, TY = C::kThreadsY, V = C::kVec, K = C::kPositions;
  constexpr int THREADS = TX * TY;
  constexpr long long CH = C::kChannels, G = C::kGroups, CG = C::kChannelsPerGroup;
  constexpr long long S = C::kSpatial, T = C::kUnitsPerItem, R = C::kWaveItems;
  constexpr long long U = (long long)TY * K;  // positions per unit
  constexpr bool kWeight = C::kWeight, kBias = C::kBias;
  constexpr bool kParams = kWeight || kBias;
  constexpr int kFullWarps = THREADS / 32;  // step 2's warps (a partial last warp sits out)
  // Positions of a thread loaded together. 4 took 128 registers and spilled 8-16 bytes in
  // 16-bit 16-byte vectors (ptxas converts them early); 2 spill nothing (`normjit dump --emit
  // resources`, sm_90). Not yet measured.
  constexpr int kBatch = K < 2 ? K : 2;
  static_assert(CG * G == CH, "groups divide the channels");
  static_assert((long long)TX * V == CH, "a thread's vector per position: TX vectors cover C");
  static_assert(kFullWarps >= 1, "step 2 takes whole warps");
  static_assert((T - 1) * U < S && S <= T * U, "T units cover an item, none empty");
  constexpr long long kGroupPartials = kBarrierFloats;
  constexpr long long kChannelPartials = kGroupPartials + padded_floats(R * G * T * 2);
  constexpr long long kGroupMeans =
      kChannelPartials + (kParams ? padded_floats(R * CH * T * 2) : 0);
  constexpr long long kAccumulators = kGroupMeans + padded_floats(R * G * 2);
  constexpr long long kEnd = kAccumulators + (kParams ? padded_floats(CH * 2) : 0);
  static_assert(C::kWorkspaceFloats == kEnd, "the plan sizes the workspace as laid out here");
  constexpr float kInvRow = 1.0f / float(CG * S);  // 1 / elements of a group

  float* const ws = p.workspace;
  unsigned int* const counter = reinterpret_cast<unsigned int*>(ws);
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
  const int c0 = tx * V;  // C < 2^31
  const X* const x_all = static_cast<const X*>(p.x);
  const X* const dy_all = static_cast<const X*>(p.dy);
  X* const dx_all = static_cast<X*>(p.y);
  const P* const weight = static_cast<const P*>(p.weight);
  const auto w_of = [&](long long c) {
    return kWeight ? to_float(weight[c]) + C::kWeightOffset : 1.0f;
  };
  float w[V];
#pragma unroll
  for (int j = 0; j < V; ++j) w[j] = w_of(c0 + j);
  // With an activation and a bias: the thread's channels' bias, for z.
  constexpr bool kActBias = C::kActivation != Activation::kNone && kBias;
  float bias[kActBias ? V : 1];
#pragma unroll
  for (int j = 0; j < (kActBias ? V : 1); ++j) {
    bias[j] = kActBias ? to_float(static_cast<const P*>(p.bias)[c0 + j]) : 0.f;
  }
  const auto bias_of = [&](int j) { return kActBias ? bias[kActBias ? j : 0] : 0.f; };

  // Step 1's sums of the CTA's TY threads, [ty][c] (A, then B), and step 3's group means.
  __shared__ float sum_a[TY][CH], sum_b[TY][CH];
  __shared__ float2 means[G];

  // The statistics of the thread's channels' groups in item n: one pair where its V channels
  // lie in one group.
  constexpr bool kOneGroup = CG % V == 0;
  constexpr int kStats = kOneGroup ? 1 : V;
  float mean[kStats], rstd[kStats];
  const auto load_stats = [&](long long n) {
#pragma unroll
    for (int j = 0; j < kStats; ++j) {
      const long long row = n * G + (c0 + j) / int(CG);
      mean[j] = p.mean[row];
      rstd[j] = p.rstd[row];
    }
  };
  const auto xhat_of = [&](float x, int j) {
    return (x - mean[kOneGroup ? 0 : j]) * rstd[kOneGroup ? 0 : j];
  };
  // The thread's positions k0 .. k0 + kBatch - 1 of a unit (the first at s0; x and dy at that
  // position's vector), their loads in flight together (raw 16-bit pairs: half the registers);
  // in[i]: position k0 + i lies in the unit and the item.
  const auto load_batch = [&](const X* x, const X* dy, long long s0, int k0,
                              HeldVec<X, V>(&xv)[kBatch], HeldVec<X, V>(&dyv)[kBatch],
                              bool(&in)[kBatch]) {
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const long long k = k0 + i;
      in[i] = k < K && s0 + k * TY < S;
      if (in[i]) {
        xv[i].load(x + k * TY * CH, NoHint{});
        dyv[i].load(dy + k * TY * CH, NoHint{});
      }
    }
  };

  const long long items = p.batch;
  const long long waves = (items + R - 1) / R;
  for (long long wave = 0; wave < waves; ++wave) {
    const long long first = wave * R;
    const long long wave_items = items - first < R ? items - first : R;
    const long long units = wave_items * T;

    // 1. Each unit's sums of its channels and groups.
    for (long long unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const long long r = unit / T, t = unit - r * T, n = first + r;
      load_stats(n);
      float a[V], b[V];
#pragma unroll
      for (int j = 0; j < V; ++j) a[j] = 0.f, b[j] = 0.f;
      const long long s0 = t * U + ty;
      const X* x = x_all + (n * S + s0) * CH + c0;
      const X* dy = dy_all + (n * S + s0) * CH + c0;
      for (int k0 = 0; k0 < K; k0 += kBatch) {
        HeldVec<X, V> xv[kBatch], dyv[kBatch];
        bool in[kBatch];
        load_batch(x, dy, s0, k0, xv, dyv, in);
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          if (!in[i]) continue;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float xhat = xhat_of(xv[i][j], j);
            const float d = through_activation<C>(dyv[i][j], xhat, w[j], bias_of(j));
            a[j] = fmaf(d, xhat, a[j]);
            b[j] += d;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) sum_a[ty][c0 + j] = a[j], sum_b[ty][c0 + j] = b[j];
      __syncthreads();
      // The unit's A and B of each channel, its TY threads' in ty order (into row 0).
      float* const channel_partials = ws + kChannelPartials + (r * CH) * T * 2 + t * 2;
      for (long long c = tid; c < CH; c += THREADS) {
        float ca = sum_a[0][c], cb = sum_b[0][c];
#pragma unroll
        for (int y = 1; y < TY; ++y) ca += sum_a[y][c], cb += sum_b[y][c];
        sum_a[0][c] = ca, sum_b[0][c] = cb;
        if constexpr (kParams) {
          *reinterpret_cast<float2*>(channel_partials + c * T * 2) = make_float2(ca, cb);
        }
      }
      __syncthreads();
      // Each group's sums of w * B and w * A over its CG channels, in order.
      float* const group_partials = ws + kGroupPartials + (r * G) * T * 2 + t * 2;
      for (long long g = tid; g < G; g += THREADS) {
        float sg = 0.f, sgx = 0.f;
        for (long long c = g * CG; c < (g + 1) * CG; ++c) {
          const float wc = w_of(c);
          sg = fmaf(wc, sum_b[0][c], sg);
          sgx = fmaf(wc, sum_a[0][c], sgx);
        }
        *reinterpret_cast<float2*>(group_partials + g * T * 2) = make_float2(sg, sgx);
      }
      __syncthreads();  // sum_a and sum_b are written again by the CTA's next unit
    }
    grid_barrier(counter);

    // 2. Columns of unit partials, a warp each: the channels' (with parameters), then the
    // wave's groups'. Warps numbered CTA-minor (as sum_warp), so every SM takes some.
    if (tid < kFullWarps * 32) {
      const int lane = tid % 32;
      const long long warps = (long long)gridDim.x * kFullWarps;
      const long long channel_tasks = kParams ? CH : 0;
      const long long tasks = channel_tasks + wave_items * G;
      // The T partials of one column (pairs, T * 2 floats apart by column), summed by 32 lanes
      // in a fixed order; lane 0 gets the total.
      const auto column_sum = [&](const float* column) {
        float2 sum = make_float2(0.f, 0.f);
        // Four loads in flight for any T, the last step's guarded, added in t order (one at a
        // time where T <= 96, as T = 86 did, took three dependent L2 round trips a column:
        // performance-notes, session 70).
        for (long long t = lane; t < T; t += 128) {
          float2 part[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (t + 32 * i < T) part[i] = load_global_cg2(column + (t + 32 * i) * 2);
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (t + 32 * i < T) sum.x += part[i].x, sum.y += part[i].y;
          }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) {
          sum.x += __shfl_down_sync(0xffffffffu, sum.x, offset);
          sum.y += __shfl_down_sync(0xffffffffu, sum.y, offset);
        }
        return sum;
      };
      for (long long task = (long long)(tid / 32) * gridDim.x + blockIdx.x; task < tasks;
           task += warps) {
        if (task < channel_tasks) {
          const long long c = task;
          float* const accumulator = ws + kAccumulators + c * 2;
          float2 total = wave == 0 ? make_float2(0.f, 0.f) : load_global_cg2(accumulator);
          for (long long r = 0; r < wave_items; ++r) {
            const float2 sum = column_sum(ws + kChannelPartials + (r * CH + c) * T * 2);
            total.x += sum.x, total.y += sum.y;
          }
          if (lane == 0) {
            if (wave + 1 < waves) {
              *reinterpret_cast<float2*>(accumulator) = total;
            } else {
              if constexpr (kWeight) static_cast<P*>(p.dweight)[c] = from_float<P>(total.x);
              if constexpr (kBias) static_cast<P*>(p.dbias)[c] = from_float<P>(total.y);
            }
          }
        } else {
          const long long row = task - channel_tasks;  // r * G + g
          const float2 sum = column_sum(ws + kGroupPartials + row * T * 2);
          if (lane == 0) {
            *reinterpret_cast<float2*>(ws + kGroupMeans + row * 2) =
                make_float2(sum.x * kInvRow, sum.y * kInvRow);
          }
        }
      }
    }
    grid_barrier(counter);

    // 3. dx of each unit, from its item's means.
    for (long long unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const long long r = unit / T, t = unit - r * T, n = first + r;
      for (long long g = tid; g < G; g += THREADS) {
        means[g] = load_global_cg2(ws + kGroupMeans + (r * G + g) * 2);
      }
      load_stats(n);
      __syncthreads();
      float mean_g[kStats], mean_gx[kStats];
#pragma unroll
      for (int j = 0; j < kStats; ++j) {
        const float2 m = means[(c0 + j) / int(CG)];
        mean_g[j] = m.x, mean_gx[j] = m.y;
      }
      const long long s0 = t * U + ty;
      const X* x = x_all + (n * S + s0) * CH + c0;
      const X* dy = dy_all + (n * S + s0) * CH + c0;
      X* dx = dx_all + (n * S + s0) * CH + c0;
      for (int k0 = 0; k0 < K; k0 += kBatch) {
        HeldVec<X, V> xv[kBatch], dyv[kBatch];
        bool in[kBatch];
        load_batch(x, dy, s0, k0, xv, dyv, in);
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          if (!in[i]) continue;
          float out[V];
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float xhat = xhat_of(xv[i][j], j);
            const float g = through_activation<C>(dyv[i][j], xhat, w[j], bias_of(j)) * w[j];
            const float r = rstd[kOneGroup ? 0 : j];
            const int m = kOneGroup ? 0 : j;
            out[j] = r * (g - fmaf(xhat, mean_gx[m], mean_g[m]));
          }
          store_vec<X, V>(dx + (k0 + i) * TY * CH, out);
        }
      }
      __syncthreads();  // means is written again by the CTA's next unit
    }
  }
}

}  // namespace normjit
