#!/usr/bin/env bash
# The GPU runs prepared in session 67 (performance-notes, "Session 67 ..."): the channels-last
# GroupNorm backward's overlaps (the next wave's x and dy prefetched into L2; step 2's loads in
# flight together). The library (a patch of 4053b1d):
#   scripts/experiments/build.sh group-nhwc-backward-overlap nhwcov
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu/tests/gpu
# build-gpu/tools build-gpu/libnormjit.so* .devcarry/nhwcov):
#   bash scripts/experiments/runs-session67.sh nhwcov LIST   LIST sd or rounds
#        (scripts/specs/groupnorm-nhwc-backward-LIST.txt): the plan (NJX_NONE=1) against the
#        prefetch as each step-3 unit starts (pf1: NJX_NHWC_PREFETCH=1), all of a CTA's right
#        after step 1's barrier (pf2), pf2 with waves of 12 MiB (pf2w12), step 2's loads in flight
#        (s1: NJX_NHWC_SUM_ITEMS=1; s3: three items' columns together) and pf2s3, 2 rounds
#        (~4 minutes a list)
#   bash scripts/experiments/runs-session67.sh nhwcovtests KNOBS   the channels-last GroupNorm
#        backward's GPU tests (gpu_tests of build-gpu over .devcarry/nhwcov, KNOBS such as
#        "NJX_NHWC_PREFETCH=2 NJX_NHWC_SUM_ITEMS=3" in the environment; 2 shards, ~30 s)
# OUT: the folder that comes back (default /tmp/runs-session67).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-/tmp/runs-session67}
mkdir -p "$out"
lib=.devcarry/nhwcov
case "${1:-}" in
  nhwcov)
    list=${2:?LIST: sd or rounds}
    python3 scripts/ab_bench.py --specs "scripts/specs/groupnorm-nhwc-backward-$list.txt" \
      --rounds 2 --out "$out/nhwcov-$list" \
      --variant "plan=$lib:NJX_NONE=1" \
      --variant "pf1=$lib:NJX_NHWC_PREFETCH=1" \
      --variant "pf2=$lib:NJX_NHWC_PREFETCH=2" \
      --variant "pf2w12=$lib:NJX_NHWC_PREFETCH=2,NJX_NHWC_WAVE_MIB=12" \
      --variant "s1=$lib:NJX_NHWC_SUM_ITEMS=1" \
      --variant "s3=$lib:NJX_NHWC_SUM_ITEMS=3" \
      --variant "pf2s3=$lib:NJX_NHWC_PREFETCH=2,NJX_NHWC_SUM_ITEMS=3" |
      tee "$out/nhwcov-$list.md"
    ;;
  nhwcovtests)
    read -r -a knobs <<< "${2:-NJX_NONE=1}"
    pids=()
    for i in 0 1; do
      env "${knobs[@]}" LD_LIBRARY_PATH="$lib" GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i \
        timeout 300 build-gpu/tests/gpu/gpu_tests --gtest_filter='BackwardChannelsGpu.*Nhwc*' \
        > "$out/nhwcovtests-$i.log" 2>&1 &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    grep -h -E '^\[ +(OK|PASSED|FAILED) ' "$out"/nhwcovtests-*.log
    exit "$status"
    ;;
  *)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
