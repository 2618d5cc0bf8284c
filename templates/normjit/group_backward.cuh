// The backward of GroupNorm over x[N, C, S] (S = product of the spatial dims) with G groups of
// CG = C / G channels: dx from x, dy, the statistics the forward saved (save_stats: mean and
// rstd of each row (n, g), at n * G + g) and the weight; dweight[c] and dbias[c] summed over n
// and the positions, deterministically.
//
// Per row (n, g) of H = CG * S elements, in f32: xhat = (x - mean) * rstd, g = dy * (offset +
// w[c]), dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). Since w is constant along a channel,
// the row's sums of g and g * xhat are sum_c w[c] * B[n, c] and sum_c w[c] * A[n, c], with
// A[n, c] = sum_s dy * xhat and B[n, c] = sum_s dy, which are dweight[c] and dbias[c] before
// the sum over n. So everything reduces to per-channel sums, taken from x and dy once.
// With an activation after the affine step (kActivation), dy is first taken through its
// derivative at the forward's z = xhat * (offset + w[c]) + b[c] (through_activation,
// backward_common.cuh) wherever it is read: A and B are then sums of that, and the rest holds.
//
// The work: a unit is M chunks of TEAM * K * V consecutive positions of one channel of one row
// (T units cover a channel's S; a team of TEAM threads takes a unit, K vectors of V elements
// per thread a chunk, the chunks in turn, each thread's sums carried from one chunk to the next
// so that the team reduces once a unit). The grid (persistent, launched cooperatively) takes the
// rows in waves of R rows; per wave, with one grid barrier:
//   1. every unit's (A, B) partial is written to the workspace (team reduction);
//   -- grid barrier --
//   2. every unit reads its row's partials (all CG * T, in the same order in every unit: the
//      same bits), forms the row's two means and writes its dx, reading x and dy again (a wave
//      is sized to stay in L2, so that second read rarely reaches DRAM; or, f32 on large
//      channels of a GPU with fast DRAM, it streams from DRAM again, as many rows a wave as the
//      workspace allows, the loads issued before the partials are read: kLoadAhead); the first
//      unit of each channel also adds the channel's T partials (A[n, c], B[n, c]) in a fixed order;
//   and the owner of each channel (one thread of the grid, fixed by its index) adds the
//   previous wave's A[n, c] and B[n, c] to its running dweight[c] and dbias[c], rows in order.
// The partials and the channel sums alternate between two buffers by wave parity: a wave's
// step 1 may start while slower CTAs still read the previous wave's, never the one before
// (every CTA has passed the barrier in between). After the last wave, one more barrier, the
// owners add it and write dweight and dbias. Each dweight[c] is the sum over n in order of
// per-(n, c) sums whose order is fixed by the configuration: the bits do not depend on the
// grid, and two runs on the same inputs give the same bits.
//
// Workspace (floats, each region padded to kSlotAlign): the grid barrier's counter, then
// partials[2][R][CG][T] (A, B), channel sums[2][R][CG] (A, B), accumulators[2][C] (dweight,
// dbias); the last two only with parameters.
#pragma once

#include "normjit/backward_common.cuh"
#include "normjit/params.cuh"
#include "normjit/vec.cuh"

