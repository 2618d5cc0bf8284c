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
#   bash scripts/experiments/runs-session70.sh pipe   the split backward's rows pipelined across
#        the exchange (scripts/experiments/split-backward-pipelined-rows.patch, built as
#        .devcarry/sbwpipe by `scripts/experiments/build.sh split-backward-pipelined-rows sbwpipe`):
#        scripts/ab_bench.py --rounds 2 of scripts/specs/split-backward-waves.txt, the library with
#        its knobs off (head) against own1 (NJX_SBW_OWN=1), own3 (=3: pipelined) and own3a2 (own3
#        with NJX_SBW_AHEAD=2) (~2.5 minutes; table in $out/sbwpipe-ab.txt)
#   NORMJIT_REVISION=REV bash scripts/experiments/runs-session70.sh last   `pipe`, then the backward table's
#        channels-last rows at this checkout's revision (scripts/perf_backward.sh --only
#        "channels last" --budget-s 150: the 10 rows that group_nhwc_backward's step 2 changed in
#        01fee80; JSON and section to $out/b)
#   bash scripts/experiments/runs-session70.sh staged   own4 (NJX_SBW_OWN=4: own3 with each
#        pass's x and dy through NJX_SBW_STAGES cp.async stages of shared memory, added to the
#        patch after `pipe` ran): the streamed rows' GPU tests under own4 and own4 with 2 stages,
#        then the A/B of the plan against own3, own4, own4s3, own4s2 and own4v2 (the f32 seed's
#        pieces of two vectors kept: 2 stages) (~6.5 minutes; table in
#        $out/sbwstaged-ab.txt)
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
  pipe)
    ab_variants sbwpipe 170 2 scripts/specs/split-backward-waves.txt .devcarry/sbwpipe \
      own1=NJX_SBW_OWN=1 own3=NJX_SBW_OWN=3 own3a2=NJX_SBW_OWN=3,NJX_SBW_AHEAD=2
    ;;
  staged)
    # Session 70's later patch: own4 (own3 with x and dy through cp.async stages), first its
    # GPU tests (the streamed rows' shards of lib.sh under NJX_SBW_OWN=4 and STAGES=2), then the
    # A/B against the plan and own3.
    status=0
    test_shards own4 .devcarry/sbwpipe "NJX_SBW_OWN=4" 200 "${SPLIT_STREAMED_FILTERS[@]}" || status=1
    test_shards own4s2 .devcarry/sbwpipe "NJX_SBW_OWN=4 NJX_SBW_STAGES=2" 200 \
      "${SPLIT_STREAMED_FILTERS[0]}" || status=1
    ab_variants sbwstaged 200 2 scripts/specs/split-backward-waves.txt .devcarry/sbwpipe \
      own3=NJX_SBW_OWN=3 own4=NJX_SBW_OWN=4 own4s3=NJX_SBW_OWN=4,NJX_SBW_STAGES=3 \
      own4s2=NJX_SBW_OWN=4,NJX_SBW_STAGES=2 own4v2=NJX_SBW_OWN=4,NJX_SBW_ONE_VECTOR=0
    exit "$status"
    ;;
  last)
    nvidia-smi -L >"$out/device.txt" 2>&1 || true
    bash "$0" pipe >"$out/pipe.log" 2>&1 || echo "pipe: exit $?"
    NORMJIT_REVISION=${NORMJIT_REVISION:?the revision build-gpu was built at} \
      BUILD=build-gpu OUT="$out/b" timeout 200 bash scripts/perf_backward.sh --only "channels last" \
      --budget-s 150 >"$out/perf.log" 2>&1 || echo "perf_backward: exit $?"
    ;;
  *)
    sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
