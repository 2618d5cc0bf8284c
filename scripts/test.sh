#!/usr/bin/env bash
# Set up, build and run the whole test suite: unit, GPU and FileCheck tests through ctest, then
# the Python package, installed into .venv from this checkout (pip install ., scikit-build-core
# building libnormjit.so into it), PyTorch (CPU use) into .venv, and the pytest suite
# (tests/python), after flake8 over the Python code. GPU tests skip with a message. Arguments go
# to ctest.
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
# PyTorch, for the normjit.torch tests on CPU tensors (PyTorch's fallback, and the library
# emulated behind its launch functions): its PyPI wheel, pinned (the CUDA build: about 5 GB with
# its libraries, a minute to install; the GPU tests still skip without a GPU).
# NORMJIT_TEST_TORCH=0 leaves it out: those tests then skip with the reason printed.
if [ "${NORMJIT_TEST_TORCH:-1}" != 0 ] && ! "$here/.venv/bin/python" -c "import torch" 2>/dev/null
then
  echo "test: pip install torch==2.15.0 numpy into .venv (NORMJIT_TEST_TORCH=0 leaves them out)"
  "$here/.venv/bin/pip" install -q --disable-pip-version-check "torch==2.15.0" numpy ||
    echo "test: warning: PyTorch could not be installed: its tests skip" >&2
fi
echo "test: flake8 (the Python code's lint, .flake8)"
"$here/.venv/bin/flake8" --count
"$here/.venv/bin/python" -m pytest -rs -p no:cacheprovider tests/python
