#!/usr/bin/env bash
# Session 83's prepared device run (docs/performance-notes.md, "Prepared for the next device time
# (made 2026-12-07, session 83)"), on the GPU machine from the repository root:
#   OUT=... bash scripts/experiments/runs-session83.sh qkncu
# qkncu (carry build-gpu and .devcarry/fv, about 5 minutes): runs-session82.sh qk (QK-norm's
# team and CTA in the variants harness), then the same rows as contiguous tensors by
# `normjit bench` (scripts/specs/qk-contiguous.txt: the plan beside c512 and v32 by ab_bench, and
# build-gpu's own bench with its copy), so that the strided slice and the rows themselves can be
# told apart; then Nsight Compute's stall samples of the channels-last GroupNorm backward
# (scripts/specs/groupnorm-nhwc-backward-ncu.txt, `KERNEL=group_nhwc_backward
# scripts/ncu_source.sh`, each source page summed by scripts/sass_stalls.py), the backward
# table's rows furthest from the copy (32-54%), never profiled by instruction. Comes back:
# $OUT/qk.tgz, $OUT/qkab.txt (and qkab/), $OUT/qkbench.txt, $OUT/ncu.tgz (CSV pages and stalls).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  qkncu)
    bash scripts/experiments/runs-session82.sh qk
    python3 scripts/ab_bench.py --specs scripts/specs/qk-contiguous.txt \
      --variant plan=.devcarry/fv --variant c512=.devcarry/fv:NJX_FWD_CTA=512 \
      --variant v32=.devcarry/fv:NJX_FWD_VALUES=32 --rounds 2 --out "$out/qkab" \
      >"$out/qkab.txt" 2>&1 || echo "ab_bench: exit $?"
    build-gpu/tools/normjit bench --specs scripts/specs/qk-contiguous.txt --repeat 50 \
      >"$out/qkbench.txt" 2>&1 || echo "bench: exit $?"
    OUT=$out/ncu KERNEL=group_nhwc_backward bash scripts/ncu_source.sh build-gpu \
      scripts/specs/groupnorm-nhwc-backward-ncu.txt >"$out/ncu.log" 2>&1 || echo "ncu: exit $?"
    for page in "$out"/ncu/source-*.csv; do
      [ -f "$page" ] || continue
      python3 scripts/sass_stalls.py "$page" --top 15 >"${page%.csv}.stalls.txt" 2>&1 || true
    done
    rm -f "$out"/ncu/*.ncu-rep
    # One archive: the device tool brings back few files (session 86 lost the loose pages).
    tar czf "$out/ncu.tgz" -C "$out" ncu && rm -rf "$out/ncu"
    tail -n 8 "$out/qkab.txt" "$out/qkbench.txt" "$out/ncu.log"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
