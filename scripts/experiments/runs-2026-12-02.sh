#!/usr/bin/env bash
# The GPU runs prepared on 2026-12-02 (no device time was left to make them), for the next
# session's device calls; remove this file once they are made and written up. Four experiment
# patches of the row backward, each built here first:
#   scripts/experiments/build.sh row-backward-final-sum-spread spread   (NJX_BWD_SUM=0..4)
#   scripts/experiments/build.sh row-backward-clock clock               (NJX_BWD_CLOCK=1)
#   scripts/experiments/build.sh row-backward-team-barriers teambar     (NJX_TEAM_BAR=0..2,
#                                                                        NJX_BWD_F32_PF=1)
#   scripts/experiments/build.sh row-backward-ping-pong pingpong        (NJX_BWD_PINGPONG=1)
# and build-gpu (this checkout, with gpu_tests). On the GPU machine (carry build-gpu .devcarry):
#   bash scripts/experiments/runs-2026-12-02.sh ab NAME   the A/B table of one patch (spread,
#        teambar or pingpong, or all three in turn; scripts/ab_bench.py), first
#   bash scripts/experiments/runs-2026-12-02.sh tests NAME VAR=K ...   the backward GPU tests over
#        that patch's library with each knob setting, 4 shards each, all at once (one setting
#        ~4 minutes: run only the settings that win the A/B)
#   bash scripts/experiments/runs-2026-12-02.sh clock   each CTA's timestamps, 4 specs
#   bash scripts/experiments/runs-2026-12-02.sh ncu-rows   normjit's and compile's kernels of the
#        RMSNorm rows of 8192 under Nsight Compute (scripts/ncu_rows_vs_compile.sh), ~2 minutes
#   bash scripts/experiments/runs-2026-12-02.sh backward   the backward table's three groups (seeds,
#        LLM rows, and the ViT/BERT rows that c2e1fd8's rule moved), ~7 minutes; merge here with
#        python3 tools/bench_backward.py --from-json OUT/bwd-seeds/perf_backward.json,...
#        --doc docs/performance.md
#   bash scripts/experiments/runs-2026-12-02.sh variants   the variants table with its new column
#        (compile in place, 20f0564; carry .whl for Liger too), ~5 minutes
# Logs and tables go to $OUT (default ./runs-out), the logs packed into tests-NAME.tgz and
# ab-NAME.tgz.
# A suggested order for 30 device minutes: `ab all` (~8 min), `tests NAME VAR=K` of what won
# (~5), `clock` and `ncu-rows` in one call (~3), then `backward` and `variants` (~12) at the
# revision that lands.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
out=${OUT:-$here/runs-out}
mkdir -p "$out" /tmp/runs-logs
export PYTHONUNBUFFERED=1
gtests=build-gpu/tests/gpu/gpu_tests

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
    # BackwardGpu in 4 shards of about 3.5 minutes by scripts/gpu_test_times.txt, for each knob
    # setting; the streamed and split rows run other kernels, untouched by the patches.
    s1='BackwardGpu.AdversarialValues:BackwardGpu.ParamDtypeAndWeightOffset:BackwardGpu.CApi*:BackwardGpu.Misaligned*:BackwardGpu.LayerNormSeed'
    s2='BackwardGpu.EveryHidden*:BackwardGpu.InPlaceDxOverDy:BackwardGpu.DxOfARow*:BackwardGpu.CudaGraphOnAFresh*'
    s3='BackwardGpu.LongRowsEvery*:BackwardGpu.LongRowsDxDoes*:BackwardGpu.WideTeam*:BackwardGpu.LongRowsParamDtype*:BackwardGpu.LongRowsCudaGraph*'
    s4='BackwardGpu.LongRowsAdversarialValues:BackwardGpu.DeterministicBitsAcrossRunsAndStreams:BackwardGpu.LongRowsDeterministicBits'
    name=${2:?tests NAME VAR=K ...}
    shift 2
    for knob in "$@"; do
      for s in 1 2 3 4; do
        eval "filter=\$s$s"
        run "$name-${knob//[^A-Za-z0-9]/_}-$s" ".devcarry/$name" "$knob" "$filter" &
      done
    done
    wait
    tar czf "$out/tests-$name.tgz" -C /tmp runs-logs
    ;;
  ab)
    if [ "${2:-}" = all ]; then
      for name in pingpong spread teambar; do bash "$0" ab "$name"; done
      exit 0
    fi
    case "${2:-}" in
      spread) list=scripts/specs/row-backward-final-sum.txt
        variants=(spread=NJX_BWD_SUM=1 q4=NJX_BWD_SUM=2 vec=NJX_BWD_SUM=3 nosum=NJX_BWD_SUM=4) ;;
      teambar) list=scripts/specs/row-backward-team-barriers.txt
        variants=(named=NJX_TEAM_BAR=1 paired=NJX_TEAM_BAR=2 f32pf=NJX_BWD_F32_PF=1) ;;
      pingpong) list=scripts/specs/row-backward-final-sum.txt
        variants=(pp=NJX_BWD_PINGPONG=1) ;;
      *) echo "ab: NAME is spread, teambar, pingpong or all" >&2; exit 2 ;;
    esac
    name=$2
    args=(--variant "head=.devcarry/$name")
    for v in "${variants[@]}"; do args+=(--variant "${v%%=*}=.devcarry/$name:${v#*=}"); done
    timeout "${LIMIT:-300}" python3 scripts/ab_bench.py --rounds 2 --out "/tmp/runs-ab/$name" \
      --specs "$list" "${args[@]}" 2>&1 | tee "$out/ab-$name.txt"
    tar czf "$out/ab-$name.tgz" -C /tmp "runs-ab/$name"
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
  backward)
    rev=${NORMJIT_REVISION:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
    for g in seeds:125 llm:215 transformer:90; do
      NORMJIT_REVISION=$rev BUILD=build-gpu OUT="$out/bwd-${g%%:*}" timeout $((${g##*:} + 60)) \
        bash scripts/perf_backward.sh --only "${g%%:*}" --budget-s "${g##*:}" \
        >"$out/bwd-${g%%:*}.log" 2>&1
      echo "backward ${g%%:*}: exit $?"
      rm -f "$out/bwd-${g%%:*}/performance.md"
    done
    ;;
  variants)
    NORMJIT_REVISION=${NORMJIT_REVISION:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} BUILD=build-gpu \
      OUT="$out/variants" timeout 400 bash scripts/perf_variants.sh --budget-s 330
    rm -f "$out/variants/performance.md"
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
