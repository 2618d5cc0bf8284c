#!/usr/bin/env bash
# Session 73's device runs (docs/performance-notes.md, "Session 73"), on the GPU machine from the
# repository root, build-gpu carried (and python/ for the Python tests):
#   OUT=... bash scripts/experiments/runs-session73.sh ab     # 512 x 2 against 1024 x 1 (H100)
#   OUT=... bash scripts/experiments/runs-session73.sh tests  # the split rows' GPU tests
# `ab` times the specs whose plans NORMJIT_DRAM_GBPS=4800 changes (the 512 x 2 split CTA and the
# streamed GroupNorm backward, both planned from 4000 GB/s up before this session) both ways.
set -euo pipefail
out=${OUT:-/tmp/s73}
mkdir -p "$out"
export LD_LIBRARY_PATH=build-gpu NORMJIT_TOOL=build-gpu/tools/normjit
case "${1:-}" in
  ab)
    for list in dram-rules-h100 half-cta-h100; do
      python3 scripts/ab_bench.py --specs "scripts/specs/$list.txt" --rounds 3 --out "$out/$list" \
        --variant head=build-gpu --variant d4800=build-gpu:NORMJIT_DRAM_GBPS=4800 | grep '^|'
    done
    ;;
  tests)
    t=build-gpu/tests/gpu/gpu_tests
    $t --gtest_filter='Ops.FixedShapes*:Ops.SplitRowsInCtasOf512TwoAnSm' >"$out/a.log" 2>&1 &
    $t --gtest_filter='Ops.RowsLongerThanTheChipHolds:Ops.OneRowFillsTheChip:Ops.SplitRowsServe*:Ops.Unstaged*:Ops.Dynamic*' \
      >"$out/b.log" 2>&1 &
    $t --gtest_filter='Ops.RandomizedSweep:Ops.AdversarialValues:Ops.InPlace' >"$out/c.log" 2>&1 &
    NORMJIT_TEST_CACHE_DIR=/tmp/s73-cache $t --gtest_filter='Variants.Activation*:Variants.LongRows*:Capture.*' \
      >"$out/d.log" 2>&1 &
    NORMJIT_LIBRARY=$PWD/build-gpu/libnormjit.so PYTHONPATH=python python3 -m pytest -q -n 4 \
      tests/python/test_torch_gpu.py tests/python/test_activation_gpu.py >"$out/py.log" 2>&1 &
    status=0
    for job in $(jobs -p); do wait "$job" || status=1; done
    for f in a b c d; do
      echo "== $f"
      grep -E '^\[  (PASSED|FAILED) |FAILED' "$out/$f.log" | tail -8 || true
    done
    tail -3 "$out/py.log"
    exit "$status"
    ;;
  *)
    echo "usage: $0 ab|tests" >&2
    exit 2
    ;;
esac
