#!/usr/bin/env bash
# Session 79's device runs (docs/performance-notes.md, "Session 79"), on the GPU machine from the
# repository root:
#   OUT=... bash scripts/experiments/runs-session79.sh pfresidual   # the row prefetch beside a residual
# pfresidual: .devcarry/pfs from `bash scripts/experiments/build.sh row-forward-prefetch-scope pfs`
# (carry .devcarry/pfs): the variants table's harness (tools/bench_variants.py, without
# torch.compile: its time is the table's) over add + RMSNorm (1) and add + LayerNorm (7) at 1024,
# 4096 and 16384 tokens of 2048, 4096 and 8192, with the row's L2 prefetch as planned (on) and off
# (NJX_PF_OFF=1), in turn, ROUNDS times (default 1), the variants ONLY names (default 1,7), TOKENS
# (default 1024,4096,16384), HIDDENS (default 2048,4096,8192) and BUDGET seconds a run (default
# 130); session 57 measured the prefetch costing the residual rows 2-6% at 1024 and 4096 tokens
# with separate outputs, and helping [16384, 8192] by 2.5% in one round (session 81's two rounds:
# docs/performance-notes.md, "Session 81"). One archive comes back: $OUT/pfresidual.tgz.
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  pfresidual)
    ROUNDS=${ROUNDS:-1} ONLY=${ONLY:-1,7} BUDGET=${BUDGET:-130} \
      harness_settings pfr .devcarry/pfs on off:NJX_PF_OFF=1
    mv "$out/pfr.tgz" "$out/pfresidual.tgz"
    ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
