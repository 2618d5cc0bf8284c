#!/usr/bin/env bash
# Session 74's device runs (docs/performance-notes.md, "Session 74"), on the GPU machine from the
# repository root, build-gpu carried (tests/gpu, tools, libnormjit.so*) and the experiment's slim
# build:
#   OUT=... bash scripts/experiments/runs-session74.sh teams   # the row kernel's team values
# teams: .devcarry/tv from `bash scripts/experiments/build.sh row-forward-team-values tv` (carry
# .devcarry/tv): the plan against NJX_FWD_TV=64 and 128 (fewer threads a row, more values a
# thread: more rows an SM in the same registers) on scripts/specs/row-team-values.txt, three
# rounds; then the forward GPU tests (channels last, every operator and dtype, the randomized
# sweep) over that library with each setting, so that a faster setting is also a correct one.
set -euo pipefail
out=${OUT:-/tmp/s74}
mkdir -p "$out"
case "${1:-}" in
  teams)
    LD_LIBRARY_PATH=build-gpu NORMJIT_TOOL=build-gpu/tools/normjit \
      python3 scripts/ab_bench.py --specs scripts/specs/row-team-values.txt --rounds 3 \
      --out "$out/teams" --variant head=.devcarry/tv --variant tv64=.devcarry/tv:NJX_FWD_TV=64 \
      --variant tv128=.devcarry/tv:NJX_FWD_TV=128 | grep '^|'
    t=build-gpu/tests/gpu/gpu_tests
    filter='Variants.Nhwc*:Ops.FixedShapesEveryOperatorDtypeAndAffine:Ops.RandomizedSweep'
    filter+=':Variants.LayerNorm2d*:Ops.Odd*'
    status=0
    for tv in 64 128; do
      NJX_FWD_TV=$tv NORMJIT_CACHE_DIR=/tmp/tv-cache-$tv LD_LIBRARY_PATH=.devcarry/tv $t --gtest_filter="$filter" \
        >"$out/tests-tv$tv.log" 2>&1 &
    done
    for job in $(jobs -p); do wait "$job" || status=1; done
    grep -hE '^\[  (PASSED|FAILED) |^\[==========\]' "$out"/tests-tv*.log | tail -12
    exit "$status"
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
