#!/usr/bin/env bash
# The vision and diffusion performance run (issue 19), on the GPU machine: normjit's
# GroupNorm -> SiLU, LayerNorm2d and channels_last inputs against the PyTorch module chains run
# eagerly and under torch.compile and a copy of their bytes (tools/bench_vision.py), writing
# the vision section of docs/performance.md and perf_vision.json.
#   scripts/perf_vision.sh [bench_vision.py flags]     e.g. scripts/perf_vision.sh --quick
# normjit is called through this checkout's Python package (python/normjit) with the library
# NORMJIT_LIBRARY when set, else BUILD/libnormjit.so (BUILD default: build); a --lib among
# the flags overrides both.
# OUT (the GPU machine's folder that comes back), when set: perf_vision.log, perf_vision.json,
# vision.md (the section alone) and performance.md go there too.
# NORMJIT_REVISION, when set, is reported as the revision measured (see scripts/perf.sh).
# A run stops measuring after --budget-s (540 s); run the rest with --only and merge the JSON
# files with --from-json A.json,B.json. The table's JSON lives in docs/perf_vision.json (since
# session 66's run), so that a partial run on a later machine merges into it:
#   python3 tools/bench_vision.py --from-json docs/perf_vision.json,NEW.json \
#     --doc docs/performance.md --json-out docs/perf_vision.json
# Exit status: bench_vision.py's (0 all checks pass, 1 a normjit check failed or errored,
# 2 could not start); the files are copied in every case.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# shellcheck source=scripts/perf_lib.sh
source scripts/perf_lib.sh
build=${BUILD:-build}
export PYTHONUNBUFFERED=1
export NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/normjit-cache}

lib_args=()
if [ -n "${NORMJIT_LIBRARY:-}" ]; then lib_args=(--lib "$NORMJIT_LIBRARY"); fi
cmd=(python3 tools/bench_vision.py --build "$build" ${lib_args[@]+"${lib_args[@]}"} "$@")
run_bench perf_vision "docs/performance.md" "${cmd[@]}"
exit "$bench_status"
