#!/usr/bin/env bash
# The GPU runs of session 62 (2026-12-05; performance-notes, "Session 62 ..."), carry
# `build-gpu .whl .devcarry`:
#   bash scripts/experiments/runs-session62.sh focused   the backward's residual axis on the GPU:
#        gtest BackwardGpu.Residual* and the C API's and in-place backward tests, the channel
#        forms' nhwc backward, pytest's add + norm and channels-last training tests (~2
#        minutes), normjit bench on scripts/specs/backward-session62.txt (the residual and nhwc
#        backward kernels beside the ones they replace; ~1 minute)
#   bash scripts/experiments/runs-session62.sh bwdperf   the backward table's add, Gemma and
#        ConvNeXt rows (scripts/perf_backward.sh --only add,gemma,convnext, ~6 minutes)
#   bash scripts/experiments/runs-session62.sh eh   add + RMSNorm with h written early at 1024+
#        tokens (scripts/experiments/build.sh early-h-many-rows eh: NJX_EARLY_H=1) against the
#        plan, on scripts/specs/add-rmsnorm-early-h.txt, 3 rounds (~2 minutes; timing only)
# OUT: the folder that comes back. NORMJIT_REVISION: the revision measured.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here" || exit 2
out=${OUT:-/tmp/runs-session62}
mkdir -p "$out"
case "${1:-}" in
  focused)
    timeout 300 build-gpu/tests/gpu/gpu_tests \
      --gtest_filter='BackwardGpu.Residual*:BackwardGpu.InPlace*:BackwardGpu.CApi*:BackwardGpu.Cuda*:BackwardChannelsGpu.ChannelFormsInNhwc*' \
      > "$out/gtest.log" 2>&1
    echo "gtest: exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$out/gtest.log" | tr '\n' ' '))"
    site=/tmp/normjit-session62-site
    rm -rf "$site" && mkdir -p "$site"
    wheels=(.whl/normjit-*.whl)
    python3 -m zipfile -e "${wheels[0]}" "$site"
    PYTHONPATH=$site timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider \
      tests/python/test_autograd_gpu.py tests/python/test_autograd_channels_gpu.py \
      -k "add or gemma or channels_last" > "$out/pytest.log" 2>&1
    echo "pytest: exit $? ($(tail -1 "$out/pytest.log"))"
    timeout 90 build-gpu/tools/normjit bench --specs scripts/specs/backward-session62.txt \
      > "$out/bench-backward.txt" 2>&1
    echo "normjit bench: exit $?"
    ;;
  bwdperf)
    OUT=$out/bwd BUILD=build-gpu timeout 540 bash scripts/perf_backward.sh \
      --only add,gemma,convnext --budget-s 480 --doc "$out/backward-doc.md" > /dev/null 2>&1
    echo "perf_backward: exit $?"
    ;;
  eh)
    python3 scripts/ab_bench.py --specs scripts/specs/add-rmsnorm-early-h.txt --rounds 3 \
      --variant plan=.devcarry/eh --variant early=.devcarry/eh:NJX_EARLY_H=1 --out "$out/eh" \
      2>&1 | tee "$out/eh.md"
    ;;
  *)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
