#!/usr/bin/env bash
# Session 84's prepared device run (docs/performance-notes.md, session 84), on the GPU machine
# from the repository root:
#   OUT=... bash scripts/experiments/runs-session84.sh late
# late (carry .devcarry/head and .devcarry/late, about 3 minutes; .devcarry/late from `bash
# scripts/experiments/build.sh nhwc-late-channels late`, .devcarry/head the same slim copy of a
# build at HEAD: libnormjit.so* and tools/normjit): the channels-last GroupNorm backward with its
# channels' dweight and dbias sums after the wave's dx instead of between its two grid barriers
# (scripts/experiments/nhwc-late-channels.patch), by scripts/ab_bench.py beside HEAD on the SD
# rows and the rounds rows (scripts/specs/groupnorm-nhwc-backward-sd.txt and -rounds.txt), two
# rounds. Its GPU tests are the suite's, of a build with the patch applied. Comes back:
# $OUT/lateab.txt and $OUT/lateab/.
# focus (carry build-gpu2, .whl and the two above, about 7 minutes): the GPU tests of
# this session's changes by scripts/gpu_suite.sh over build-gpu2 (a build of HEAD with the patch
# and the runtime's context ids and graph-released workspaces): the lifetime, capture and
# deployment tests, the channels-last GroupNorm backward's, a shard of the forward ops and
# variants, and the Python package's GPU test files, where the device budget has no room for
# the whole suite (TG and TP: their limits, default 230 s); then late. Comes back beside late's:
# $OUT/suite/ (logs.tgz).
set -euo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
  late)
    cat scripts/specs/groupnorm-nhwc-backward-{sd,rounds}.txt >"$out/late-specs.txt"
    python3 scripts/ab_bench.py --specs "$out/late-specs.txt" --variant head=.devcarry/head \
      --variant late=.devcarry/late --rounds "${ROUNDS:-2}" --out "$out/lateab" >"$out/lateab.txt" 2>&1 ||
      echo "ab_bench: exit $?"
    tail -n 24 "$out/lateab.txt"
    ;;
  focus)
    GTEST_FILTER='Lifetime.*:Capture.*:Deployment.*:NonFinite.*:RmsNormChannels.*:LayerNormChannels.*:BackwardChannelsGpu.GroupNormInNhwc*:BackwardChannelsGpu.DeterministicBits*:BackwardChannelsGpu.CudaGraph*:BackwardChannelsGpu.Smaller*:BackwardChannelsGpu.AdversarialValues:BackwardChannelsGpu.ParamDtype*:BackwardGpu.Activation*:Variants.*' \
      PYTEST_PATHS="$(echo tests/python/test_*_gpu.py) tests/python/test_launch.py \
      tests/python/test_binding.py" SHARDS=8 TG=${TG:-230} TP=${TP:-230} BUNDLE=1 \
      OUT=$out/suite bash scripts/gpu_suite.sh build-gpu2 >"$out/suite.log" 2>&1 ||
      echo "gpu_suite: exit $?"
    tail -n 30 "$out/suite.log"
    bash "$0" late
    ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
