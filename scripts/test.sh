#!/usr/bin/env bash
# Set up, build and run the whole test suite: unit, GPU and FileCheck tests through ctest, then
# the Python package, installed into .venv from this checkout (pip install ., scikit-build-core
# building libnormjit.so into it), and its pytest suite (tests/python). GPU tests, and the
# PyTorch tests where PyTorch is not installed, skip with a message. Arguments go to ctest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh"
cd "$here/build"
ctest --output-on-failure -j "$(nproc)" "$@"

cd "$here"
echo "test: pip install . (the normjit Python package) into .venv"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$here/.venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --force-reinstall "$here"
"$here/.venv/bin/python" -m pytest -rs -p no:cacheprovider tests/python
