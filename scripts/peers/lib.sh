# shellcheck shell=bash
# What scripts/peers/build_flashinfer.sh and build_vllm.sh share (sourced by them, after they set
# `arch`): nvcc, the flags of a peer library, and keeping the headers a build includes.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$here" || exit 1
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ ! -x "$nvcc" ]; then
  echo "$(basename "$0" .sh): error: no nvcc at $nvcc (set CUDA_HOME)" >&2
  exit 1
fi
# A shared library for the GPU machine: sm_90 machine code, the C++ runtime linked statically so
# that it loads on that machine's image (glibc and the driver only).
# shellcheck disable=SC2034  # used by the scripts that source this file
peer_flags=(-std=c++17 -O3 "-arch=$arch" -shared -Xcompiler -fPIC -Xcompiler -static-libstdc++
            -Xcompiler -static-libgcc)

# keep_included FROM TO NVCC_ARGS...: every file under FROM that `nvcc -M NVCC_ARGS` lists is
# copied into TO at the same relative path (what the GPU machine needs to compile again).
keep_included() {
  local from=$1 to=$2
  shift 2
  "$nvcc" -std=c++17 "-arch=$arch" -M "$@" | python3 -c '
import os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
for path in sorted(set(sys.stdin.read().replace("\\\n", " ").split())):
    if path.startswith(src + "/"):
        target = os.path.join(dst, os.path.relpath(path, src))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(path, target)
' "$from" "$to"
}

# nvcc's release, for the notes beside a library.
nvcc_release() { "$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'; }
