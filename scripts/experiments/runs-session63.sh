#!/usr/bin/env bash
# The GPU runs prepared in session 63 (2026-12-05, no device lent; performance-notes, "Session
# 63 ..."): session 62's unverified kernels and session 63's channels-last GroupNorm backward.
# Carry `build-gpu .whl .devcarry` (build-gpu and .whl built at the revision measured;
# .devcarry/eh: scripts/experiments/build.sh early-h-many-rows eh).
#   bash scripts/experiments/runs-session63.sh focused   the new backward kernels on the GPU:
#        gtest BackwardGpu.Residual* (and the C API's, in-place and graph backward tests), the
#        channel forms' nhwc backward, GroupNorm's nhwc backward (BackwardChannelsGpu.
#        GroupNormInNhwc*); pytest's add + norm, Gemma and channels-last training tests (~3
#        minutes); normjit bench on scripts/specs/backward-session62.txt and -session63.txt (each
#        new kernel beside the one it replaces; ~2 minutes)
#   bash scripts/experiments/runs-session63.sh bwdperf   the backward table's add, Gemma,
#        ConvNeXt and channels-last SD GroupNorm rows (scripts/perf_backward.sh --only
#        add,gemma,convnext,sd_nhwc, ~8 minutes)
#   bash scripts/experiments/runs-session63.sh eh   session 62's early-h experiment (issue 18):
#        add + RMSNorm with h written early at 1024+ tokens (scripts/experiments/build.sh
#        early-h-many-rows eh: NJX_EARLY_H=1) against the plan, on
#        scripts/specs/add-rmsnorm-early-h.txt, 3 rounds (~2 minutes; timing only)
# OUT: the folder that comes back. NORMJIT_REVISION: the revision measured.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here" || exit 2
out=${OUT:-/tmp/runs-session63}
mkdir -p "$out"
case "${1:-}" in
  focused)
    timeout 330 build-gpu/tests/gpu/gpu_tests \
      --gtest_filter='BackwardGpu.Residual*:BackwardGpu.InPlace*:BackwardGpu.CApi*:BackwardGpu.Cuda*:BackwardChannelsGpu.ChannelFormsInNhwc*:BackwardChannelsGpu.GroupNormInNhwc*:Backward*Activation*' \
      > "$out/gtest.log" 2>&1
    echo "gtest: exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$out/gtest.log" | tr '\n' ' '))"
    site=/tmp/normjit-session63-site
    rm -rf "$site" && mkdir -p "$site"
    wheels=(.whl/normjit-*.whl)
    python3 -m zipfile -e "${wheels[0]}" "$site"
    PYTHONPATH=$site timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider \
      tests/python/test_autograd_gpu.py tests/python/test_autograd_channels_gpu.py \
      tests/python/test_activation_gpu.py \
      -k "add or gemma or channels_last or training" > "$out/pytest.log" 2>&1
    echo "pytest: exit $? ($(tail -1 "$out/pytest.log"))"
    for specs in backward-session62 backward-session63 backward-session64; do
      timeout 90 build-gpu/tools/normjit bench --specs "scripts/specs/$specs.txt" \
        > "$out/bench-$specs.txt" 2>&1
      echo "normjit bench $specs: exit $?"
    done
    ;;
  bwdperf)
    OUT=$out/bwd BUILD=build-gpu timeout 590 bash scripts/perf_backward.sh \
      --only add,gemma,convnext,sd_nhwc,sd_silu --budget-s 540 --doc "$out/backward-doc.md" \
      > /dev/null 2>&1
    echo "perf_backward: exit $?"
    ;;
  eh)
    python3 scripts/ab_bench.py --specs scripts/specs/add-rmsnorm-early-h.txt --rounds 3 \
      --variant plan=.devcarry/eh --variant early=.devcarry/eh:NJX_EARLY_H=1 --out "$out/eh" \
      2>&1 | tee "$out/eh.md"
    ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
