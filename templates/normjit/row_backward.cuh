// The backward of LayerNorm and RMSNorm over trailing dims, for rows that fit in the registers
// of one team: dx from x, dy, the statistics the forward saved (save_stats) and the weight; and
// dweight and dbias summed over every row, deterministically.
//
// blockDim = (TEAM, ROWS): each team of TEAM threads owns one row at a time, each thread the
// same K vectors of V elements (its columns) of every row it takes. The grid is at most the CTAs
// the device holds (launched cooperatively when there are parameters); CTA b takes the rows
// (b + i * gridDim.x) * ROWS + threadIdx.y, i = 0, 1, ... So each thread loads its weight once,
// and sums dy * xhat (dweight) and dy (dbias) of its columns over its rows in registers.
// A team of 1024 threads (16-bit rows of up to 16384 elements) has 64 registers a thread: it
// holds x and dy as raw 16-bit pairs and forms xhat and g again for dx (kHoldPacked), loads the
// weight again where used (kReloadWeight; from L1) and sums dbias in shared memory
// (kSharedBiasSums); the arithmetic is that of the f32 form.
//
// Per row, in f32: xhat = (x - mean) * rstd (rmsnorm: x * rstd), g = dy * (offset + w),
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (rmsnorm: without mean(g)),
// the two means from one team reduction of a pair (rmsnorm: of one float).
// With an activation after the affine step (kActivation), dy is first taken through its
// derivative at the forward's z = xhat * (offset + w) + b (through_activation,
// backward_common.cuh) wherever it is read; the bias is held like the weight (or loaded again
// with it: kReloadWeight).
// With a residual (the forward's fused add: its x here is h = x + residual, which the forward
// wrote to residual_out), dx = that + dh, dh being h's gradient from its other uses (p.residual,
// x's dtype), added in f32 before the one rounding to x's dtype: the gradient of both the
// forward's x and its residual. Each thread loads its dh of a row with x and dy (in flight
// through the row's sums and reduction) and adds it at the store; dx may be dh's buffer (each
// element is read before it is written, by the thread that writes it).
//
// Then, with no floating-point atomics: the CTA's teams add their sums in team order (shared
// memory), the CTA writes that partial to its workspace slot, every CTA meets at a grid barrier,
// and each column's partials are added in an order fixed by gridDim.x (kColumnLanes lanes each
// add every kColumnLanes-th slot in CTA order, then their sums in a fixed tree; with
// kQuadFinalSum, kQuadLanes lanes a group of 4 columns, in float4s), the warps that sum them
// numbered CTA-minor so that every CTA takes part. The same inputs on the same grid give the
// same bits on every run.
//
// Workspace (floats): the grid barrier's counter (kWorkspaceHeaderFloats, 32 bytes), then one
// slot of kWorkspaceSlotFloats per CTA: its dweight partial, then its dbias partial, each a row
// of H floats padded to kSlotAlign.
#pragma once

#include "normjit/backward_common.cuh"
#include "normjit/params.cuh"
#include "normjit/vec.cuh"

