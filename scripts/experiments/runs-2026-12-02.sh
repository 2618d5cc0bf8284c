#!/usr/bin/env bash
# The GPU runs of 2026-12-02, all made and written up in performance-notes ("The row backward's
# final sum over every CTA, and a barrier for each team", and "The row backward's grid barrier
# with release and acquire"); kept to say how the numbers there were made. The next runs are in
# runs-2026-12-03.sh. Each step's library:
#   flags     scripts/experiments/build.sh row-backward-flagged-sum flags   (.devcarry/flags)
#   clock     scripts/experiments/build.sh row-backward-clock clock         (.devcarry/clock)
#   pairs     build-gpu of 33c3a3c with row-backward-cluster-pairs.patch applied (NJX_BWD_PAIRS)
#   barrier   build-gpu of 33c3a3c with row-backward-barrier-modes.patch applied (NJX_BWD_BARRIER)
# On the GPU machine (carry build-gpu .devcarry):
#   bash scripts/experiments/runs-2026-12-02.sh flags|pairs   the backward GPU tests over the
#        library with the knob (3 shards at once), then, if they pass, its A/B on the LLM and
#        ViT/BERT rows
#   bash scripts/experiments/runs-2026-12-02.sh barrier   the A/B of the barrier's three modes
#   bash scripts/experiments/runs-2026-12-02.sh clock   each CTA's timestamps, 4 specs
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-$here/runs-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
case "${1:-}" in
  flags)
    # The BackwardGpu tests of the row backward's kernels (the knob leaves the split kernels of
    # the LongRows* and StreamedRows tests alone), 3 shards of about 3 minutes
    # (scripts/gpu_test_times.txt), at once.
    s1='BackwardGpu.AdversarialValues:BackwardGpu.LayerNormSeed'
    s2='BackwardGpu.EveryHidden*:BackwardGpu.ParamDtypeAndWeightOffset:BackwardGpu.CApi*:BackwardGpu.Misaligned*'
    s3='BackwardGpu.InPlaceDxOverDy:BackwardGpu.DxOfARow*:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.WideTeam*:BackwardGpu.DeterministicBitsAcrossRunsAndStreams'
    mkdir -p /tmp/flags-logs
    for n in 1 2 3; do
      eval "filter=\$s$n"
      (NJX_BWD_FLAGS=1 LD_LIBRARY_PATH=.devcarry/flags NORMJIT_CACHE_DIR=/tmp/flags-cache \
        timeout 300 build-gpu/tests/gpu/gpu_tests --gtest_filter="$filter" \
        >"/tmp/flags-logs/shard-$n.log" 2>&1
        echo "flags shard $n: exit $?; $(grep -E '^\[  (PASSED|FAILED)  \]' \
          "/tmp/flags-logs/shard-$n.log" | tr '\n' ' ')") &
    done
    wait
    tar czf "$out/flags-tests.tgz" -C /tmp flags-logs
    grep -h -E '^\[  FAILED  \]' /tmp/flags-logs/*.log && exit 1
    for list in row-backward-final-sum row-backward-team-barriers; do
      timeout 200 python3 scripts/ab_bench.py --rounds 2 --out "/tmp/flags-ab-$list" \
        --specs "scripts/specs/$list.txt" --variant head=.devcarry/flags \
        --variant flags=.devcarry/flags:NJX_BWD_FLAGS=1 2>&1 | tee "$out/flags-ab-$list.txt"
    done
    ;;
  pairs)
    # NJX_BWD_PAIRS=1 in this checkout's build-gpu: the row backward's CTAs in clusters of two.
    s1='BackwardGpu.AdversarialValues:BackwardGpu.LayerNormSeed'
    s2='BackwardGpu.EveryHidden*:BackwardGpu.ParamDtypeAndWeightOffset:BackwardGpu.CApi*:BackwardGpu.Misaligned*'
    s3='BackwardGpu.InPlaceDxOverDy:BackwardGpu.DxOfARow*:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.WideTeam*:BackwardGpu.DeterministicBitsAcrossRunsAndStreams'
    mkdir -p /tmp/pairs-logs
    for n in 1 2 3; do
      eval "filter=\$s$n"
      (NJX_BWD_PAIRS=1 NORMJIT_CACHE_DIR=/tmp/pairs-cache \
        timeout 300 build-gpu/tests/gpu/gpu_tests --gtest_filter="$filter" \
        >"/tmp/pairs-logs/shard-$n.log" 2>&1
        echo "pairs shard $n: exit $?; $(grep -E '^\[  (PASSED|FAILED)  \]' \
          "/tmp/pairs-logs/shard-$n.log" | tr '\n' ' ')") &
    done
    wait
    tar czf "$out/pairs-tests.tgz" -C /tmp pairs-logs
    grep -h -E '^\[  FAILED  \]' /tmp/pairs-logs/*.log && exit 1
    for list in row-backward-final-sum row-backward-team-barriers; do
      timeout 200 python3 scripts/ab_bench.py --rounds 2 --out "/tmp/pairs-ab-$list" \
        --specs "scripts/specs/$list.txt" --variant head=build-gpu \
        --variant pairs=build-gpu:NJX_BWD_PAIRS=1 2>&1 | tee "$out/pairs-ab-$list.txt"
    done
    ;;
  barrier)
    # NJX_BWD_BARRIER=1|2|3 in this checkout's build-gpu: the row backward's grid barrier.
    for list in row-backward-final-sum row-backward-team-barriers; do
      timeout 280 python3 scripts/ab_bench.py --rounds 2 --out "/tmp/barrier-ab-$list" \
        --specs "scripts/specs/$list.txt" --variant head=build-gpu \
        --variant acqrel=build-gpu:NJX_BWD_BARRIER=1 --variant acqrel-sleep=build-gpu:NJX_BWD_BARRIER=2 \
        --variant spin=build-gpu:NJX_BWD_BARRIER=3 2>&1 | tee "$out/barrier-ab-$list.txt"
    done
    ;;
  clock)
    n=0
    while IFS= read -r spec; do
      case "$spec" in '' | '#'*) continue ;; esac
      n=$((n + 1))
      echo "## $spec" | tee -a "$out/clock.md"
      NJX_BWD_CLOCK=1 LD_LIBRARY_PATH=.devcarry/clock NORMJIT_CACHE_DIR=/tmp/runs-cache-clock \
        timeout 60 .devcarry/clock/tools/normjit bench --spec "$spec" --repeat 5 --warmup 1 \
        >"$out/clock-$n.txt" 2>&1
      python3 scripts/experiments/row-backward-clock.py "$out/clock-$n.txt" | tee -a "$out/clock.md"
    done < scripts/specs/row-backward-ncu.txt
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
