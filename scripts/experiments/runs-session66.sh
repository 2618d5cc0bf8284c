#!/usr/bin/env bash
# The GPU runs prepared in session 66 (performance-notes, "Session 66 ..."): the channels-last
# GroupNorm backward's plan constants. The library (a patch of 6cfa461):
#   scripts/experiments/build.sh group-nhwc-backward-knobs nhwck
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu/tests/gpu
# build-gpu/tools build-gpu/libnormjit.so* .devcarry/nhwck):
#   bash scripts/experiments/runs-session66.sh nhwck   the plan (NJX_NONE=1) against units of
#        more positions (m16: NJX_NHWC_MIN_POSITIONS=16; u2: NJX_NHWC_UNITS_PER_SM=2; u1m8),
#        waves of more items (w40: NJX_NHWC_WAVE_MIB=40) and both (w40m16), on
#        scripts/specs/groupnorm-nhwc-backward-sd.txt, 2 rounds (~3 minutes; timing)
#   bash scripts/experiments/runs-session66.sh nhwcktests KNOBS   the channels-last GroupNorm
#        backward's GPU tests (gpu_tests of build-gpu over .devcarry/nhwck, KNOBS such as
#        NJX_NHWC_MIN_POSITIONS=16 in the environment; 2 shards, ~60 s)
# OUT: the folder that comes back (default /tmp/runs-session66).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-/tmp/runs-session66}
mkdir -p "$out"
lib=.devcarry/nhwck
case "${1:-}" in
  nhwck)
    python3 scripts/ab_bench.py --specs scripts/specs/groupnorm-nhwc-backward-sd.txt --rounds 2 \
      --out "$out/nhwck" \
      --variant "plan=$lib:NJX_NONE=1" \
      --variant "m16=$lib:NJX_NHWC_MIN_POSITIONS=16" \
      --variant "u2=$lib:NJX_NHWC_UNITS_PER_SM=2" \
      --variant "u1m8=$lib:NJX_NHWC_UNITS_PER_SM=1,NJX_NHWC_MIN_POSITIONS=8" \
      --variant "w40=$lib:NJX_NHWC_WAVE_MIB=40" \
      --variant "w40m16=$lib:NJX_NHWC_WAVE_MIB=40,NJX_NHWC_MIN_POSITIONS=16" |
      tee "$out/nhwck.md"
    ;;
  nhwcktests)
    read -r -a knobs <<< "${2:-NJX_NONE=1}"
    pids=()
    for i in 0 1; do
      env "${knobs[@]}" LD_LIBRARY_PATH="$lib" GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i \
        timeout 300 build-gpu/tests/gpu/gpu_tests --gtest_filter='BackwardChannelsGpu.*Nhwc*' \
        > "$out/nhwcktests-$i.log" 2>&1 &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    grep -h -E '^\[  (PASSED|FAILED) ' "$out"/nhwcktests-*.log
    exit "$status"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
