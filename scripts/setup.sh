#!/usr/bin/env bash
# Installs what normjit needs on a fresh Debian 12 with the CUDA toolkit in /usr/local/cuda,
# then configures and builds. Idempotent: re-running only rebuilds.
#   scripts/setup.sh [build-dir]        (default: build)
# NORMJIT_BUILD_TYPE: CMake's build type (default RelWithDebInfo; scripts/device_prep.sh takes
# Release, whose folder is small enough to carry to the GPU machine).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}

packages=(cmake ninja-build g++ libgtest-dev libcli11-dev nlohmann-json3-dev libssl-dev
          llvm-14-tools python3-venv)
# The Python package's extension module (normjit._launch) needs Python.h of the interpreter
# that builds it, .venv's: a pyenv build carries its own, Debian's python3 has it in python3-dev.
venv_python=$here/.venv/bin/python
[ -x "$venv_python" ] || venv_python=python3
"$venv_python" -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  2>/dev/null || packages+=(python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "setup: error: the CUDA toolkit is expected under /usr/local/cuda" >&2
  exit 1
fi

# lit (PyPI) in a project-local virtual environment: Debian refuses system-wide pip installs.
if [ ! -x "$here/.venv/bin/lit" ]; then
  echo "setup: creating .venv with lit"
  python3 -m venv "$here/.venv"
  "$here/.venv/bin/pip" install -q --disable-pip-version-check lit==18.1.8
fi
# The Python package's build backend and test runner (PyPI), in the same .venv: test.sh installs
# the package with `pip install --no-build-isolation .` and runs pytest.
if ! "$here/.venv/bin/python" -c "import pytest, scikit_build_core" 2>/dev/null; then
  echo "setup: installing scikit-build-core and pytest into .venv"
  "$here/.venv/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10,<1" \
    "pytest>=7,<10"
fi
# flake8 (PyPI), the Python code's lint (.flake8): test.sh runs it before pytest.
if [ ! -x "$here/.venv/bin/flake8" ]; then
  echo "setup: installing flake8 into .venv"
  "$here/.venv/bin/pip" install -q --disable-pip-version-check "flake8>=7,<8"
fi

export CUDAToolkit_ROOT=/usr/local/cuda
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${NORMJIT_BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null
cmake --build "$build" -j "$(nproc)"
