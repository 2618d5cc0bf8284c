#!/usr/bin/env bash
# The GPU runs of session 71 (performance-notes, "Session 71"):
#   bash scripts/experiments/runs-session71.sh tests   (~5 minutes) the GPU tests that session 70
#        left unrun, all at once: the channels, GroupNorm and split backward's shards of lib.sh
#        over build-gpu (the library with 01fee80's group_nhwc_backward), and the streamed rows'
#        shards over .devcarry/sbwpipe under NJX_SBW_OWN=4 (own4: own3 with x and dy through
#        cp.async stages) and under own4 with 2 stages
#   bash scripts/experiments/runs-session71.sh ab      (~6 minutes, alone on the GPU) the A/B of
#        the plan against own3, own4, own4s3, own4s2 and own4v2 (runs-session70.sh staged's
#        A/B; table in $out/sbwstaged-ab.txt)
# Carry build-gpu/tests/gpu build-gpu/tools build-gpu/libnormjit.so* .devcarry/sbwpipe.
# OUT: the folder that comes back (default ./runs-out).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  tests)
    nvidia-smi -L >"$out/device.txt" 2>&1 || true
    pids=()
    test_shards splittests build-gpu "" 300 "${SPLIT_CHANNELS_FILTERS[@]}" &
    pids+=($!)
    test_shards own4 .devcarry/sbwpipe "NJX_SBW_OWN=4" 300 "${SPLIT_STREAMED_FILTERS[@]}" &
    pids+=($!)
    test_shards own4s2 .devcarry/sbwpipe "NJX_SBW_OWN=4 NJX_SBW_STAGES=2" 300 \
      "${SPLIT_STREAMED_FILTERS[0]}" &
    pids+=($!)
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    exit "$status"
    ;;
  ab)
    nvidia-smi -L >"$out/device.txt" 2>&1 || true
    ab_variants sbwstaged 330 2 scripts/specs/split-backward-waves.txt .devcarry/sbwpipe \
      own3=NJX_SBW_OWN=3 own4=NJX_SBW_OWN=4 own4s3=NJX_SBW_OWN=4,NJX_SBW_STAGES=3 \
      own4s2=NJX_SBW_OWN=4,NJX_SBW_STAGES=2 own4v2=NJX_SBW_OWN=4,NJX_SBW_ONE_VECTOR=0
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
