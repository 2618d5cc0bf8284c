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

// C: the row kernels' names (row_common.cuh), and
//   kThreads        TEAM: threads per row
//   kRowsPerBlock   ROWS: rows per CTA (blockDim = (TEAM, ROWS))
//   kVectors        K: vectors per thread
//   kParamsAhead    the parameters are loaded with x (SliceParams), not as y is stored
//   kPinParams      (with kParamsAhead) their bits stored to shared memory before the
//                   reduction, so that ptxas keeps their loads with x's (SliceParams::pin)
//   kEarlyResidualStore  h is written as soon as it is formed (RMSNorm with a residual)
//   kEvictFirstRows launches of at most this many rows load x (and the residual) with an L2
//                   evict-first policy, larger ones with the normal one; 0: plain loads
//   kPrefetchRow    the team's first thread asks L2 for the row of x (and of the residual)
//                   with one bulk prefetch (sm_90)
//   kMinBlocksPerSm the launch bounds' CTAs an SM (caps the registers); 0 names none (1 would
//                   give ptxas more registers than none)
template <class C>
__global__ void __launch_bounds__(C::kThreads* C::kRowsPerBlock, C::kMinBlocksPerSm)
    row_norm(Params p) {
  constexpr int TEAM = C::kThreads, ROWS = C::kRowsPerBlock;
  constexpr long long H = C::kRowLength;
  constexpr int kWarps = TEAM > 32 ? TEAM / 32 : 1;
  using RowSlice = Slice<C, C::kVectors>;
  static_assert(H % C::kVec == 0, "vectors never straddle a row's end");
  static_assert((long long)C::kVectors * TEAM * C::kVec >= H, "a team holds its whole row");
  const long long row = (long long)blockIdx.x * ROWS + threadIdx.y;
  const bool active = row < total_rows<C>(p);
  const RowIo<C> io(p, active ? row : 0, true);
  RowSlice slice;
  // An inactive team (past the last row) loads row 0 and joins the team reduction, storing
  // nothing: every team loads whole rows, so a vector that lies within every thread's row needs
  // no bounds test (the loads of a row are issued together, none waits behind another's test).
  // Loads that the store would otherwise wait for, issued before x's: the parameters and the fp8
  // scale.
  SliceParams<C, C::kVectors> ahead;
  if constexpr (C::kParamsAhead) {
    static_assert(C::kGroups == 0 && (C::kWeight || C::kBias), "parameters per element");
    ahead.load(p, 0, threadIdx.x, NoHint{});
  }
  const Epilogue<C> epi(p);
  // A launch whose reads and writes fit in L2 marks x evict-first: read once, its lines go
  // first, so y (and h) stay in L2 for the kernel that reads them next (and, as a buffer used
  // again, are written there). Larger launches take the normal policy, a hint as well: one load
  // path (a branch to plain loads cost registers and ran slower), although on the H100 a hint
  // cost large launches 1-4% (docs/performance-notes.md; the plan therefore gives the policy
  // to short rows only).
  // kPrefetchRow: the team's first thread asks L2 for the whole row at once, before the team's
  // 16-byte loads, which go through the pointer that the prefetch's asm returns: without that
  // dependency ptxas issued the prefetch after them, and it gained nothing (the plan says where
  // it measured faster).
  RowIo<C> from = io;
  if constexpr (C::kPrefetchRow) {
    const bool issue = active && threadIdx.x == 0;
    from.x = prefetch_l2_then(io.x, H, issue);
    if constexpr (C::kResidual) from.residual = prefetch_l2_then(io.residual, H, issue);
  }
  if constexpr (C::kEvictFirstRows > 0) {
    slice.load(from, 0, threadIdx.x, io.shift(),
               l2_evict_first_if(total_rows<C>(p) <= C::kEvictFirstRows));
  } else if constexpr (C::kPrefetchRow) {
    slice.load(from, 0, threadIdx.x, io.shift(), GlobalLoad{});
  } else {
    slice.load(io, 0, threadIdx.x, io.shift());
  }
  if constexpr (C::kPinParams) {
    static_assert(C::kParamsAhead, "pins the parameters loaded with x");
    // A slot a thread: no two threads write one word (racecheck-clean).
    __shared__ unsigned int sink[TEAM * ROWS];
    ahead.pin(&sink[threadIdx.y * TEAM + threadIdx.x]);
  }
  // kEarlyResidualStore (RMSNorm with a residual): h is written as soon as it is formed, so its
  // stores overlap the reduction. (LayerNorm's waits for the store: every thread of the team
  // reads the residual's first element for its shift, and h may be written over the residual.)
  static_assert(!C::kEarlyResidualStore || (C::kResidual && C::kRms),
                "an early h is RMSNorm's, with a residual");
  if constexpr (C::kEarlyResidualStore) {
    if (active) slice.store_h_all(io, 0, threadIdx.x, NoHint{});
  }
  float mean = 0.f, rstd;
  // Each reduction has its own scratch: none waits for the others' reads of the previous one.
  if constexpr (C::kRms) {
    __shared__ float scratch[ROWS * kWarps];
    rstd =
        rsqrtf(team_reduce<TEAM, ROWS, false>(slice.sum_squares(), scratch) * (1.0f / H) + p.eps);
  } else if constexpr (RowSlice::kPacked) {
    __shared__ float scratch[2][ROWS * kWarps];
    mean = team_reduce<TEAM, ROWS, false>(slice.sum(), scratch[0]) * (1.0f / H);
    rstd = rsqrtf(team_reduce<TEAM, ROWS, false>(slice.squared_deviations(mean), scratch[1]) *
                      (1.0f / H) +
                  p.eps);
  } else {
    __shared__ Stats scratch[ROWS * kWarps];
    const Stats s = team_reduce<TEAM, ROWS, false>(slice.stats(), scratch);
    mean = s.mean;
    rstd = rsqrtf(s.m2 * (1.0f / H) + p.eps);
  }
  if (!active) return;
  if (threadIdx.x == 0) save_row_stats<C>(p, row, slice.shift_ + mean, rstd);
  slice.template store<false, 0, NoHints, !C::kEarlyResidualStore>(
      io, p, epi, row, 0, threadIdx.x, mean, rstd, NoHints{}, nullptr,
      C::kParamsAhead ? &ahead : nullptr);
}

}  // namespace normjit
