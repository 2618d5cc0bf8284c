#!/usr/bin/env bash
# The variants' performance run (issue 18), on the GPU machine: normjit's variants against PyTorch
# eager, torch.compile, Liger-Kernel and a copy of their bytes (tools/bench_variants.py), writing
# the variants section of docs/performance.md and perf_variants.json.
#   scripts/perf_variants.sh [bench_variants.py flags]    e.g. scripts/perf_variants.sh --quick
# BUILD: the build directory with libnormjit.so (default: build), relative to the repository
# root or absolute; the library is NORMJIT_LIBRARY when set, else BUILD/libnormjit.so, and a
# --lib among the flags overrides both.
# WHEELS (default .whl): where a Liger-Kernel wheel (liger_kernel-*.whl, pure Python) is
# unpacked from when PyTorch's Python cannot import liger_kernel already; without one, the Liger
# column says why it is absent.
# OUT (the GPU machine's folder that comes back), when set: perf_variants.log,
# perf_variants.json, variants.md (the section alone) and performance.md go there too.
# NORMJIT_REVISION, when set, is reported as the revision measured (see scripts/perf.sh).
# Exit status: bench_variants.py's (0 all checks pass, 1 a normjit check failed or errored,
# 2 could not start); the files are copied in every case.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# shellcheck source=scripts/perf_lib.sh
source scripts/perf_lib.sh
build=${BUILD:-build}
export PYTHONUNBUFFERED=1

liger_from_wheels perf_variants
peers_from_sources perf_variants "$build"

lib_args=()
if [ -n "${NORMJIT_LIBRARY:-}" ]; then lib_args=(--lib "$NORMJIT_LIBRARY"); fi
cmd=(python3 tools/bench_variants.py --build "$build" ${lib_args[@]+"${lib_args[@]}"} "$@")
run_bench perf_variants "docs/performance.md" "${cmd[@]}"
exit "$bench_status"
