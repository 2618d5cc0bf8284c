#!/usr/bin/env bash
# The whole GPU suite in one call of the GPU machine: the C++ GPU tests (gpu_tests, GoogleTest)
# in SHARDS shards and the Python suite (tests/python, GPU tests included) in WORKERS
# pytest-xdist workers, all at once on the one GPU, each under a time limit.
#   scripts/gpu_suite.sh [build-dir]      (default: build-gpu)
# build-dir holds tests/gpu/gpu_tests and the library it links (built on the build machine and
# carried). The Python package comes from WHEELS (default .whl: its wheel, built with `pip wheel
# --no-deps -w .whl .`), unpacked into a folder put on PYTHONPATH with the other wheels of
# WHEELS (pure Python: diffusers, its importlib_metadata and zipp, for the patch() tests on
# diffusers' classes; pip download --no-deps --only-binary=:all: -d .whl NAME); PyTorch, pytest
# and pytest-xdist are the machine's. Limits: TG (gtest shards) and TP (pytest), seconds.
# Logs go to $OUT (default build-gpu-out; the Python tests also leave their reports there); with
# BUNDLE=1 they are packed into $OUT/logs.tgz at the end (the device tool brings back few files).
# The summary names, per gtest shard, its slowest tests and, if it timed out, the test it was in.
# Shards: of about equal time (scripts/shard_tests.py) from TIMES (default
# scripts/gpu_test_times.txt, the seconds of each test in an earlier run; TIMES=none: gtest's
# own sharding, the tests dealt out in turn); every run leaves $OUT/gpu_test_times.txt, its own
# seconds, to copy there.
# Partial runs: GTEST_FILTER (gtest's own variable) keeps the listing, and so every shard, to the
# tests it matches; PYTEST=off leaves the Python suite out, PYTEST_PATHS (default tests/python:
# paths or node ids, space-separated) keeps it to those. When a gtest shard fails or is cut by
# TG, $OUT/gtest-unfinished.txt holds the tests that did not pass (failed, cut, never reached) as
# one filter, printed too, so that a second call runs just them:
#   GTEST_FILTER=$(cat gtest-unfinished.txt) PYTEST=off SHARDS=3 scripts/gpu_suite.sh build-gpu
# Exit status: 0 all passed; 1 a part failed or timed out; 2 the build or the wheel is missing.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 2
build=${1:-$here/build-gpu}
out=${OUT:-$here/build-gpu-out}
shards=${SHARDS:-4}
# Half the machine's cores (8 on the H100 machine's 16) beside the gtest shards: at 579af0e
# pytest's 2408 tests in 4 workers beside eight shards were cut by TP=460 at 95%; alone in 12
# workers they took 181 s.
cores=$(nproc 2>/dev/null || echo 8)
workers=${WORKERS:-$((cores / 2 > 4 ? cores / 2 : 4))}
wheels=${WHEELS:-$here/.whl}
site=${NORMJIT_SITE:-/tmp/normjit-suite-site}
if [ ! -x "$build/tests/gpu/gpu_tests" ]; then
  echo "gpu_suite: no $build/tests/gpu/gpu_tests (a build folder, carried to this machine)" >&2
  exit 2
fi
build=$(cd "$build" && pwd)
wheel=$(ls "$wheels"/normjit-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  echo "gpu_suite: no normjit wheel in $wheels (build one with: pip wheel --no-deps -w .whl .)" >&2
  exit 2
fi
mkdir -p "$out"
nvidia-smi -L > "$out/device.txt" 2>&1

export NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/normjit-suite-cache}
export PYTHONUNBUFFERED=1
# The deployment tests run the normjit tool: this build's, not the path it was built at.
export NORMJIT_TOOL=${NORMJIT_TOOL:-$build/tools/normjit}
times=${TIMES:-$here/scripts/gpu_test_times.txt}
# The tests this run has (GTEST_FILTER, when set, applies to the listing as to the run).
LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$build/tests/gpu/gpu_tests" \
  --gtest_list_tests > "$out/gtest-list.txt" 2>&1
