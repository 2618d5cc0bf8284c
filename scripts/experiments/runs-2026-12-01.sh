#!/usr/bin/env bash
# The GPU runs prepared on 2026-12-01 (no device time was left to make them), for the next
# session's device calls; remove this file once they are made and written up. Three experiment
# patches of the row backward, each built here first:
#   scripts/experiments/build.sh row-backward-final-sum-vec fsum     (NJX_BWD_FINAL=0..3)
#   scripts/experiments/build.sh row-backward-next-row-staged stage  (NJX_BWD_STAGE=0..2)
#   scripts/experiments/build.sh row-backward-next-row-wider wider   (NJX_BWD_RN_TEAMS, _WIDE)
# and build-gpu (this checkout, with gpu_tests). On the GPU machine (carry build-gpu .devcarry):
#   bash scripts/experiments/runs-2026-12-01.sh tests   the backward GPU tests over each patch's
#        library with each knob that changes a kernel (gpu_tests of build-gpu), 13 at a time
#   bash scripts/experiments/runs-2026-12-01.sh ab      the A/B tables (scripts/ab_bench.py)
# Logs and tables go to $OUT (default ./runs-out), the logs packed into tests.tgz / ab.tgz.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-$here/runs-out}
mkdir -p "$out" /tmp/runs-logs
export PYTHONUNBUFFERED=1
gtests=build-gpu/tests/gpu/gpu_tests
rows='BackwardGpu.*:BackwardChannelsGpu.ChannelFormsOfOnePosition*'

# One gtest run over a patch's library with its knob: name lib VAR=VALUE filter.
run() {
  local name=$1 lib=$2 knob=$3 filter=$4
  env LD_LIBRARY_PATH="$lib" NORMJIT_CACHE_DIR="/tmp/runs-cache-$name" "$knob" \
    timeout "${LIMIT:-420}" "$gtests" --gtest_filter="$filter" >"/tmp/runs-logs/$name.log" 2>&1
  echo "$name ($knob): exit $?; $(grep -E '^\[  (PASSED|FAILED)  \]' "/tmp/runs-logs/$name.log" |
    tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "/tmp/runs-logs/$name.log" | head
}

case "${1:-}" in
  tests)
    # Shards of BackwardGpu (and the one-position channel rows) by the seconds of
    # scripts/gpu_test_times.txt: 13 processes on the GPU machine's 16 cores, each ~4 minutes.
    # The streamed and split rows (StreamedRowsInWaves, PrimeRowOfAMillionElements) run other
    # kernels, untouched by the three patches.
    s1='BackwardGpu.AdversarialValues:BackwardGpu.LongRowsDeterministicBits:BackwardGpu.ParamDtypeAndWeightOffset:BackwardGpu.CApi*:BackwardGpu.Misaligned*'
    s2='BackwardGpu.EveryHidden*:BackwardGpu.InPlaceDxOverDy:BackwardGpu.LongRowsCudaGraph*:BackwardGpu.LayerNormSeed'
    s3='BackwardGpu.LongRowsEvery*:BackwardGpu.LongRowsDxDoes*:BackwardGpu.WideTeam*:BackwardGpu.LongRowsParamDtype*'
    s4='BackwardGpu.LongRowsAdversarialValues:BackwardGpu.DeterministicBitsAcrossRunsAndStreams:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.DxOfARow*:BackwardChannelsGpu.ChannelFormsOfOnePosition*'
    wide='BackwardGpu.LongRows*:BackwardGpu.WideTeam*'
    run fsum1-1 .devcarry/fsum NJX_BWD_FINAL=1 "$s1" &
    run fsum1-2 .devcarry/fsum NJX_BWD_FINAL=1 "$s2" &
    run fsum1-3 .devcarry/fsum NJX_BWD_FINAL=1 "$s3" &
    run fsum1-4 .devcarry/fsum NJX_BWD_FINAL=1 "$s4" &
    run fsum2-2 .devcarry/fsum NJX_BWD_FINAL=2 "$s2" &
    run stage1-w .devcarry/stage NJX_BWD_STAGE=1 "$wide" &
    run stage2-1 .devcarry/stage NJX_BWD_STAGE=2 "$s1" &
    run stage2-2 .devcarry/stage NJX_BWD_STAGE=2 "$s2" &
    run stage2-4 .devcarry/stage NJX_BWD_STAGE=2 "$s4" &
    run teams1-1 .devcarry/wider NJX_BWD_RN_TEAMS=1 "$s1" &
    run teams1-2 .devcarry/wider NJX_BWD_RN_TEAMS=1 "$s2" &
    run teams2-2 .devcarry/wider NJX_BWD_RN_TEAMS=2 "$s2" &
    run teams2-4 .devcarry/wider NJX_BWD_RN_TEAMS=2 "$s4" &
    wait
    tar czf "$out/tests.tgz" -C /tmp runs-logs
    ;;
  ab)
    ab() {
      local name=$1
      shift
      timeout "${LIMIT:-200}" python3 scripts/ab_bench.py --rounds 2 --out "/tmp/runs-ab/$name" "$@" 2>&1 |
        tee "$out/ab-$name.txt"
    }
    ab fsum --specs scripts/specs/row-backward-final-sum.txt --variant head=.devcarry/fsum \
      --variant vec16=.devcarry/fsum:NJX_BWD_FINAL=1 --variant vec8=.devcarry/fsum:NJX_BWD_FINAL=2 \
      --variant nosum=.devcarry/fsum:NJX_BWD_FINAL=3
    ab stage --specs scripts/specs/row-backward-final-sum.txt --variant head=.devcarry/stage \
      --variant stage=.devcarry/stage:NJX_BWD_STAGE=1 --variant stage2=.devcarry/stage:NJX_BWD_STAGE=2
    ab wider --specs scripts/specs/row-backward-next-row-wider.txt --variant head=.devcarry/wider \
      --variant teams=.devcarry/wider:NJX_BWD_RN_TEAMS=1 --variant teams2=.devcarry/wider:NJX_BWD_RN_TEAMS=2 \
      --variant wide=.devcarry/wider:NJX_BWD_RN_WIDE=1
    tar czf "$out/ab.tgz" -C /tmp runs-ab
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
