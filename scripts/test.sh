#!/usr/bin/env bash
# Set up, build and run the whole test suite (unit, GPU, FileCheck) through ctest.
# GPU tests skip with a message on a machine without a GPU.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh"
cd "$here/build"
ctest --output-on-failure -j "$(nproc)" "$@"
