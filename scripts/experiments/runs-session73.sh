#!/usr/bin/env bash
# Session 73's device runs (docs/performance-notes.md, "Session 73"), on the GPU machine from the
# repository root, build-gpu carried (and python/ for the Python tests):
#   OUT=... bash scripts/experiments/runs-session73.sh ab     # 512 x 2 against 1024 x 1 (H100)
#   OUT=... bash scripts/experiments/runs-session73.sh tests  # the split rows' GPU tests
#   OUT=... bash scripts/experiments/runs-session73.sh rounds # channels-last items in rounds
#   OUT=... bash scripts/experiments/runs-session73.sh cta    # the split CTA shapes (H100)
#   OUT=... bash scripts/experiments/runs-session73.sh bounds # ConvNeXt rows' bounds (prepared)
# rounds: .devcarry/head (tools/normjit and libnormjit.so* of the tree without the patch) against
# build-gpu built from a tree with scripts/experiments/group-nhwc-rounds.patch applied (at
# d78118c; it changes tests/gpu too, so its gpu_tests run): the smallest rounds that fit, and
# NJX_NHWC_ROUNDS=8 (at least 8, the patch's throwaway knob); then the channels-last GPU tests
# over that build.
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
  rounds)
    python3 scripts/ab_bench.py --specs scripts/specs/groupnorm-nhwc-rounds.txt --rounds 3 \
      --out "$out/rounds" --variant head=.devcarry/head --variant rounds=build-gpu \
      --variant r8=build-gpu:NJX_NHWC_ROUNDS=8 | grep '^|'
    t=build-gpu/tests/gpu/gpu_tests
    $t --gtest_filter='Variants.Nhwc*' >"$out/nhwc.log" 2>&1 &
    $t --gtest_filter='Capture.*:Ops.SplitRowsInCtasOf512TwoAnSm' >"$out/capture.log" 2>&1 &
    status=0
    for job in $(jobs -p); do wait "$job" || status=1; done
    grep -E '^\[  (PASSED|FAILED) |FAILED|summary|worst' "$out/nhwc.log" "$out/capture.log" | tail -20
    exit "$status"
    ;;
  cta)
    # On an H100: .devcarry/cta from `bash scripts/experiments/build.sh split-cta-h100 cta`
    # (carry .devcarry/cta): the plan's CTAs (256 x 4 on every row of the list) against 512 x 2
    # and 1024 x 1 (NJX_SPLIT_CTA). Session 73 ran it with --rounds 2.
    python3 scripts/ab_bench.py --specs scripts/specs/split-cta-h100.txt --rounds 2 --out "$out/cta" \
      --variant head=.devcarry/cta --variant c512=.devcarry/cta:NJX_SPLIT_CTA=512 \
      --variant c1024=.devcarry/cta:NJX_SPLIT_CTA=1024 | grep '^|'
    ;;
  bounds)
    # Prepared for the next session, on an H100: .devcarry/rb from `bash
    # scripts/experiments/build.sh row-forward-bounds-knobs rb` (carry .devcarry/rb): the plan
    # (parameters with x, no bounds) against the parameters at the store and launch bounds of 12.
    python3 scripts/ab_bench.py --specs scripts/specs/convnext-nhwc-bounds.txt --rounds 3 \
      --out "$out/bounds" --variant head=.devcarry/rb --variant store=.devcarry/rb:NJX_FWD_AHEAD=0 \
      --variant b12=.devcarry/rb:NJX_FWD_MINB=12 \
      --variant store12=.devcarry/rb:NJX_FWD_AHEAD=0,NJX_FWD_MINB=12 | grep '^|'
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
    echo "usage: $0 ab|tests|rounds|cta|bounds" >&2
    exit 2
    ;;
esac
