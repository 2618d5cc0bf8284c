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
#        pulled into L2 before each exchange) and own2a2 (own2 with NJX_SBW_AHEAD=2: each step's
#        vectors two steps ahead towards L2) (~3 minutes; table in $out/sbwown-ab.txt)
#   bash scripts/experiments/runs-session69.sh sbwowntests KNOBS   the split backward's streamed
#        rows' GPU tests (gpu_tests of build-gpu over .devcarry/sbwown, KNOBS such as
#        NJX_SBW_OWN=2,NJX_SBW_AHEAD=2 in the environment; 3 shards, ~2 minutes)
#   bash scripts/experiments/runs-session69.sh harness   the backward GPU tests whose checks
#        session 69 moved into tests/gpu/harness.hpp (expect_same_bits_again,
#        expect_graph_replays), over build-gpu's own library (2 shards, ~2 minutes)
#   bash scripts/experiments/runs-session69.sh prodtests   the same tests over .devcarry/sbwprod:
#        the library with the sums on chip as the plan's rule (a build of the working tree that
#        would land it: /tmp/sbwprod in session 69), no knobs
#   bash scripts/experiments/runs-session69.sh first   one device call (~6 minutes): the tests of
#        `prodtests` and `harness` together, then `sbwown` with .devcarry/sbwprod beside;
#        `quick` (~4.5 minutes): prodtests, then head, own1 and own2 alone
# OUT: the folder that comes back (default ./runs-out).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
lib=.devcarry/sbwown
case "${1:-}" in
  sbwown)
    variants=(--variant "head=$lib" --variant "own1=$lib:NJX_SBW_OWN=1"
      --variant "own2=$lib:NJX_SBW_OWN=2" --variant "own2a2=$lib:NJX_SBW_OWN=2,NJX_SBW_AHEAD=2")
    [ -z "${SBWPROD:-}" ] || variants+=(--variant prod=.devcarry/sbwprod)
    timeout 300 python3 scripts/ab_bench.py --rounds 2 --out /tmp/sbwown-ab \
      --specs scripts/specs/split-backward-waves.txt "${variants[@]}" 2>&1 |
      tee "$out/sbwown-ab.txt"
    ;;
  sbwowntests)
    test_shards sbwowntests "$lib" "${2//,/ }" 240 "${SPLIT_STREAMED_FILTERS[@]}"
    ;;
  prodtests)
    # gpu_tests of the patched tree when it is there (.devcarry/sbwprod/gpu_tests: it has the
    # test of the rows in waves with their sums on chip), else build-gpu's.
    if [ -x .devcarry/sbwprod/gpu_tests ]; then export GPU_TESTS=.devcarry/sbwprod/gpu_tests; fi
    test_shards prodtests .devcarry/sbwprod "" 240 "${SPLIT_STREAMED_FILTERS[@]}"
    ;;
  harness)
    test_shards harness build-gpu "" 240 \
      'BackwardGpu.DeterministicBitsAcrossRunsAndStreams:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.LongRowsDeterministicBits:BackwardGpu.LongRowsCudaGraph*:BackwardGpu.Activation*' \
      'BackwardChannelsGpu.DeterministicBits*:BackwardChannelsGpu.CudaGraph*:BackwardChannelsGpu.StreamedGroupNorm*:BackwardChannelsGpu.GroupNormInNhwc*:BackwardChannelsGpu.ChannelFormsInNhwc*:BackwardChannelsGpu.SeedKernels'
    ;;
  quick)
    # A shorter call for a low device budget (~4.5 minutes): prodtests, then the A/B of the plan
    # against own1 and own2 only.
    status=0
    bash "$0" prodtests || status=1
    timeout 240 python3 scripts/ab_bench.py --rounds 2 --out /tmp/sbwown-ab \
      --specs scripts/specs/split-backward-waves.txt --variant "head=$lib" \
      --variant "own1=$lib:NJX_SBW_OWN=1" --variant "own2=$lib:NJX_SBW_OWN=2" 2>&1 |
      tee "$out/sbwown-ab.txt"
    exit "$status"
    ;;
  first)
    bash "$0" prodtests &
    own=$!
    bash "$0" harness &
    harness=$!
    status=0
    wait "$own" || status=1
    wait "$harness" || status=1
    SBWPROD=1 bash "$0" sbwown
    exit "$status"
    ;;
  *)
    sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
