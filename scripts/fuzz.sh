#!/usr/bin/env bash
# Fuzzes the inputs normjit reads from others (tests/fuzz): spec text (the CLI, manifests, cache
# metadata) and cache entry files, with libFuzzer under ASan and UBSan, each target for SECONDS
# (default 60), starting from its committed corpus (tests/fuzz/corpus/<target>/, copied: the
# committed one is left as it is unless --merge is given).
#   scripts/fuzz.sh [--merge] [SECONDS] [TARGET...]     targets: spec_text cache_entry
# --merge: afterwards, add to the committed corpus the inputs that reach new coverage
# (libFuzzer's -merge=1), so that every build's corpus replay (ctest fuzz_*_corpus) covers them.
# A failing property or a sanitizer report stops the target; its input is left in the work
# folder (printed) and the script exits non-zero. Needs clang with libFuzzer (Debian's clang);
# builds into build-fuzz.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
merge=0
if [ "${1:-}" = "--merge" ]; then
  merge=1
  shift
fi
seconds=${1:-60}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "fuzz: error: SECONDS must be a positive whole number, not '$seconds'" >&2
  exit 2
fi
shift || true
targets=("$@")
((${#targets[@]})) || targets=(spec_text cache_entry)
for t in "${targets[@]}"; do
  if [ ! -f "$here/tests/fuzz/$t.cpp" ]; then
    echo "fuzz: error: no fuzz target '$t' (tests/fuzz/$t.cpp); targets: spec_text cache_entry" >&2
    exit 2
  fi
done
if ! command -v clang++ >/dev/null; then
  echo "fuzz: error: clang++ not found (Debian: apt-get install clang)" >&2
  exit 2
fi

build="$here/build-fuzz"
echo "fuzz: building ${targets[*]} with clang, libFuzzer, ASan and UBSan in $build"
CUDAToolkit_ROOT=/usr/local/cuda CC=clang CXX=clang++ cmake -S "$here" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNORMJIT_FUZZ=ON -DNORMJIT_SANITIZE=address,undefined \
  >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

work=$(mktemp -d "${TMPDIR:-/tmp}/normjit-fuzz.XXXXXX")
status=0
for t in "${targets[@]}"; do
  corpus="$here/tests/fuzz/corpus/$t"
  mkdir -p "$work/$t"
  cp "$corpus"/* "$work/$t/"
  dict=()
  [ -f "$here/tests/fuzz/$t.dict" ] && dict=(-dict="$here/tests/fuzz/$t.dict")
  echo "fuzz: $t for ${seconds} s from $(ls "$corpus" | wc -l) corpus inputs"
  if ! (cd "$work" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=4096 "${dict[@]}" \
        -artifact_prefix="$work/$t-" "$work/$t" >"$work/$t.log" 2>&1); then
    echo "fuzz: $t FAILED: the log is $work/$t.log, the input $(ls "$work/$t-"* 2>/dev/null | head -1)"
    tail -n 30 "$work/$t.log"
    status=1
    continue
  fi
  echo "fuzz: $t: $(grep -E '^Done [0-9]+ runs' "$work/$t.log" | head -1), no failure"
  if ((merge)); then
    before=$(ls "$corpus" | wc -l)
    (cd "$work" && "$build/tests/fuzz/fuzz_$t" -merge=1 "$corpus" "$work/$t" >/dev/null 2>&1)
    echo "fuzz: $t: corpus $before -> $(ls "$corpus" | wc -l) inputs"
  fi
done
((status)) || rm -rf "$work"
exit $status
