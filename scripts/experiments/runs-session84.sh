#!/usr/bin/env bash
# Session 84's prepared device run (docs/performance-notes.md, session 84), on the GPU machine
# from the repository root:
#   OUT=... bash scripts/experiments/runs-session84.sh late
# late (carry build-gpu and .devcarry/late, about 5 minutes; .devcarry/late from `bash
# scripts/experiments/build.sh nhwc-late-channels late`): the channels-last GroupNorm backward
# with its channels' dweight and dbias sums after the wave's dx instead of between its two grid
# barriers (scripts/experiments/nhwc-late-channels.patch). First the GPU tests of that kernel
# over the patch's library (build-gpu's gpu_tests link libnormjit dynamically): the channels
# backward's nhwc, bits, graph, adversarial and parameter tests, and the activation backward's,
# in three processes at once; then scripts/ab_bench.py, build-gpu (HEAD) beside the patch, on the
# SD rows and the rounds rows (scripts/specs/groupnorm-nhwc-backward-sd.txt and -rounds.txt),
# two rounds. Comes back: $OUT/late-tests-{1,2,3}.txt, $OUT/lateab.txt and $OUT/lateab/.
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  late)
    filters=(
      'BackwardChannelsGpu.GroupNormInNhwc*:BackwardChannelsGpu.DeterministicBits*'
      'BackwardChannelsGpu.CudaGraph*:BackwardChannelsGpu.Smaller*:BackwardGpu.Activation*'
      'BackwardChannelsGpu.AdversarialValues:BackwardChannelsGpu.ParamDtype*'
    )
    pids=()
    for i in 0 1 2; do
      LD_LIBRARY_PATH=$here/.devcarry/late timeout 240 build-gpu/tests/gpu/gpu_tests \
        --gtest_filter="${filters[$i]}" >"$out/late-tests-$((i + 1)).txt" 2>&1 &
      pids+=($!)
    done
    for i in 0 1 2; do
      wait "${pids[$i]}" && echo "tests $((i + 1)): passed" || echo "tests $((i + 1)): exit $?"
    done
    cat scripts/specs/groupnorm-nhwc-backward-{sd,rounds}.txt >"$out/late-specs.txt"
    python3 scripts/ab_bench.py --specs "$out/late-specs.txt" --variant head=build-gpu \
      --variant late=.devcarry/late --rounds 2 --out "$out/lateab" >"$out/lateab.txt" 2>&1 ||
      echo "ab_bench: exit $?"
    grep -h "PASSED\|FAILED" "$out"/late-tests-*.txt || true
    tail -n 24 "$out/lateab.txt"
    ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
