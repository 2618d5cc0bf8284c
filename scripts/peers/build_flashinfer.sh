#!/usr/bin/env bash
# Builds the FlashInfer peer of the performance tables: FlashInfer's hand-written CUDA RMSNorm
# kernels (include/flashinfer/norm.cuh of the flashinfer-python wheel on PyPI) behind the C
# entry points of scripts/peers/flashinfer_norm.cu, as one shared library that
# tools/kernel_peers.py loads with ctypes:
#   scripts/peers/build_flashinfer.sh [build-dir]     (default: build-gpu)
# writes BUILD/peers/libflashinfer_norm.so and BUILD/peers/flashinfer_norm.txt (what was built
# from, and how), so that the build folder the GPU machine's runs carry holds the peer too. The
# wheel (about 100 MB) is downloaded once into NORMJIT_PEER_CACHE (default
# ~/.cache/normjit-peers), its headers unpacked there, and the dozen that the entry points
# include (nvcc -M) are kept in BUILD/peers/flashinfer-VERSION/include, so the GPU machine, which
# has no network, can compile them again from the build folder it carries. nvcc from CUDA_HOME
# (default /usr/local/cuda) compiles for sm_90 (FLASHINFER_ARCH to change it), with the C++
# runtime linked statically (scripts/peers/lib.sh) so that the library loads on the GPU
# machine's image. FLASHINFER_VERSION picks the release (default below).
# Exit status: 0 built; 1 a step failed (the tables then say the peer is absent, and why).
set -euo pipefail
build=${1:-build-gpu}
version=${FLASHINFER_VERSION:-0.7.4}
arch=${FLASHINFER_ARCH:-sm_90}
cache=${NORMJIT_PEER_CACHE:-$HOME/.cache/normjit-peers}
# shellcheck source=scripts/peers/lib.sh
source "$(dirname "$0")/lib.sh"
out=$build/peers
mkdir -p "$out"
include=$out/flashinfer-$version/include
if [ ! -f "$include/flashinfer/norm.cuh" ]; then
  mkdir -p "$cache"
  wheel=$cache/flashinfer_python-$version-py3-none-any.whl
  if [ ! -f "$wheel" ]; then
    echo "build_flashinfer: downloading flashinfer-python==$version from PyPI (about 100 MB)"
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$cache" "flashinfer-python==$version"
  fi
  all=$cache/flashinfer-$version/include
  if [ ! -f "$all/flashinfer/norm.cuh" ]; then
    rm -rf "$cache/flashinfer-$version"
    mkdir -p "$cache/flashinfer-$version"
    python3 - "$wheel" "$cache/flashinfer-$version" <<'PY'
import sys, zipfile
from pathlib import Path
wheel, dest = sys.argv[1], Path(sys.argv[2])
prefix = "flashinfer/data/include/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = dest / "include" / name[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
PY
  fi
  # The headers the entry points include, kept in the build folder.
  keep_included "$all" "$include" -I "$all" scripts/peers/flashinfer_norm.cu
fi

flags=("${peer_flags[@]}")
echo "build_flashinfer: compiling scripts/peers/flashinfer_norm.cu against FlashInfer $version for $arch"
"$nvcc" "${flags[@]}" -I "$include" -o "$out/libflashinfer_norm.so.tmp" \
  scripts/peers/flashinfer_norm.cu
mv "$out/libflashinfer_norm.so.tmp" "$out/libflashinfer_norm.so"
nvcc_version=$(nvcc_release)
cat >"$out/flashinfer_norm.txt" <<TXT
flashinfer-python $version (PyPI), include/flashinfer/norm.cuh; scripts/peers/flashinfer_norm.cu at $(git rev-parse --short HEAD 2>/dev/null || echo '?'); nvcc $nvcc_version ${flags[*]}
TXT
echo "build_flashinfer: $out/libflashinfer_norm.so ($(du -h "$out/libflashinfer_norm.so" | cut -f1))"
