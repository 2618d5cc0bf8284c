#!/usr/bin/env bash
# The GPU runs prepared in session 69 (performance-notes, "Session 69"): the split backward's
# streamed parts with each thread's dweight and dbias sums kept on chip over the slot's rows, a row
# at a time (scripts/experiments/split-backward-own-sums.patch, applies at 34bb1ab):
#   scripts/experiments/build.sh split-backward-own-sums sbwown
# and build-gpu (this checkout, for its gpu_tests). On the GPU machine (carry build-gpu/tests/gpu
# build-gpu/tools build-gpu/libnormjit.so* .devcarry/sbwown):
#   bash scripts/experiments/runs-session69.sh sbwown   scripts/ab_bench.py --rounds 2 of
#        scripts/specs/split-backward-waves.txt (the LayerNorm seeds, RMSNorm bf16 rows of 4 Mi,
#        LayerNorm bf16 rows of 2 Mi): the library with its knobs off (head) against own1
#        (NJX_SBW_OWN=1: a row at a time, the sums on chip), own2 (=2: and the next row's part
#        pulled into L2 before each exchange), own2a2 (own2 with NJX_SBW_AHEAD=2: each step's
#        vectors two steps ahead towards L2) and own1a2 (~3 minutes; table in $out/sbwown-ab.txt)
#   bash scripts/experiments/runs-session69.sh sbwowntests KNOBS   the split backward's streamed
#        rows' GPU tests (gpu_tests of build-gpu over .devcarry/sbwown, KNOBS such as
#        NJX_SBW_OWN=2,NJX_SBW_AHEAD=2 in the environment; 3 shards, ~2 minutes)
#   bash scripts/experiments/runs-session69.sh harness   the backward GPU tests whose checks
#        session 69 moved into tests/gpu/harness.hpp (expect_same_bits_again,
#        expect_graph_replays), over build-gpu's own library (2 shards, ~2 minutes)
#   bash scripts/experiments/runs-session69.sh first   one device call (~6 minutes): the tests of
#        `sbwowntests NJX_SBW_OWN=2,NJX_SBW_AHEAD=2` and `harness` together, then `sbwown`
# OUT: the folder that comes back (default ./runs-out).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
lib=.devcarry/sbwown
case "${1:-}" in
  sbwown)
    ab_variants sbwown 300 2 scripts/specs/split-backward-waves.txt "$lib" \
      own1=NJX_SBW_OWN=1 own2=NJX_SBW_OWN=2 own2a2=NJX_SBW_OWN=2,NJX_SBW_AHEAD=2 \
      own1a2=NJX_SBW_OWN=1,NJX_SBW_AHEAD=2
    ;;
  sbwowntests)
    test_shards sbwowntests "$lib" "${2//,/ }" 240 "${SPLIT_STREAMED_FILTERS[@]}"
    ;;
  harness)
    test_shards harness build-gpu "" 240 \
      'BackwardGpu.DeterministicBitsAcrossRunsAndStreams:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.LongRowsDeterministicBits:BackwardGpu.LongRowsCudaGraph*:BackwardGpu.Activation*' \
      'BackwardChannelsGpu.DeterministicBits*:BackwardChannelsGpu.CudaGraph*:BackwardChannelsGpu.StreamedGroupNorm*:BackwardChannelsGpu.GroupNormInNhwc*:BackwardChannelsGpu.ChannelFormsInNhwc*:BackwardChannelsGpu.SeedKernels'
    ;;
  first)
    bash "$0" sbwowntests NJX_SBW_OWN=2,NJX_SBW_AHEAD=2 &
    own=$!
    bash "$0" harness &
    harness=$!
    status=0
    wait "$own" || status=1
    wait "$harness" || status=1
    bash "$0" sbwown
    exit "$status"
    ;;
  *)
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
