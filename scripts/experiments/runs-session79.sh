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
out=${OUT:-/tmp/s79}
mkdir -p "$out"
case "${1:-}" in
  pfresidual)
    dir=$out/pfr
    mkdir -p "$dir"
    for round in $(seq "${ROUNDS:-1}"); do
      for knob in on off; do
        knobs=(-u NJX_PF_OFF)
        [ "$knob" = off ] && knobs=(NJX_PF_OFF=1)
        cp docs/performance.md "/tmp/pfr-$knob.md"
        status=0
        env "${knobs[@]}" timeout $(( ${BUDGET:-130} + 20 )) python3 tools/bench_variants.py \
          --lib .devcarry/pfs/libnormjit.so --only "${ONLY:-1,7}" --skip-compile \
          --tokens "${TOKENS:-1024,4096,16384}" --hiddens "${HIDDENS:-2048,4096,8192}" --rounds 3 \
          --budget-s "${BUDGET:-130}" \
          --doc "/tmp/pfr-$knob.md" --section-out "$dir/r$round-$knob.md" \
          --json-out "$dir/r$round-$knob.json" >"$dir/r$round-$knob.log" 2>&1 || status=$?
        echo "round $round, the row prefetch $knob: exit $status"
      done
    done
    tar czf "$out/pfresidual.tgz" -C "$out" pfr && rm -rf "$dir"
    ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