filters=()
if [ "$times" != none ] && [ -f "$times" ]; then
  if ! mapfile -t filters < <(python3 "$here/scripts/shard_tests.py" --times "$times" \
    --shards "$shards" --list "$out/gtest-list.txt") ||
    ((${#filters[@]} != shards)); then
    echo "gpu_suite: shard_tests.py failed; gtest's own sharding instead" >&2
    filters=()
  fi
fi
pids=()
for ((i = 0; i < shards; i++)); do
  if ((${#filters[@]})); then
    shard_args=(--gtest_filter="${filters[$i]}")
    shard_env=()
  else
    shard_args=()
    shard_env=("GTEST_TOTAL_SHARDS=$shards" "GTEST_SHARD_INDEX=$i")
  fi
  env LD_LIBRARY_PATH="$build"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "${shard_env[@]}" \
    timeout "${TG:-480}" "$build/tests/gpu/gpu_tests" "${shard_args[@]}" > "$out/gtest-$i.log" 2>&1 &
  pids+=($!)
done
echo "gpu_suite: ${shards} gtest shards, $( ((${#filters[@]})) && echo "of about equal time by $times" || echo "gtest's own (tests dealt out in turn)")"

rm -rf "$site" && mkdir -p "$site"
python3 -m zipfile -e "$wheel" "$site"
# Other wheels there (pure Python: diffusers with importlib_metadata and zipp, for the tests of
# patch() on diffusers' own classes, which skip without it; Liger-Kernel) go beside it.
for w in "$wheels"/*.whl; do
  [ "$w" = "$wheel" ] && continue
  python3 -m zipfile -e "$w" "$site"
  echo "gpu_suite: $(basename "$w") unpacked beside normjit"
done
# --durations: the slowest Python tests in the log, for balancing WORKERS and TP (at ff88978 on
# the H200 pytest took 309 s in 4 workers, the six gtest shards 260-285 s each; at 39ff65a on the
# H100 it was cut by TP=400 at 99% beside eight gtest shards of 257-301 s, and alone in 8
# workers took 304 s: hence TP 480 by default).
read -r -a pytest_paths <<< "${PYTEST_PATHS:-tests/python}"
if [ "${PYTEST:-on}" = off ]; then
  echo "pytest: left out (PYTEST=off)" > "$out/pytest.log"
  pytest_status=0
else
  PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} timeout "${TP:-480}" python3 -m pytest -q -rfEs \
    --durations=25 -p no:cacheprovider -n "$workers" "${pytest_paths[@]}" > "$out/pytest.log" 2>&1
  pytest_status=$?
fi

status=0
for ((i = 0; i < shards; i++)); do
  wait "${pids[$i]}"
  rc=$?
  echo "gpu_tests shard $i: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gtest-$i.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/gtest-$i.log" | head -20
  if ((rc == 124)); then
    echo "  timed out (TG=${TG:-480} s) in $(grep -E '^\[ RUN +\]' "$out/gtest-$i.log" | tail -1 |
      sed -E 's/^\[ RUN +\] //')"
  fi
  # The shard's slowest tests ("[       OK ] Suite.Test (N ms)"), for balancing the limits.
  echo "  slowest: $(sed -nE 's/^\[ +(OK|FAILED) +\] ([^ ]+) \(([0-9]+) ms\)$/\3 \2/p' \
    "$out/gtest-$i.log" | sort -rn | head -3 | awk '{printf "%s %.0f s; ", $2, $1 / 1000}')"
  ((rc == 0)) || status=1
done
python3 "$here/scripts/shard_tests.py" --record "$out"/gtest-*.log > "$out/gpu_test_times.txt"
if ((status != 0)); then
  python3 "$here/scripts/shard_tests.py" --unfinished "$out/gtest-list.txt" "$out"/gtest-*.log \
    > "$out/gtest-unfinished.txt"
  if [ -s "$out/gtest-unfinished.txt" ]; then
    echo "gpu_tests: $(tr ':' '\n' < "$out/gtest-unfinished.txt" | grep -c .) tests did not pass;" \
      "to run just them: GTEST_FILTER='$(cat "$out/gtest-unfinished.txt")' PYTEST=off"
  else
    echo "gpu_tests: every listed test passed, yet a shard failed (see gtest-list.txt and the logs)"
  fi
fi
echo "pytest: exit $pytest_status; $(tail -1 "$out/pytest.log")"
if ((pytest_status == 124)); then
  # Cut by the time limit: how far its progress got and what the results reported so far were
  # (. passed, s skipped, F failed, E error, x/X xfail/xpass), so that a run cut in its summary
  # is told apart from one cut halfway. It still counts as a failure.
  echo "  timed out (TP=${TP:-480} s) at $(grep -oE '\[ *[0-9]+%\]$' "$out/pytest.log" | tail -1 |
    tr -d '[] ') of its progress; results so far: $(grep -E '^[.sFExX]+ +\[ *[0-9]+%\]$' \
    "$out/pytest.log" | sed -E 's/ +\[.*//' | fold -w1 | sort | uniq -c |
    awk '{printf "%s %s, ", $1, $2}' | sed 's/, $//')"
fi
if grep -q '^SKIPPED' "$out/pytest.log"; then
  # Why tests skipped (-rs): counts per reason, the most frequent first.
  echo "pytest skips by reason:"
  grep '^SKIPPED' "$out/pytest.log" | sed -E 's/^SKIPPED \[([0-9]+)\] [^ ]+:[0-9]+: /\1 /' |
    awk '{n = $1; $1 = ""; count[substr($0, 2)] += n} END {for (r in count) print count[r], r}' |
    sort -rn | head -10
fi
if ((pytest_status != 0)); then
  grep -E '^(FAILED|ERROR)' "$out/pytest.log" | head -20
  # The first failure's report, for a caller that only sees the end of the output.
  awk '/^_{5,} .* _{5,}$/ {n++} n == 1' "$out/pytest.log" | tail -40
fi
((pytest_status == 0)) || status=1
if [ "${BUNDLE:-0}" = 1 ]; then
  (cd "$out" && find . -mindepth 1 -maxdepth 1 ! -name logs.tgz ! -name device.txt -printf '%P\n' |
    tar czf logs.tgz --remove-files -T -)
  echo "gpu_suite: exit $status; logs in $out/logs.tgz"
else
  echo "gpu_suite: exit $status; logs in $out"
fi
exit "$status"
