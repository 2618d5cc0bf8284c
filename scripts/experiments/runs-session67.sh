#!/usr/bin/env bash
# The GPU runs prepared in session 67 (performance-notes, "Session 67 ..."): the channels-last
# GroupNorm backward with the next wave's x and dy prefetched into L2. The library (a patch of
# 2fe3c38):
#   scripts/experiments/build.sh group-nhwc-backward-prefetch nhwcpf
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu/tests/gpu
# build-gpu/tools build-gpu/libnormjit.so* .devcarry/nhwcpf):
#   bash scripts/experiments/runs-session67.sh nhwcpf   the plan (NJX_NONE=1) against the
#        prefetch as each step-3 unit starts (pf1: NJX_NHWC_PREFETCH=1), all of a CTA's right
#        after step 1's barrier (pf2), pf2 with waves of 12 MiB (pf2w12) and pf1 with f32 waves
#        of 16 MiB (pf1w16: two waves of f32 then fit the H100's L2), on
#        scripts/specs/groupnorm-nhwc-backward-sd.txt and -rounds.txt, 2 rounds (~5 minutes)
#   bash scripts/experiments/runs-session67.sh nhwcpftests KNOBS   the channels-last GroupNorm
#        backward's GPU tests (gpu_tests of build-gpu over .devcarry/nhwcpf, KNOBS such as
#        NJX_NHWC_PREFETCH=2 in the environment; 2 shards, ~30 s)
# OUT: the folder that comes back (default /tmp/runs-session67).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-/tmp/runs-session67}
mkdir -p "$out"
lib=.devcarry/nhwcpf
case "${1:-}" in
  nhwcpf)
    for list in sd rounds; do
      python3 scripts/ab_bench.py --specs "scripts/specs/groupnorm-nhwc-backward-$list.txt" \
        --rounds 2 --out "$out/nhwcpf-$list" \
        --variant "plan=$lib:NJX_NONE=1" \
        --variant "pf1=$lib:NJX_NHWC_PREFETCH=1" \
        --variant "pf2=$lib:NJX_NHWC_PREFETCH=2" \
        --variant "pf2w12=$lib:NJX_NHWC_PREFETCH=2,NJX_NHWC_WAVE_MIB=12" \
        --variant "pf1w16=$lib:NJX_NHWC_PREFETCH=1,NJX_NHWC_WAVE_MIB=16" |
        tee "$out/nhwcpf-$list.md"
    done
    ;;
  nhwcpftests)
    read -r -a knobs <<< "${2:-NJX_NONE=1}"
    pids=()
    for i in 0 1; do
      env "${knobs[@]}" LD_LIBRARY_PATH="$lib" GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i \
        timeout 300 build-gpu/tests/gpu/gpu_tests --gtest_filter='BackwardChannelsGpu.*Nhwc*' \
        > "$out/nhwcpftests-$i.log" 2>&1 &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    grep -h -E '^\[ +(OK|PASSED|FAILED) ' "$out"/nhwcpftests-*.log
    exit "$status"
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
