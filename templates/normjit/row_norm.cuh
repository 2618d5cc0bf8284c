// Rows that fit in the registers of one team: LayerNorm and RMSNorm over trailing dims, and
// GroupNorm, for rows of up to TEAM*K*V elements.
//
// blockDim = (TEAM, ROWS): each team of TEAM threads owns one row, each thread K vectors of
// V elements (16-byte accesses where H allows), so x is read exactly once. Statistics:
// 16-bit values held packed take the row's exact two passes, the team summing the values,
// then their squared deviations from the mean, each a team reduction of one float (on the
// H100 that ran the bf16 LLM rows faster than the alternative; normjit bench,
// docs/performance-notes.md). f32 values take one reduction merging per-thread exact
// two-pass (count, mean, M2) with Chan's formula: as fast for the f32 rows, and holding
// scalar-access rows (odd lengths) across two reductions made ptxas spill them.
#pragma once

#include "normjit/row_common.cuh"

namespace normjit {

template <class T, bool kRms, long long H, int TEAM, int ROWS, int V, int K, int G, long long S,
          int CG, bool kWeight, bool kBias>
__global__ void __launch_bounds__(TEAM* ROWS) row_norm(Params p) {
  constexpr int kWarps = TEAM > 32 ? TEAM / 32 : 1;
  const long long row = (long long)blockIdx.x * ROWS + threadIdx.y;
  const bool active = row < total_rows<G>(p);
  const T* x = static_cast<const T*>(p.x) + (active ? row : 0) * H;
  Slice<T, K, V, TEAM, H> slice;
  // An inactive row (past the last) loads nothing but still joins the team reduction.
  slice.load(x, active ? 0 : H, threadIdx.x, active ? row_shift<kRms>(x) : 0.f);
  float mean = 0.f, rstd;
  if constexpr (kRms) {
    __shared__ float scratch[ROWS * kWarps];
    rstd = rsqrtf(team_reduce<TEAM, ROWS>(slice.sum_squares(), scratch) * (1.0f / H) + p.eps);
  } else if constexpr (Slice<T, K, V, TEAM, H>::kPacked) {
    __shared__ float scratch[ROWS * kWarps];
    mean = team_reduce<TEAM, ROWS>(slice.sum(), scratch) * (1.0f / H);
    rstd = rsqrtf(team_reduce<TEAM, ROWS>(slice.squared_deviations(mean), scratch) * (1.0f / H) +
                  p.eps);
  } else {
    __shared__ Stats scratch[ROWS * kWarps];
    const Stats s = team_reduce<TEAM, ROWS>(slice.stats(), scratch);
    mean = s.mean;
    rstd = rsqrtf(s.m2 * (1.0f / H) + p.eps);
  }
  if (!active) return;
  slice.template store<G, S, CG, kWeight, kBias>(static_cast<T*>(p.y) + row * H, p, row, 0,
                                                 threadIdx.x, mean, rstd);
}

}  // namespace normjit
