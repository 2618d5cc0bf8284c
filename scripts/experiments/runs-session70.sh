#!/usr/bin/env bash
# The GPU runs of session 70 (performance-notes, "Session 70"), one device call (~8.5 minutes):
#   bash scripts/experiments/runs-session70.sh first
# 1. runs-session69.sh sbwown with SBWPROD=1: the split backward's streamed parts with the sums
#    on chip (.devcarry/sbwown's knobs, and .devcarry/sbwprod, the plan's rule from
#    scripts/experiments/split-backward-sums-on-chip-rule.patch) against the library as it is
#    (table in $out/sbwown-ab.txt); alone on the GPU, so that nothing disturbs its timings;
# 2. then together: runs-session69.sh prodtests (the streamed rows' GPU tests over
#    .devcarry/sbwprod, with its own gpu_tests), every backward GPU test of build-gpu (the
#    trailing, channel and activation tests now share tests/gpu/backward_harness.hpp: the row
#    and the split/channels shards of lib.sh) and pytest's autograd GPU modules (their
#    directional-derivative check now takes dx and dweight one at a time), from normjit's
#    wheel in .whl.
# Carry build-gpu/tests/gpu build-gpu/tools build-gpu/libnormjit.so* .whl .devcarry.
# OUT: the folder that comes back (default ./runs-out).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
here69=scripts/experiments/runs-session69.sh
case "${1:-}" in
  first)
    nvidia-smi -L >"$out/device.txt" 2>&1 || true
    SBWPROD=1 timeout 280 bash "$here69" sbwown >"$out/ab.log" 2>&1 || echo "sbwown: exit $?"
    site=/tmp/normjit-site
    rm -rf "$site" && mkdir -p "$site"
    wheels=(.whl/normjit-*.whl)
    python3 -m zipfile -e "${wheels[0]}" "$site"
    pids=()
    (PYTHONPATH=$site timeout 240 python3 -m pytest -q -rfEs -p no:cacheprovider \
      tests/python/test_autograd_gpu.py tests/python/test_autograd_channels_gpu.py \
      >"$out/pytest.log" 2>&1
    echo "pytest: exit $? ($(tail -1 "$out/pytest.log"))") &
    pids+=($!)
    bash "$here69" prodtests >"$out/prodtests.log" 2>&1 &
    pids+=($!)
    test_shards rowtests build-gpu "" 240 "${ROW_BACKWARD_FILTERS[@]}" >"$out/rowtests.log" 2>&1 &
    pids+=($!)
    test_shards splittests build-gpu "" 240 "${SPLIT_CHANNELS_FILTERS[@]}" \
      >"$out/splittests.log" 2>&1 &
    pids+=($!)
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    exit "$status"
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