namespace normjit {

// What a row's team reduces: rmsnorm sum(g * xhat) alone, layernorm both sums.
template <bool kRms>
struct RowGradSums {
  using type = GradSums;
};
template <>
struct RowGradSums<true> {
  using type = float;
};

// C: the configuration generator/emit.cpp writes:
//   X, Param                  dtypes of x, dy and dx; of weight, bias, dweight and dbias
//   kRms                      rmsnorm (no mean); else layernorm
//   kWeight, kBias            the forward's affine step: y = xhat * (kWeightOffset + w) + b
//   kWeightOffset             added to the weight in f32 (Gemma)
//   kActivation               the forward's activation after the affine step (p.bias read
//                             for z where there is a bias)
//   kResidual                 dh (p.residual, x's dtype) added to dx
//   kLateResidual             (with kResidual) each vector of dh loaded at its store, not with
//                             x and dy (teams of 64 registers a thread)
//   kRowLength                H: elements normalized together
//   kThreads, kRowsPerBlock   TEAM, ROWS: blockDim = (TEAM, ROWS)
//   kVec, kVectors            V: elements per access (V divides H); K: vectors per thread
//   kNextRowInRegisters       (with kHoldPacked) the team's next row's x and dy words and
//                             statistics loaded into a second set of registers as it takes a row
//   kPrefetchNextRow          a team starts pulling its next row's x and dy into L2 as it takes
//                             a row (sm_90+; the plan sets it for CTAs of one team, of two in
//                             launches of few rows, and of several teams of 16-bit rows in
//                             even accesses)
//   kHoldPacked               16-bit x and dy held as their raw bits (two to a register) and
//                             converted again where used, instead of as f32
//   kReloadWeight             the weight loaded again (from L1) where used instead of held
//   kSharedBiasSums           each thread's dbias sums in (dynamic) shared memory, not registers
//                             ([k][j][thread]: K * V * TEAM floats)
//   kTeamBarriers             (ROWS > 1, teams of whole warps) each team waits at its own named
//                             barrier at a row's reduction, not at the CTA's
//   kQuadFinalSum             (H a multiple of 4) the partials summed in float4s
//                             (add_slot_quads_in_order), else one float a column
//   kDynamicSmemBytes         the dynamic shared memory the plan launches it with
//   kWorkspaceHeaderFloats    the plan's floats before the slots (checked against the layout)
//   kWorkspaceSlotFloats      the plan's floats per CTA slot (checked against the layout)
//   kMinBlocksPerSm           CTAs an SM the launch bounds ask for (caps the registers; 0: none)
template <class C>
__global__ void __launch_bounds__(C::kThreads* C::kRowsPerBlock, C::kMinBlocksPerSm)
    row_backward(Params p) {
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
  static_assert(!C::kTeamBarriers || (ROWS > 1 && TEAM % 32 == 0),
                "named barriers for CTAs of several teams of whole warps");
  static_assert(!C::kQuadFinalSum || H % 4 == 0, "the float4 sum: rows of whole groups of 4");
  constexpr bool kPacked = C::kHoldPacked, kReload = C::kReloadWeight && kWeight;
  static_assert(!kPacked || (sizeof(X) == 2 && V % 2 == 0), "packed: pairs of 16-bit elements");
  constexpr bool kRes = C::kResidual, kLateDh = C::kLateResidual;
  static_assert(!kLateDh || kRes, "a late dh: with a residual");
  static_assert(sizeof(X) * V <= 16, "dh is held as the raw words of one access");

  const int tid = threadIdx.x;
  // This thread's columns: vector k starts at element col(k); past the row's end it is not
  // loaded and its values stay 0.
  const auto col = [&](int k) { return (long long)(tid + k * TEAM) * V; };
  // The weight of vector k (held, or loaded again: the CTA's columns are the same every row).
  float w[kWeight && !kReload ? K : 1][V];
  const auto weight_of = [&](int k, float(&wv)[V]) {
    if constexpr (kReload) {
      load_vec<P, V>(static_cast<const P*>(p.weight) + col(k), wv);
#pragma unroll
      for (int j = 0; j < V; ++j) wv[j] += C::kWeightOffset;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) wv[j] = w[k][j];
    }
  };
  if constexpr (kWeight && !kReload) {
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
  // With an activation and a bias: the bias of vector k for z (held like the weight, or loaded
  // again with it); zeros without one or past the row's end.
  constexpr bool kActBias = C::kActivation != Activation::kNone && kBias;
  float bh[kActBias && !kReload ? K : 1][V];
  if constexpr (kActBias && !kReload) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (col(k) < H) {
        load_vec<P, V>(static_cast<const P*>(p.bias) + col(k), bh[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) bh[k][j] = 0.f;
      }
    }
  }
  const auto bias_of = [&](int k, float(&bv)[V]) {
#pragma unroll
    for (int j = 0; j < V; ++j) bv[j] = 0.f;
    if constexpr (kActBias) {
      if constexpr (kReload) {
        if (col(k) < H) load_vec<P, V>(static_cast<const P*>(p.bias) + col(k), bv);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) bv[j] = bh[k][j];
      }
    }
  };
  float dw[kWeight ? K : 1][V] = {}, db[kBias ? K : 1][V] = {};
  // kSharedBiasSums: the dbias sums live in shared memory, each thread touching only its own
  // words (a warp's accesses consecutive), so no barrier orders them.
  constexpr bool kSharedDb = kBias && C::kSharedBiasSums;
  static_assert(!kSharedDb || ROWS == 1, "shared dbias sums: one team a CTA");
  static_assert(C::kDynamicSmemBytes == (kSharedDb ? K * V * TEAM * sizeof(float) : 0),
                "the plan's dynamic shared memory is the dbias sums");
  extern __shared__ __align__(16) float db_shared[];
  const auto db_at = [&](int k, int j) -> float& { return db_shared[(k * V + j) * TEAM + tid]; };
  if constexpr (kSharedDb) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) db_at(k, j) = 0.f;
    }
  }

  using Sums = typename RowGradSums<kRms>::type;
  __shared__ Sums scratch[ROWS * kWarps];
  // Element j of vector k, of dy `d`, xhat `xh` and weight `wj`: its terms of dweight (dy *
  // xhat) and dbias (dy), and of the row's sums of g * xhat (and g), g = dy * w; returns g.
  const auto add_terms = [&](Sums& sums, int k, int j, float d, float xh, float wj) {
    if constexpr (kWeight) dw[k][j] = fmaf(d, xh, dw[k][j]);
    if constexpr (kSharedDb) {
      db_at(k, j) += d;
    } else if constexpr (kBias) {
      db[k][j] += d;
    }
    const float gj = kWeight ? d * wj : d;
    if constexpr (kRms) {
      sums = fmaf(gj, xh, sums);
    } else {
      sums.g += gj;
      sums.gx = fmaf(gj, xh, sums.gx);
    }
    return gj;
  };
  // The row's means of g and g * xhat (RMSNorm: g's mean is not used, 0) from the team's sums.
  const auto row_means = [&](const Sums& total, float& mean_g, float& mean_gx) {
    if constexpr (kRms) {
      mean_g = 0.f;
      mean_gx = total * (1.0f / H);
    } else {
      mean_g = total.g * (1.0f / H);
      mean_gx = total.gx * (1.0f / H);
    }
  };
  const long long rows = p.batch;
  // kNextRowInRegisters: the team loads its next row's x and dy words and statistics into a
  // second set of registers at the top of each row, in flight through the row's sums, reduction
  // and stores (a row past the last loads nothing: zero words, zero statistics).
  constexpr bool kRegNext = C::kNextRowInRegisters;
  static_assert(!kRegNext || kPacked, "the next row in registers: packed words only");
  constexpr int KN = kRegNext ? K : 1, W = V / 2 > 0 ? V / 2 : 1;
  unsigned int nxw[KN][W], ngw[KN][W];
  float nrstd = 0.f, nmean = 0.f;
  // Row r's x and dy as raw 16-bit pairs (packed only); zeros past the row's end or the last row
  // (dy 0: adds nothing).
  const auto load_row_words = [&](long long r, unsigned int(&xw)[K][W], unsigned int(&gw)[K][W]) {
    if constexpr (kPacked) {
      const bool act = r < rows;
      const X* xr = static_cast<const X*>(p.x) + (act ? r : 0) * H;
      const X* dr = static_cast<const X*>(p.dy) + (act ? r : 0) * H;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (act && col(k) < H) {
          load_words<X, V>(xr + col(k), xw[k]);
          load_words<X, V>(dr + col(k), gw[k]);
        } else {
#pragma unroll
          for (int i = 0; i < W; ++i) xw[k][i] = 0u, gw[k][i] = 0u;
        }
      }
    }
  };
  const auto load_next = [&](long long r) {
    if constexpr (kRegNext) {
      nrstd = r < rows ? p.rstd[r] : 0.f;
      nmean = kRms || r >= rows ? 0.f : p.mean[r];
      load_row_words(r, nxw, ngw);
    }
  };
  if constexpr (kRegNext) load_next((long long)blockIdx.x * ROWS + threadIdx.y);
  // kResidual: this thread's dh of row r as raw words (a 16-bit element alone in the low half of
  // its word); zeros past the row's end or for an inactive team.
  constexpr int kDhWords = sizeof(X) * V >= 4 ? int(sizeof(X)) * V / 4 : 1;
  using DhWords = unsigned int[kRes && !kLateDh ? K : 1][kDhWords];
  // Vector k of row r's dh (in the row's columns: col(k) < H).
  const auto load_dh_vector = [&](long long r, int k, unsigned int(&w)[kDhWords]) {
    const X* src = static_cast<const X*>(p.residual) + r * H + col(k);
    if constexpr (sizeof(X) * V >= 4) {
      load_raw<kDhWords>(src, w, NoHint{});
    } else {
      w[0] = bits_of(*src);
    }
  };
  const auto load_dh = [&](long long r, bool act, DhWords& w) {
    if constexpr (kRes && !kLateDh) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (act && col(k) < H) {
          load_dh_vector(r, k, w[k]);
        } else {
#pragma unroll
          for (int i = 0; i < kDhWords; ++i) w[k][i] = 0u;
        }
      }
    }
  };
  // dh of element j of vector k of the row: held, or (kLateDh) loaded with the vector's store.
  const auto add_dh = [&](long long r, int k, const DhWords& held, float(&out)[V]) {
    if constexpr (kRes) {
      if constexpr (kLateDh) {
        unsigned int late[kDhWords];
        load_dh_vector(r, k, late);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] += word_value<X>(late, j);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] += word_value<X>(held[k], j);
      }
    }
  };
  for (long long base = (long long)blockIdx.x * ROWS; base < rows;
       base += (long long)gridDim.x * ROWS) {  // the same trip count for the whole CTA
    const long long row = base + threadIdx.y;
    const bool active = row < rows;  // an inactive team loads nothing but joins the reduction
    const X* x = static_cast<const X*>(p.x) + (active ? row : 0) * H;
    const X* dy = static_cast<const X*>(p.dy) + (active ? row : 0) * H;
    const float rstd = kRegNext ? nrstd : active ? p.rstd[row] : 0.f;
    const float mean = kRegNext ? nmean : kRms || !active ? 0.f : p.mean[row];
    if (C::kPrefetchNextRow && tid == 0) {
      // With the next row in registers, the row after it.
      const long long next = row + (kRegNext ? 2 : 1) * (long long)gridDim.x * ROWS;
      if (next < rows) {
        prefetch_l2(static_cast<const X*>(p.x) + next * H, 0, H);
        prefetch_l2(static_cast<const X*>(p.dy) + next * H, 0, H);
        if constexpr (kRes) prefetch_l2(static_cast<const X*>(p.residual) + next * H, 0, H);
      }
    }
    if constexpr (kPacked) {
      // x and dy as raw bits; xhat and g formed again from them for dx (the same arithmetic).
      unsigned int xw[K][V / 2], gw[K][V / 2];
      if constexpr (kRegNext) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int i = 0; i < V / 2; ++i) xw[k][i] = nxw[k][i], gw[k][i] = ngw[k][i];
        }
        load_next(row + (long long)gridDim.x * ROWS);
      } else {
        load_row_words(row, xw, gw);
      }
      DhWords dhw;
      load_dh(row, active, dhw);
      const auto unpack = [&](const unsigned int(&words)[V / 2], float(&out)[V]) {
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
          out[2 * i] = to_float(from_bits<X>(words[i] & 0xffffu));
          out[2 * i + 1] = to_float(from_bits<X>(words[i] >> 16));
        }
      };
      Sums sums{};
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float xk[V], gk[V], wk[V], bk[V];
        unpack(xw[k], xk);
        unpack(gw[k], gk);
        if constexpr (kWeight) {
          if (col(k) < H) {
            weight_of(k, wk);
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) wk[j] = 0.f;
          }
        }
        bias_of(k, bk);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xh = (xk[j] - mean) * rstd;
          const float wj = kWeight ? wk[j] : 1.f;
          add_terms(sums, k, j, through_activation<C>(gk[j], xh, wj, bk[j]), xh, wj);
        }
      }
      const Sums total = team_reduce<TEAM, ROWS, true, C::kTeamBarriers>(sums, scratch);
      if (!active) continue;
      float mean_g, mean_gx;
      row_means(total, mean_g, mean_gx);
      X* dx = static_cast<X*>(p.y) + row * H;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (col(k) >= H) continue;
        float xk[V], gk[V], wk[V], bk[V], out[V];
        unpack(xw[k], xk);
        unpack(gw[k], gk);
        if constexpr (kWeight) weight_of(k, wk);
        bias_of(k, bk);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xh = (xk[j] - mean) * rstd;
          const float d = through_activation<C>(gk[j], xh, kWeight ? wk[j] : 1.f, bk[j]);
          const float gj = kWeight ? d * wk[j] : d;
          out[j] = rstd * (gj - fmaf(xh, mean_gx, mean_g));
        }
        add_dh(row, k, dhw, out);
        store_vec<X, V>(dx + col(k), out);
      }
    } else {
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
      DhWords dhw;
      load_dh(row, active, dhw);
      Sums sums{};
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float wk[V], bk[V];
        if constexpr (kReload) {
          if (col(k) < H) {
            weight_of(k, wk);
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) wk[j] = 0.f;
          }
        }
        bias_of(k, bk);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          xhat[k][j] = (xhat[k][j] - mean) * rstd;  // 0 past the row's end
          float wj = 1.f;
          if constexpr (kReload) {
            wj = wk[j];
          } else if constexpr (kWeight) {
            wj = w[k][j];
          }
          const float d = through_activation<C>(g[k][j], xhat[k][j], wj, bk[j]);
          g[k][j] = add_terms(sums, k, j, d, xhat[k][j], wj);
        }
      }
      const Sums total = team_reduce<TEAM, ROWS, true, C::kTeamBarriers>(sums, scratch);
      if (!active) continue;
      float mean_g, mean_gx;
      row_means(total, mean_g, mean_gx);
      X* dx = static_cast<X*>(p.y) + row * H;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (col(k) >= H) continue;
        float out[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          out[j] = rstd * (g[k][j] - fmaf(xhat[k][j], mean_gx, mean_g));
        }
        add_dh(row, k, dhw, out);
        store_vec<X, V>(dx + col(k), out);
      }
    }
  }

  if constexpr (kParams > 0) {
    if constexpr (kSharedDb) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) db[k][j] = db_at(k, j);
      }
    }
    // The CTA's partial: its teams' sums added in team order, written to its slot.
    if constexpr (ROWS > 1) {
      // Teams 1 .. ROWS - 1 write theirs ([.][team - 1][value][thread]: no conflicts); team 0
      // adds them to its own.
      __shared__ float parts[kParams][ROWS - 1][K * V][TEAM];
      if (threadIdx.y > 0) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            if constexpr (kWeight) parts[0][threadIdx.y - 1][k * V + j][tid] = dw[k][j];
            if constexpr (kBias) parts[kParams - 1][threadIdx.y - 1][k * V + j][tid] = db[k][j];
          }
        }
      }
      __syncthreads();
      if (threadIdx.y == 0) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            for (int r = 1; r < ROWS; ++r) {
              if constexpr (kWeight) dw[k][j] += parts[0][r - 1][k * V + j][tid];
              if constexpr (kBias) db[k][j] += parts[kParams - 1][r - 1][k * V + j][tid];
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

    void* const out0 = kWeight ? p.dweight : p.dbias;
    if constexpr (C::kQuadFinalSum) {
      add_slot_quads_in_order<P, TEAM * ROWS, kParams, H, kPadded, C::kWorkspaceSlotFloats>(
          slots, threadIdx.y * TEAM + tid, out0, p.dbias);
    } else {
      add_slots_in_order<P, TEAM * ROWS, kParams, H, kPadded, C::kWorkspaceSlotFloats>(
          slots, threadIdx.y * TEAM + tid, out0, p.dbias);
    }
  }
}

}  // namespace normjit
