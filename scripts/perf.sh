#!/usr/bin/env bash
# The performance run, on the GPU machine: normjit against PyTorch eager, torch.compile,
# Liger-Kernel and a copy of each problem's bytes (tools/compare_torch.py), writing
# docs/performance.md, docs/performance.png and perf.json.
#   scripts/perf.sh [compare_torch.py flags]     e.g. scripts/perf.sh --only seeds --quick
# BUILD: the build directory with libnormjit.so and tools/normjit (default: build), relative
# to the repository root or absolute; compare_torch.py takes the library from it (--lib
# BUILD/libnormjit.so), and a --build or --lib among the flags overrides it.
# WHEELS (default .whl): where a Liger-Kernel wheel (liger_kernel-*.whl, pure Python) is
# unpacked from when PyTorch's Python cannot import liger_kernel already (as
# scripts/perf_variants.sh does); without one, the Liger column says it is absent and why.
# OUT (the GPU machine's folder that comes back), when set: perf.log, perf.json,
# performance.md and performance.png go there too.
# NORMJIT_REVISION, when set, is reported as the revision measured instead of the checkout's
# git HEAD (for a copy of the tree whose .git is stale, e.g. the GPU machine's).
# Exit status: compare_torch.py's (0 all fine, 1 a normjit check failed or errored,
# 2 could not start); the files are copied in every case.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# shellcheck source=scripts/perf_lib.sh
source scripts/perf_lib.sh
build=${BUILD:-build}
export PYTHONUNBUFFERED=1

liger_from_wheels perf
peers_from_sources perf "$build"

cmd=(python3 tools/compare_torch.py --build "$build" "$@")
run_bench perf "docs/performance.md docs/performance.png" "${cmd[@]}"
exit "$bench_status"
