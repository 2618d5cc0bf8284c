#!/usr/bin/env bash
# The GPU runs prepared on 2026-12-02 that are still to make (the others, `ab`, `backward` and
# `variants`, were made on 2026-12-02 and written up in performance-notes, "The row backward's
# final sum over every CTA, and a barrier for each team"; `tests` gave way to the GPU suite at the
# revision that landed); remove this file once these are made and written up. Build first:
#   scripts/experiments/build.sh row-backward-clock clock      (NJX_BWD_CLOCK=1; rebased onto e6a1e44)
#   scripts/experiments/build.sh row-backward-flagged-sum flags   (NJX_BWD_FLAGS=1)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu .devcarry):
#   bash scripts/experiments/runs-2026-12-02.sh flags   the backward GPU tests over the flags
#        library with NJX_BWD_FLAGS=1 (3 shards at once, ~3 minutes), then, if they pass, its A/B
#        on the LLM and ViT/BERT rows (~3 minutes)
#   bash scripts/experiments/runs-2026-12-02.sh clock   each CTA's timestamps, 4 specs: is the wait
#        at the grid barrier the CTAs' start, their rows, or the barrier? (~1 minute)
#   bash scripts/experiments/runs-2026-12-02.sh ncu-rows   normjit's and compile's kernels of the
#        RMSNorm rows of 8192 under Nsight Compute (scripts/ncu_rows_vs_compile.sh), ~2 minutes
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
  ncu-rows)
    OUT="$out/ncu-rows" timeout 300 bash scripts/ncu_rows_vs_compile.sh build-gpu | tee "$out/ncu-rows.txt"
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
