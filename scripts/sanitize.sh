#!/usr/bin/env bash
# The CPU test suite under sanitizers (no GPU needed; the GPU tests skip), each in its own
# build directory:
#   scripts/sanitize.sh [address,undefined] [thread]     (default: both)
# address,undefined (build-asan): every unit and tool test through ctest, the FileCheck tests
#   left to the plain build. Leaks inside NVRTC's own allocations are suppressed
#   (scripts/lsan.supp); ours are not.
# thread (build-tsan): the cache's and the runtime's unit tests, where threads and processes
#   share the store and the engine's single-flight table, and the runtime's tests on the fake
#   driver (tests/fakecuda), where threads prepare and launch at once; races inside NVRTC, which
#   TSan cannot see the locking of, are suppressed (scripts/tsan.supp).
# Any report fails the run. Run scripts/setup.sh first on a fresh machine (packages, .venv).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sanitizers=("$@")
((${#sanitizers[@]})) || sanitizers=(address,undefined thread)

configure_and_build() {  # build-dir sanitizer targets...
  local build=$1 sanitizer=$2
  shift 2
  CUDAToolkit_ROOT=/usr/local/cuda cmake -S "$here" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNORMJIT_SANITIZE="$sanitizer" >/dev/null
  cmake --build "$build" -j "$(nproc)" "$@"
}

for s in "${sanitizers[@]}"; do
  case "$s" in
    address,undefined)
      build="$here/build-asan"
      echo "sanitize: $s in $build"
      configure_and_build "$build" "$s"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      LSAN_OPTIONS=suppressions="$here/scripts/lsan.supp":print_suppressions=0 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -E '^filecheck$'
      ;;
    thread)
      build="$here/build-tsan"
      echo "sanitize: $s in $build"
      configure_and_build "$build" "$s" --target unit_cache_tests unit_runtime_tests \
        fake_driver_tests
      tsan_options="halt_on_error=1:second_deadlock_stack=1:suppressions=$here/scripts/tsan.supp"
      for t in tests/unit/cache/unit_cache_tests tests/unit/runtime/unit_runtime_tests \
        tests/fakecuda/fake_driver_tests; do
        echo "sanitize: $t"
        (cd "$build" && TSAN_OPTIONS="$tsan_options" "./$t" --gtest_brief=1)
      done
      ;;
    *)
      echo "sanitize: error: unknown sanitizer set '$s' (address,undefined or thread)" >&2
      exit 2
      ;;
  esac
done
echo "sanitize: no reports"
