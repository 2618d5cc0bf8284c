#!/usr/bin/env bash
# Session 81's device run (docs/performance-notes.md, "Session 81"), on the GPU machine from the
# repository root:
#   OUT=... bash scripts/experiments/runs-session81.sh knobs
#   OUT=... bash scripts/experiments/runs-session81.sh evres
# knobs: .devcarry/fv from `bash scripts/experiments/build.sh row-forward-many-rows fv` (carry
# .devcarry/fv): the row kernel's many-rows knobs in the variants table's harness
# (tools/bench_variants.py, without torch.compile: its time is the table's), where session 57
# found the row prefetch's cost that `normjit bench` did not show; until now the knobs were timed
# in `normjit bench` only (session 54: scripts/ab_bench.py). Over add + RMSNorm (1) and the
# combined variant (6) at TOKENS (default 1024,4096) of HIDDENS (default 2048,4096,8192), each
# setting of SETTINGS in turn (default: plan, torch.compile's shape of 8 values a thread with the
# parameters at the store, 16 values a thread, h written early, x and the residual loaded
# evict-first), ROUNDS times (default 2), BUDGET seconds a run (default 60). One archive comes
# back: $OUT/knobs.tgz.
# evres: .devcarry/evres from `bash scripts/experiments/build.sh evict-residual-rows evres` (carry
# build-gpu and .devcarry/evres, about 45 MiB, ~8 minutes): the same harness over add + RMSNorm
# (1), QK-norm (5), the combined variant (6) and add + LayerNorm (7) at 1024, 4096 and 16384
# tokens of 2048 and 4096, the plan beside rows with a residual of up to 4096 evict-first in
# launches that fit in L2 (res: NJX_EVICT_RESIDUAL=4096), the same with the normal policy where y
# is over x (resx: with NJX_EVICT_UNLESS_OVER_X=1) and launches of up to 150% of L2 evict-first
# (l2x150: NJX_EVICT_L2_PERCENT=150, for QK-norm at 4096 tokens), two rounds, 50 s a run; then
# the forward rows' GPU tests (lib.sh's ROW_FORWARD_FILTERS and the NonFinite tests) over the
# library under resx's knobs (TESTS=0: not). Two archives: $OUT/evres.tgz and $OUT/evres-tests.tgz.
# SETTINGS (evres, knobs): the settings, LABEL[:KNOB=V,...] separated by spaces (lib.sh).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  knobs)
    ONLY=${ONLY:-1,6} TOKENS=${TOKENS:-1024,4096} BUDGET=${BUDGET:-60} \
      harness_settings knobs .devcarry/fv plan v8s:NJX_FWD_VALUES=8,NJX_FWD_AHEAD=0 \
      v16:NJX_FWD_VALUES=16 early:NJX_EARLY_H=1 evict:NJX_EVICT_MAX_ROW=8192
    ;;
  evres)
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true
    resx=NJX_EVICT_RESIDUAL=4096,NJX_EVICT_UNLESS_OVER_X=1
    ONLY=${ONLY:-1,5,6,7} HIDDENS=${HIDDENS:-2048,4096} BUDGET=${BUDGET:-50} \
      harness_settings evres .devcarry/evres plan res:NJX_EVICT_RESIDUAL=4096 "resx:$resx" \
      l2x150:NJX_EVICT_L2_PERCENT=150
    [[ "${TESTS:-1}" == 1 ]] || exit 0
    status=0
    test_shards evres .devcarry/evres "${resx//,/ }" 120 "${ROW_FORWARD_FILTERS[@]}" \
      'NonFinite.*' || status=$?
    echo "the forward GPU tests under resx's knobs: exit $status"
    ;;
  *)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
