#!/usr/bin/env bash
# Session 82's device run (docs/performance-notes.md, "Session 82"), on the GPU machine from the
# repository root:
#   OUT=... bash scripts/experiments/runs-session82.sh qk
# qk: .devcarry/fv from `bash scripts/experiments/build.sh row-forward-many-rows fv` (carry
# build-gpu and .devcarry/fv, ~2 minutes): QK-norm (variant 5: RMSNorm over 128 of the q heads of
# a qkv tensor, x strided) in the variants table's harness at TOKENS (default 2048, 4096, 8192 and
# 16384), the plan beside the many-rows class's knobs: CTAs of 256 and 512 threads (c256, c512;
# the plan's 128 hold 16 rows) and teams aimed at 8 and 32 values a thread (v8: 16 threads a row,
# v32: 4). Why: the row of 4096 tokens ran at 81% of copy in session 81's table on the H100, where
# 1024 and 16384 tokens ran at 95-98%, and the L2 policy of its x moved it 0.7% (session 82's
# l2x150). SETTINGS, ROUNDS (2) and BUDGET (30 s a run) as in runs-session81.sh. One archive
# comes back: $OUT/qk.tgz.
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  qk)
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true
    ONLY=5 TOKENS=${TOKENS:-2048,4096,8192,16384} HIDDENS=4096 BUDGET=${BUDGET:-30} \
      harness_settings qk .devcarry/fv plan c256:NJX_FWD_CTA=256 c512:NJX_FWD_CTA=512 \
      v8:NJX_FWD_VALUES=8 v32:NJX_FWD_VALUES=32
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
