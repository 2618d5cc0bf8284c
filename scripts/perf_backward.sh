#!/usr/bin/env bash
# The backward's performance run (issue 20), on the GPU machine: normjit's backward kernels
# against PyTorch eager autograd, torch.compile's generated backward, Liger-Kernel and a copy of
# the bytes a backward moves (tools/bench_backward.py), writing the backward section of
# docs/performance.md and perf_backward.json.
#   scripts/perf_backward.sh [bench_backward.py flags]    e.g. scripts/perf_backward.sh --quick
# BUILD: the build directory with libnormjit.so (default: build), relative to the repository
# root or absolute; the library is NORMJIT_LIBRARY when set, else BUILD/libnormjit.so, and a
# --lib among the flags overrides both.
# WHEELS (default .whl): where a Liger-Kernel wheel (liger_kernel-*.whl, pure Python) is
# unpacked from when PyTorch's Python cannot import liger_kernel already; without one, the Liger
# column says why it is absent.
# OUT (the GPU machine's folder that comes back), when set: perf_backward.log,
# perf_backward.json, backward.md (the section alone) and performance.md go there too.
# NORMJIT_REVISION, when set, is reported as the revision measured (see scripts/perf.sh).
# A run stops measuring after --budget-s (540 s); run the rest with --only and merge the JSON
# files with --from-json A.json,B.json. The table's JSON lives in docs/perf_backward.json (once a
# run has written it), so that a partial run on a later machine merges into it:
#   python3 tools/bench_backward.py --from-json docs/perf_backward.json,NEW.json \
#     --doc docs/performance.md --json-out docs/perf_backward.json
# Exit status: bench_backward.py's (0 all checks pass, 1 a normjit check failed or errored,
# 2 could not start); the files are copied in every case.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# shellcheck source=scripts/perf_lib.sh
source scripts/perf_lib.sh
build=${BUILD:-build}
export PYTHONUNBUFFERED=1

liger_from_wheels perf_backward

lib_args=()
if [ -n "${NORMJIT_LIBRARY:-}" ]; then lib_args=(--lib "$NORMJIT_LIBRARY"); fi
cmd=(python3 tools/bench_backward.py --build "$build" ${lib_args[@]+"${lib_args[@]}"} "$@")
run_bench perf_backward "docs/performance.md" "${cmd[@]}"
exit "$bench_status"