namespace normjit {

// Step 2's chunk buffers (of x or dy): B chunks of K vectors of W values (floats, or raw words),
// chunk m in buffer m % B; one plain [K][W] array where B is 1. (One array of one buffer,
// [1][K][W], or a struct around it, made ptxas interleave a unit's loads with their conversions,
// and narrow f16 [1, 128, 255, 255] ran 12% slower: performance-notes, 2026-11-28.)
template <class T, int B, int K, int W>
struct Chunks {
  using type = T[B][K][W];
  static __device__ __forceinline__ T (&of(type& buffers, int m))[K][W] { return buffers[m % B]; }
};
template <class T, int K, int W>
struct Chunks<T, 1, K, W> {
  using type = T[K][W];
  static __device__ __forceinline__ T (&of(type& buffer, int))[K][W] { return buffer; }
};

// C: the configuration generator/emit.cpp writes:
//   X, Param                   dtypes of x, dy and dx; of weight, bias, dweight and dbias
//   kWeight, kBias             the forward's affine step: y = xhat * (kWeightOffset + w) + b
//   kWeightOffset              added to the weight in f32
//   kActivation                the forward's activation after the affine step (p.bias read
//                              for z where there is a bias)
//   kChannels, kGroups         C, G
//   kChannelsPerGroup          CG = C / G
//   kSpatial                   S: elements per channel
//   kThreads, kRowsPerBlock    TEAM, ROWS: blockDim = (TEAM, ROWS), a unit per team
//   kVec, kVectors             V: elements per access (V divides S); K: vectors per thread
//   kChunks                    M: chunks of TEAM * K * V positions a unit
//   kChunksAhead               A: step 2 loads chunks m + 1 .. m + A while chunk m's dx is
//                              formed (1 <= A < M; 1 where M is 1)
//   kUnitsPerChannel           T: units of M * TEAM * K * V positions that cover S
//   kWaveRows                  R: rows (n, g) per wave
//   kPrefetchNextWave          step 2 starts pulling the next wave's x and dy into L2
//   kMinBlocksPerSm            CTAs of the launch an SM holds at least (the launch bounds':
//                              caps the registers a thread takes)
//   kLoadAhead                 step 2 loads a unit's x and dy before its row's sums, not after
//                              (waves that do not stay in L2: the loads then wait on DRAM)
//   kWorkspaceFloats           the plan's workspace (checked against the layout above)
template <class C>
__global__ void __launch_bounds__(C::kThreads* C::kRowsPerBlock, C::kMinBlocksPerSm)
    group_backward(Params p) {
  using X = typename C::X;
  using P = typename C::Param;
  constexpr int TEAM = C::kThreads, ROWS = C::kRowsPerBlock, V = C::kVec, K = C::kVectors;
  constexpr long long CH = C::kChannels, G = C::kGroups, CG = C::kChannelsPerGroup;
  constexpr long long S = C::kSpatial, T = C::kUnitsPerChannel, R = C::kWaveRows;
  constexpr int M = C::kChunks;
  constexpr long long L = (long long)TEAM * K * V;  // positions per chunk
  constexpr long long U = L * M;                    // positions per unit
  constexpr long long H = CG * S;                   // elements per row
  constexpr long long kUnitsPerRow = CG * T;
  constexpr bool kWeight = C::kWeight, kBias = C::kBias;
  constexpr int kParams = kWeight + kBias;
  constexpr int kWarps = TEAM > 32 ? TEAM / 32 : 1;
  static_assert(CG * G == CH, "groups divide the channels");
  static_assert(S % V == 0, "vectors never straddle a channel's end");
  static_assert(M >= 1 && M <= 8, "a unit's chunks are unrolled (their buffers in registers)");
  static_assert(C::kChunksAhead >= 1 && (M == 1 ? C::kChunksAhead == 1 : C::kChunksAhead < M),
                "step 2 loads ahead only chunks of the unit");
  static_assert(L * (M - 1) < S, "no chunk of a channel's first unit lies past its end");
  static_assert((T - 1) * U < S && S <= T * U, "T units cover a channel, none empty");
  static_assert(TEAM * ROWS % 32 == 0, "whole warps");
  constexpr long long kPartialFloats = padded_floats(R * kUnitsPerRow * 2);  // one buffer
  constexpr long long kChannelFloats = kParams > 0 ? padded_floats(R * CG * 2) : 0;
  constexpr long long kPartials = kBarrierFloats;
  constexpr long long kChannelSums = kPartials + 2 * kPartialFloats;
  constexpr long long kAccumulators = kChannelSums + 2 * kChannelFloats;
  constexpr long long kEnd = kAccumulators + (kParams > 0 ? padded_floats(2 * CH) : 0);
  static_assert(C::kWorkspaceFloats == kEnd, "the plan sizes the workspace as laid out here");

  float* const ws = p.workspace;
  unsigned int* const counter = reinterpret_cast<unsigned int*>(ws);
  const long long rows = p.batch * G;
  const int tid = threadIdx.x;
  const long long thread = ((long long)blockIdx.x * ROWS + threadIdx.y) * TEAM + tid;
  const long long threads = (long long)gridDim.x * ROWS * TEAM;
  const P* weight = static_cast<const P*>(p.weight);
  const auto w_of = [&](long long c) {
    return kWeight ? to_float(weight[c]) + C::kWeightOffset : 1.0f;
  };
  // The bias of channel c where the activation's z needs it, else 0.
  constexpr bool kActBias = C::kActivation != Activation::kNone && kBias;
  const auto b_of = [&](long long c) {
    return kActBias ? to_float(static_cast<const P*>(p.bias)[c]) : 0.0f;
  };
  __shared__ GradSums scratch[ROWS * kWarps];

  // Where unit u of the wave starting at row `first` lies.
  struct Unit {
    long long row, n, g, cg, c, t, begin;  // begin: the unit's first element in x
  };
  const auto unit_at = [&](long long first, long long u) {
    Unit at;
    at.t = u % T;
    const long long channel = u / T;  // (row in the wave, cg)
    at.cg = channel % CG;
    at.row = first + channel / CG;
    at.n = at.row / G;
    at.g = at.row - at.n * G;
    at.c = at.g * CG + at.cg;
    at.begin = (at.n * CH + at.c) * S + at.t * U;
    return at;
  };
  // This thread's vector k of chunk m of a unit: its position within the unit, and whether the
  // channel has it (the last unit of a channel may be short).
  const auto col = [&](int m, int k) { return m * L + (long long)(tid + k * TEAM) * V; };
  const auto has = [&](const Unit& at, int m, int k) { return at.t * U + col(m, k) < S; };

  // The owners' running sums start at 0 (each thread zeroes the channels it owns and is the
  // only one to touch them until the end).
  if constexpr (kParams > 0) {
#pragma unroll 1  // a trip count would cost a 64-bit division
    for (long long c = thread; c < CH; c += threads) {
      ws[kAccumulators + c] = 0.f;
      ws[kAccumulators + CH + c] = 0.f;
    }
  }
  // Owners add wave `wave`'s channel sums (rows first .. first + wave_rows - 1) to their
  // running sums, rows in order; after the last wave they write dweight and dbias.
  const auto accumulate = [&](long long wave, long long first, long long wave_rows, bool last) {
    if constexpr (kParams > 0) {
      const float* sums = ws + kChannelSums + (wave & 1) * kChannelFloats;
#pragma unroll 1
      for (long long c = thread; c < CH; c += threads) {
        const long long g = c / CG, cg = c - g * CG;
        float a = load_global_cg(ws + kAccumulators + c);
        float b = load_global_cg(ws + kAccumulators + CH + c);
        // The wave's rows of group g, in order: first + r with (first + r) % G == g.
        for (long long r = (g - first % G + G) % G; r < wave_rows; r += G) {
          a += load_global_cg(sums + (r * CG + cg) * 2);
          b += load_global_cg(sums + (r * CG + cg) * 2 + 1);
        }
        if (last) {
          if constexpr (kWeight) static_cast<P*>(p.dweight)[c] = from_float<P>(a);
          if constexpr (kBias) static_cast<P*>(p.dbias)[c] = from_float<P>(b);
        } else {
          ws[kAccumulators + c] = a;
          ws[kAccumulators + CH + c] = b;
        }
      }
    }
  };

  // Step 1 for unit u of the wave starting at row `first` (`units` units): its sums of dy * xhat
  // and dy into `partials`. (The same trip count for the whole CTA: the team reduction may
  // synchronize it, so an inactive team loads nothing but joins the reduction.)
  const auto step1 = [&](long long first, long long units, long long u, float* partials) {
    const bool active = u < units;
    const Unit at = unit_at(first, active ? u : 0);
    const float mean = active ? p.mean[at.row] : 0.f;
    const float rstd = active ? p.rstd[at.row] : 0.f;
    const X* x = static_cast<const X*>(p.x) + at.begin;
    const X* dy = static_cast<const X*>(p.dy) + at.begin;
    GradSums sums{0.f, 0.f};  // g: sum dy; gx: sum dy * xhat
    // The channel's weight and bias, for the activation's z.
    const float wc = C::kActivation != Activation::kNone ? w_of(at.c) : 1.f;
    const float bc = b_of(at.c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[K][V], dyv[K][V];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (active && has(at, m, k)) {
          load_vec<X, V>(x + col(m, k), xv[k]);
          load_vec<X, V>(dy + col(m, k), dyv[k]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) xv[k][j] = mean, dyv[k][j] = 0.f;
        }
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xhat = (xv[k][j] - mean) * rstd;
          const float d = through_activation<C>(dyv[k][j], xhat, wc, bc);
          sums.g += d;
          sums.gx = fmaf(d, xhat, sums.gx);
        }
      }
    }
    sums = team_reduce<TEAM, ROWS>(sums, scratch);
    if (active && tid == 0) {
      partials[u * 2] = sums.gx;
      partials[u * 2 + 1] = sums.g;
    }
  };

  // Step 2 for unit u of wave `wave` (starting at row `first`, `units` units, its partials in
  // `partials`): dx, and the channel sums. With kPrefetchNextWave each unit first starts pulling
  // the same unit of the next wave (`next_units` units) into L2 (its x and dy, sm_90+), so that
  // wave's step 1 reads them from there while this step's dx goes out: DRAM reads overlap the
  // writes instead of following them.
  const auto step2 = [&](long long wave, long long first, long long units, long long next_units,
                         long long u, const float* partials) {
    const bool active = u < units;
    if (C::kPrefetchNextWave && tid == 0 && u < next_units) {
      const Unit next = unit_at(first + R, u);
      const long long end = S - next.t * U < U ? S - next.t * U : U;
      prefetch_l2(static_cast<const X*>(p.x) + next.begin, 0, end);
      prefetch_l2(static_cast<const X*>(p.dy) + next.begin, 0, end);
    }
    const Unit at = unit_at(first, active ? u : 0);
    const X* x = static_cast<const X*>(p.x) + at.begin;
    const X* dy = static_cast<const X*>(p.dy) + at.begin;
    X* dx = static_cast<X*>(p.y) + at.begin;
    // Chunk m's x and dy, in buffer m % B: chunks m + 1 .. m + A (A = kChunksAhead) are loaded
    // before chunk m's dx is formed and stored (one buffer where a unit is one chunk). From A = 2
    // on the buffers hold raw words (16 registers a chunk of 16 16-bit values of x and dy, not 32),
    // converted as dx is formed.
    constexpr int A = C::kChunksAhead;
    constexpr bool kRaw = A > 1;
    constexpr int B = M > 1 ? A + 1 : 1;
    constexpr int W = kRaw ? V * int(sizeof(X)) / 4 : 1;
    using Floats = Chunks<float, kRaw ? 1 : B, K, V>;
    using Words = Chunks<unsigned int, kRaw ? B : 1, K, W>;
    typename Floats::type xv, dyv;
    typename Words::type xr, dyr;
    const auto load_chunk = [&](int m) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (active && has(at, m, k)) {
          if constexpr (kRaw) {
            load_raw<W>(x + col(m, k), Words::of(xr, m)[k], NoHint{});
            load_raw<W>(dy + col(m, k), Words::of(dyr, m)[k], NoHint{});
          } else {
            load_vec<X, V>(x + col(m, k), Floats::of(xv, m)[k]);
            load_vec<X, V>(dy + col(m, k), Floats::of(dyv, m)[k]);
          }
        }
      }
    };
    const auto prologue = [&] {
#pragma unroll
      for (int a = 0; a < A; ++a) load_chunk(a);
    };
    if constexpr (C::kLoadAhead) prologue();  // its DRAM latency under the row's sums below
    const float* row_partials = partials + (at.row - first) * kUnitsPerRow * 2;
    // The row's sums of g and g * xhat from its CG * T partials: thread tid adds the partials
    // tid, tid + TEAM, ... in order, then the team's fixed tree. Every unit of the row computes
    // the same bits.
    GradSums row{0.f, 0.f};
    if (active) {
      for (long long i = tid; i < kUnitsPerRow; i += TEAM) {
        const float w = w_of(at.g * CG + i / T);
        row.gx = fmaf(w, load_global_cg(row_partials + i * 2), row.gx);
        row.g = fmaf(w, load_global_cg(row_partials + i * 2 + 1), row.g);
      }
    }
    row = team_reduce<TEAM, ROWS>(row, scratch);
    if constexpr (kParams > 0) {
      // The channel's sums A[n, c] and B[n, c] from its T partials (every team reduces them,
      // since the team reduction may synchronize the CTA; the channel's first unit writes them).
      GradSums channel{0.f, 0.f};
      if (active) {
        for (long long t = tid; t < T; t += TEAM) {
          channel.gx += load_global_cg(row_partials + (at.cg * T + t) * 2);
          channel.g += load_global_cg(row_partials + (at.cg * T + t) * 2 + 1);
        }
      }
      channel = team_reduce<TEAM, ROWS>(channel, scratch);
      if (active && at.t == 0 && tid == 0) {
        float* sums = ws + kChannelSums + (wave & 1) * kChannelFloats;
        sums[((at.row - first) * CG + at.cg) * 2] = channel.gx;
        sums[((at.row - first) * CG + at.cg) * 2 + 1] = channel.g;
      }
    }
    if (!active) return;
    const float mean = p.mean[at.row], rstd = p.rstd[at.row];
    const float mean_g = row.g * (1.0f / H), mean_gx = row.gx * (1.0f / H);
    const float w = w_of(at.c), b = b_of(at.c);
    if constexpr (!C::kLoadAhead) prologue();
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (m + A < M) load_chunk(m + A);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (!has(at, m, k)) continue;
        float out[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float xj, dyj;
          if constexpr (kRaw) {
            xj = word_value<X>(Words::of(xr, m)[k], j);
            dyj = word_value<X>(Words::of(dyr, m)[k], j);
          } else {
            xj = Floats::of(xv, m)[k][j];
            dyj = Floats::of(dyv, m)[k][j];
          }
          const float xhat = (xj - mean) * rstd;
          const float g = through_activation<C>(dyj, xhat, w, b) * w;
          out[j] = rstd * (g - fmaf(xhat, mean_gx, mean_g));
        }
        store_vec<X, V>(dx + col(m, k), out);
      }
    }
  };

  const long long waves = (rows + R - 1) / R;
  const auto units_of = [&](long long wave) {  // 0 past the last wave
    const long long left = rows - wave * R;
    return wave >= waves ? 0 : (left < R ? left : R) * kUnitsPerRow;
  };
  const auto partials_of = [&](long long wave) {
    return ws + kPartials + (wave & 1) * kPartialFloats;
  };
  const long long cta_first = (long long)blockIdx.x * ROWS;
  const long long cta_stride = (long long)gridDim.x * ROWS;
  for (long long wave = 0; wave < waves; ++wave) {
    const long long first = wave * R, units = units_of(wave), next_units = units_of(wave + 1);
    for (long long base = cta_first; base < units; base += cta_stride) {
      step1(first, units, base + threadIdx.y, partials_of(wave));
    }
    grid_barrier(counter);
    // The owners take the previous wave (its channel sums were written before this barrier).
    if (wave > 0) accumulate(wave - 1, first - R, R, /*last=*/false);
    for (long long base = cta_first; base < units; base += cta_stride) {
      step2(wave, first, units, next_units, base + threadIdx.y, partials_of(wave));
    }
  }
  if constexpr (kParams > 0) {
    grid_barrier(counter);
    const long long last_first = (waves - 1) * R;
    accumulate(waves - 1, last_first, rows - last_first, /*last=*/true);
  }
}

}  // namespace normjit
