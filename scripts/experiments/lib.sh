# shellcheck shell=bash
# Shared by the runs-*.sh scripts of scripts/experiments (sourced, not run): the repository root
# as the working directory, $out (OUT, default ./runs-out), and test_shards.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here" || exit 2
out=${OUT:-$here/runs-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

# The BackwardGpu tests of the row backward's kernels in 3 shards of about 3 minutes
# (scripts/gpu_test_times.txt); the split kernels of the LongRows* and StreamedRows tests are
# not among them.
# shellcheck disable=SC2034  # used by the scripts that source this file
ROW_BACKWARD_FILTERS=(
  'BackwardGpu.AdversarialValues:BackwardGpu.LayerNormSeed'
  'BackwardGpu.EveryHidden*:BackwardGpu.ParamDtypeAndWeightOffset:BackwardGpu.CApi*:BackwardGpu.Misaligned*'
  'BackwardGpu.InPlaceDxOverDy:BackwardGpu.DxOfARow*:BackwardGpu.CudaGraphOnAFresh*:BackwardGpu.WideTeam*:BackwardGpu.DeterministicBitsAcrossRunsAndStreams'
)

# The channels, GroupNorm and split backward's GPU tests in 3 shards of about 190-210 s
# (scripts/gpu_test_times.txt).
# shellcheck disable=SC2034  # used by the scripts that source this file
SPLIT_CHANNELS_FILTERS=(
  'BackwardGpu.StreamedRowsInWaves*:BackwardGpu.LongRowsEveryDtypeAndAffineMatchFloat64'
  'BackwardGpu.LongRowsAdversarialValues:BackwardGpu.LongRowsParamDtype*:BackwardGpu.LongRowsDeterministicBits:BackwardGpu.LongRowsDx*:BackwardGpu.LongRowsCudaGraph*:BackwardChannelsGpu.DeterministicBits*:BackwardChannelsGpu.CudaGraph*:BackwardChannelsGpu.AdversarialValues:BackwardChannelsGpu.CApi*:BackwardChannelsGpu.Dram*:BackwardChannelsGpu.Smaller*:BackwardChannelsGpu.ParamDtype*'
  'BackwardChannelsGpu.StreamedGroupNorm*:BackwardChannelsGpu.SeedKernels:BackwardChannelsGpu.ChannelForms*:BackwardChannelsGpu.GroupNormShapes*:BackwardChannelsGpu.ChunkedGroupNorm*'
)

# The split backward's streamed rows' GPU tests (the LayerNorm seed among them) in 3 shards of
# about 2 minutes.
# shellcheck disable=SC2034  # used by the scripts that source this file
SPLIT_STREAMED_FILTERS=(
  'BackwardGpu.StreamedRowsInWaves*'
  'BackwardGpu.LongRowsAdversarialValues:BackwardGpu.LongRowsCudaGraph*:BackwardGpu.LayerNormSeed'
  'BackwardGpu.LongRowsEveryDtypeAndAffineMatchFloat64:BackwardGpu.LongRowsDeterministicBits'
)

# The forward row kernels' GPU tests in 3 shards of about 40-75 s (scripts/gpu_test_times.txt).
# shellcheck disable=SC2034  # used by the scripts that source this file
ROW_FORWARD_FILTERS=(
  'Ops.FixedShapes*'
  'Ops.RandomizedSweep:Ops.AdversarialValues:Ops.InPlace:Variants.OddAndTinyRows:Variants.Strided*:Variants.BatchInvariance*:Variants.OutDtype*:Variants.SaveStats*'
  'Variants.TransformerRows*:Variants.ResidualLayerNorm*:Variants.LlmRows*:Variants.ActivationLongAndOddRows*:Variants.ActivationEvery*:Variants.ParamDtype*:Variants.WeightOffset*:Variants.AllAxes*:Variants.CudaGraph*:Variants.AdversarialValuesThroughTheVariants'
)

# test_shards NAME LIB "KNOB=VALUE ..." SECONDS FILTER...: build-gpu's gpu_tests (or the binary
# GPU_TESTS names: one built from a patched tree) over the library in folder LIB (e.g.
# .devcarry/ra, or build-gpu) with the knobs (space-separated), one shard a filter, all at once;
# logs tarred to $out/NAME-tests.tgz. Fails when a test failed.
test_shards() {
  local name=$1 lib=$2 seconds=$4 logs=/tmp/$1-logs n=0 knobs
  read -r -a knobs <<<"$3"
  shift 4
  mkdir -p "$logs"
  for filter in "$@"; do
    n=$((n + 1))
    (env "${knobs[@]}" LD_LIBRARY_PATH="$lib" NORMJIT_CACHE_DIR="/tmp/$name-cache" \
      timeout "$seconds" "${GPU_TESTS:-build-gpu/tests/gpu/gpu_tests}" --gtest_filter="$filter" \
      >"$logs/shard-$n.log" 2>&1
      echo "$name shard $n: exit $?; $(grep -E '^\[  (PASSED|FAILED)  \]' \
        "$logs/shard-$n.log" | tr '\n' ' ')") &
  done
  wait
  tar czf "$out/$name-tests.tgz" -C /tmp "$name-logs"
  ! grep -h -E '^\[  FAILED  \]' "$logs"/*.log
}

# ab_variants NAME SECONDS ROUNDS SPECS LIB [VAR=KNOBS ...]: scripts/ab_bench.py on the spec list
# SPECS with the library in folder LIB as `head` (its knobs off) beside each VAR, the same library
# with KNOBS (comma-separated VAR=VALUE), ROUNDS rounds, stopped after SECONDS; the table to
# $out/NAME-ab.txt.
ab_variants() {
  local name=$1 seconds=$2 rounds=$3 specs=$4 lib=$5 v
  shift 5
  local variants=(--variant "head=$lib")
  for v in "$@"; do variants+=(--variant "${v%%=*}=$lib:${v#*=}"); done
  timeout "$seconds" python3 scripts/ab_bench.py --rounds "$rounds" --out "/tmp/$name-ab" \
    --specs "$specs" "${variants[@]}" 2>&1 | tee "$out/$name-ab.txt"
}

# harness_settings NAME LIB SETTING...: the variants table's harness (tools/bench_variants.py,
# without torch.compile: its time is the table's) over the library in folder LIB once per SETTING
# (LABEL, or LABEL:VAR=VALUE,...: those knobs in the environment), in turn, ROUNDS times (default
# 2), over the variants ONLY (default 1) at TOKENS (default 1024,4096,16384) of HIDDENS (default
# 2048,4096,8192), each run stopped after BUDGET seconds (default 100); its log, section and JSON
# as NAME/r<round>-<LABEL>.* in $out/NAME.tgz. SETTINGS, when set, replaces the SETTINGs given
# (the same forms, separated by spaces).
harness_settings() {
  local name=$1 lib=$2 dir=$out/$1 round setting label status knobs given
  shift 2
  if [[ -n "${SETTINGS:-}" ]]; then
    read -r -a given <<<"$SETTINGS"
    set -- "${given[@]}"
  fi
  mkdir -p "$dir"
  for round in $(seq "${ROUNDS:-2}"); do
    for setting in "$@"; do
      label=${setting%%:*}
      knobs=()
      if [[ "$setting" == *:* ]]; then IFS=, read -r -a knobs <<<"${setting#*:}"; fi
      cp docs/performance.md "/tmp/$name-$label.md"
      status=0
      env ${knobs[@]+"${knobs[@]}"} timeout $((${BUDGET:-100} + 20)) \
        python3 tools/bench_variants.py --lib "$lib/libnormjit.so" --only "${ONLY:-1}" \
        --skip-compile --tokens "${TOKENS:-1024,4096,16384}" \
        --hiddens "${HIDDENS:-2048,4096,8192}" --rounds 3 --budget-s "${BUDGET:-100}" \
        --doc "/tmp/$name-$label.md" --section-out "$dir/r$round-$label.md" \
        --json-out "$dir/r$round-$label.json" >"$dir/r$round-$label.log" 2>&1 || status=$?
      echo "round $round, $label (${knobs[*]:-no knobs}): exit $status"
    done
  done
  tar czf "$out/$name.tgz" -C "$out" "$name" && rm -rf "$dir"
}
