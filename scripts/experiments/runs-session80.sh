#!/usr/bin/env bash
# The device call prepared in session 80 (made 2026-12-07; no machine started that session):
#   OUT=... bash scripts/experiments/runs-session80.sh first
# first: the row prefetch beside a residual, measured and its rule tested, one call (~6 minutes):
#   1. ONLY=1 ROUNDS=2 BUDGET=100 runs-session79.sh pfresidual (carry .devcarry/pfs): the
#      variants harness over add + RMSNorm at 1024, 4096 and 16384 tokens of 2048, 4096 and 8192
#      with the prefetch as planned and off, twice (ONLY=1,7 adds add + LayerNorm, a control
#      whose rows take no prefetch: about twice the time);
#   2. the forward rows' GPU tests (ROW_FORWARD_FILTERS of lib.sh, and the NonFinite tests) over
#      the rule's library (carry .devcarry/rule, from `bash scripts/experiments/build.sh
#      rule-residual-rows-prefetch rule`: rows with a residual prefetch only from 16 KiB of x;
#      the patch landed in generator/plan.cpp in session 81 and is gone from scripts/experiments).
# Two archives come back: $OUT/pfresidual.tgz and $OUT/rule-tests.tgz.
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  first)
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true
    ONLY=${ONLY:-1} ROUNDS=${ROUNDS:-2} BUDGET=${BUDGET:-100} OUT=$out \
      bash scripts/experiments/runs-session79.sh pfresidual
    status=0
    test_shards rule .devcarry/rule "" 120 "${ROW_FORWARD_FILTERS[@]}" 'NonFinite.*' || status=$?
    echo "the rule's forward GPU tests: exit $status"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
