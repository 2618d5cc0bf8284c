#!/usr/bin/env bash
# The GPU runs prepared in session 67 (performance-notes, "Session 67 ..."): the channels-last
# GroupNorm backward's overlaps (the next wave's x and dy prefetched into L2; step 2's loads in
# flight together; since session 68 also each unit's own x and dy prefetched). The library (the
# patch applies at fd1aba1):
#   scripts/experiments/build.sh group-nhwc-backward-overlap nhwcov
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu/tests/gpu
# build-gpu/tools build-gpu/libnormjit.so* .devcarry/nhwcov):
#   bash scripts/experiments/runs-session67.sh nhwcov LIST   LIST sd or rounds
#        (scripts/specs/groupnorm-nhwc-backward-LIST.txt): the library with its knobs off (head)
#        against the prefetch as each step-3 unit starts (pf1: NJX_NHWC_PREFETCH=1), all of a
#        CTA's right after step 1's barrier (pf2), pf2 with waves of 12 MiB (pf2w12), step 2's
#        loads in flight (s1: NJX_NHWC_SUM_ITEMS=1; s3: three items' columns together) and pf2s3,
#        2 rounds, and (added in session 68) each step-1 unit's own x and dy pulled into L2
#        first (own: NJX_NHWC_OWN=1) and all three (pf2s3own) (~5.5 minutes a list; table in
#        $out/nhwcov-LIST-ab.txt)
#   bash scripts/experiments/runs-session67.sh nhwcovtests KNOBS   the channels-last GroupNorm
#        backward's GPU tests (gpu_tests of build-gpu over .devcarry/nhwcov, KNOBS such as
#        NJX_NHWC_PREFETCH=2,NJX_NHWC_SUM_ITEMS=3 in the environment; 2 shards, ~30 s)
#   bash scripts/experiments/runs-session67.sh first   one device call (~7.5 minutes): the GPU
#        tests under both code paths of each knob (pf1s1: NJX_NHWC_PREFETCH=1,NJX_NHWC_SUM_ITEMS=1;
#        pf2s3own: NJX_NHWC_PREFETCH=2,NJX_NHWC_SUM_ITEMS=3,NJX_NHWC_OWN=1), then `nhwcov sd`;
#        `nhwcov rounds` in the next call
# OUT: the folder that comes back (default ./runs-out).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
lib=.devcarry/nhwcov
case "${1:-}" in
  nhwcov)
    list=${2:?LIST: sd or rounds}
    ab_variants "nhwcov-$list" 420 2 "scripts/specs/groupnorm-nhwc-backward-$list.txt" "$lib" \
      pf1=NJX_NHWC_PREFETCH=1 pf2=NJX_NHWC_PREFETCH=2 \
      pf2w12=NJX_NHWC_PREFETCH=2,NJX_NHWC_WAVE_MIB=12 \
      s1=NJX_NHWC_SUM_ITEMS=1 s3=NJX_NHWC_SUM_ITEMS=3 \
      pf2s3=NJX_NHWC_PREFETCH=2,NJX_NHWC_SUM_ITEMS=3 own=NJX_NHWC_OWN=1 \
      pf2s3own=NJX_NHWC_PREFETCH=2,NJX_NHWC_SUM_ITEMS=3,NJX_NHWC_OWN=1
    ;;
  nhwcovtests)
    test_shards nhwcovtests "$lib" "${2//,/ }" 240 \
      'BackwardChannelsGpu.GroupNormInNhwc*' 'BackwardChannelsGpu.ChannelFormsInNhwc*'
    ;;
  first)
    status=0
    test_shards nhwcov-pf1s1 "$lib" "NJX_NHWC_PREFETCH=1 NJX_NHWC_SUM_ITEMS=1" 240 \
      'BackwardChannelsGpu.GroupNormInNhwc*' 'BackwardChannelsGpu.ChannelFormsInNhwc*' || status=1
    test_shards nhwcov-pf2s3own "$lib" \
      "NJX_NHWC_PREFETCH=2 NJX_NHWC_SUM_ITEMS=3 NJX_NHWC_OWN=1" 240 \
      'BackwardChannelsGpu.GroupNormInNhwc*' 'BackwardChannelsGpu.ChannelFormsInNhwc*' || status=1
    bash "$0" nhwcov sd
    exit "$status"
    ;;
  *)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
