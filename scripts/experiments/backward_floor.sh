#!/usr/bin/env bash
# Builds scripts/experiments/backward_floor.cu (sm_90) into .devcarry/floor/libbackward_floor.so
# for scripts/experiments/backward_floor.py on the GPU machine (carry .devcarry).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$here/.devcarry/floor"
"${CUDACXX:-/usr/local/cuda/bin/nvcc}" -O3 -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC \
  -diag-suppress 128 -Xptxas -v -o "$here/.devcarry/floor/libbackward_floor.so" \
  "$here/scripts/experiments/backward_floor.cu" 2>&1 | grep -E "registers|spill|error" || true
test -s "$here/.devcarry/floor/libbackward_floor.so"
echo "backward_floor.sh: built .devcarry/floor/libbackward_floor.so"
