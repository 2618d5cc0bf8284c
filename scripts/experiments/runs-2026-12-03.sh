#!/usr/bin/env bash
# The GPU runs prepared on 2026-12-02 for the next device time (performance-notes, "Prepared for
# the next device time"); remove this file once they are made and written up. Build first:
#   scripts/experiments/build.sh backward-barriers-release-acquire ra   (NJX_BARRIER_RA=1)
#   scripts/experiments/build.sh row-backward-cluster-pairs-wide pairswide   (NJX_BWD_PAIRS=1)
# and build-gpu (this checkout). On the GPU machine (carry build-gpu .devcarry):
#   bash scripts/experiments/runs-2026-12-03.sh ra   the channels, GroupNorm and split backward
#        GPU tests over the ra library with NJX_BARRIER_RA=1 (3 shards at once, ~4 minutes), then,
#        if they pass, its A/B on scripts/specs/backward-barriers.txt (~4 minutes)
#   bash scripts/experiments/runs-2026-12-03.sh pairswide   the row backward's GPU tests over
#        the pairswide library with NJX_BWD_PAIRS=1 (3 shards, ~3 minutes), then, if they pass,
#        its A/B on the LLM rows (~2 minutes)
#   bash scripts/experiments/runs-2026-12-03.sh ncu-rows   normjit's and compile's kernels of the
#        RMSNorm rows of 8192 under Nsight Compute (scripts/ncu_rows_vs_compile.sh), ~2 minutes
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-$here/runs-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
case "${1:-}" in
  ra)
    # About 190-210 s of test time a shard (scripts/gpu_test_times.txt).
    s1='BackwardGpu.StreamedRowsInWaves:BackwardGpu.LongRowsEveryDtypeAndAffineMatchFloat64'
    s2='BackwardGpu.LongRowsAdversarialValues:BackwardGpu.LongRowsParamDtype*:BackwardGpu.LongRowsDeterministicBits:BackwardGpu.LongRowsDx*:BackwardGpu.LongRowsCudaGraph*:BackwardChannelsGpu.DeterministicBits*:BackwardChannelsGpu.CudaGraph*:BackwardChannelsGpu.AdversarialValues:BackwardChannelsGpu.CApi*:BackwardChannelsGpu.Dram*:BackwardChannelsGpu.Smaller*:BackwardChannelsGpu.ParamDtype*'
    s3='BackwardChannelsGpu.StreamedGroupNorm*:BackwardChannelsGpu.SeedKernels:BackwardChannelsGpu.ChannelForms*:BackwardChannelsGpu.GroupNormShapes*:BackwardChannelsGpu.ChunkedGroupNorm*'
    mkdir -p /tmp/ra-logs
    for n in 1 2 3; do
      eval "filter=\$s$n"
      (NJX_BARRIER_RA=1 LD_LIBRARY_PATH=.devcarry/ra NORMJIT_CACHE_DIR=/tmp/ra-cache \
        timeout 330 build-gpu/tests/gpu/gpu_tests --gtest_filter="$filter" \
        >"/tmp/ra-logs/shard-$n.log" 2>&1
        echo "ra shard $n: exit $?; $(grep -E '^\[  (PASSED|FAILED)  \]' \
          "/tmp/ra-logs/shard-$n.log" | tr '\n' ' ')") &
    done
    wait
    tar czf "$out/ra-tests.tgz" -C /tmp ra-logs
    grep -h -E '^\[  FAILED  \]' /tmp/ra-logs/*.log && exit 1
    timeout 280 python3 scripts/ab_bench.py --rounds 2 --out /tmp/ra-ab \
      --specs scripts/specs/backward-barriers.txt --variant head=.devcarry/ra \
      --variant ra=.devcarry/ra:NJX_BARRIER_RA=1 2>&1 | tee "$out/ra-ab.txt"
    ;;
  pairswide)
    s1='BackwardGpu.AdversarialValues:BackwardGpu.LayerNormSeed'
    s2='BackwardGpu.EveryHidden*:BackwardGpu.ParamDtypeAndWeightOffset:BackwardGpu.CApi*:BackwardGpu.Misaligned*'
    s3='BackwardGpu.InPlaceDxOverDy:BackwardGpu.DxOfARow*:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.WideTeam*:BackwardGpu.DeterministicBitsAcrossRunsAndStreams'
    mkdir -p /tmp/pairswide-logs
    for n in 1 2 3; do
      eval "filter=\$s$n"
      (NJX_BWD_PAIRS=1 LD_LIBRARY_PATH=.devcarry/pairswide NORMJIT_CACHE_DIR=/tmp/pairswide-cache \
        timeout 300 build-gpu/tests/gpu/gpu_tests --gtest_filter="$filter" \
        >"/tmp/pairswide-logs/shard-$n.log" 2>&1
        echo "pairswide shard $n: exit $?; $(grep -E '^\[  (PASSED|FAILED)  \]' \
          "/tmp/pairswide-logs/shard-$n.log" | tr '\n' ' ')") &
    done
    wait
    tar czf "$out/pairswide-tests.tgz" -C /tmp pairswide-logs
    grep -h -E '^\[  FAILED  \]' /tmp/pairswide-logs/*.log && exit 1
    timeout 200 python3 scripts/ab_bench.py --rounds 2 --out /tmp/pairswide-ab \
      --specs scripts/specs/row-backward-final-sum.txt --variant head=.devcarry/pairswide \
      --variant pairs=.devcarry/pairswide:NJX_BWD_PAIRS=1 2>&1 | tee "$out/pairswide-ab.txt"
    ;;
  ncu-rows)
    OUT="$out/ncu-rows" timeout 300 bash scripts/ncu_rows_vs_compile.sh build-gpu | tee "$out/ncu-rows.txt"
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
