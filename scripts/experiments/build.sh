#!/usr/bin/env bash
# Builds the throwaway library of an experiment patch for the GPU machine, in one step:
#   scripts/experiments/build.sh PATCH [NAME]      e.g. scripts/experiments/build.sh row-backward-final-sum-vec
# PATCH: a file of scripts/experiments (with or without .patch) or a path. NAME (default: the
# patch's name) names the worktree (/tmp/exp-NAME, at this checkout's HEAD, the patch applied),
# the build folder (build-exp-NAME: Release, tools/normjit and the library it links, no tests)
# and the slim copy that travels to the GPU machine: .devcarry/NAME (git-ignored) with
# libnormjit.so* and tools/normjit, about 2.5 MB. Carry `.devcarry` with the device tool and pass
# .devcarry/NAME as a build to scripts/ab_bench.py (--variant x=.devcarry/NAME:KNOB=1); for the
# GPU tests, run build-gpu's gpu_tests over it (LD_LIBRARY_PATH=.devcarry/NAME): they link the
# library dynamically, so a patch that leaves tests/gpu alone is tested that way.
# An existing worktree or build of that NAME is replaced. Exit status: 0 built; 1 the patch does
# not apply or the build failed; 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
if (($# < 1 || $# > 2)); then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
# shellcheck source=scripts/experiments/patch_arg.sh
source scripts/experiments/patch_arg.sh
resolve_patch build.sh "$1"
name=${2:-$(basename "$patch" .patch)}
if [[ ! "$name" =~ ^[A-Za-z0-9._-]+$ ]]; then
  echo "build.sh: NAME '$name' takes letters, digits, '.', '_' and '-' only" >&2
  exit 2
fi
tree=/tmp/exp-$name
build=$here/build-exp-$name
slim=$here/.devcarry/$name

patched_worktree build.sh "$tree"
echo "build.sh: building $build (tools/normjit)"
cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" -DNORMJIT_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target normjit_cli
rm -rf "$slim" && mkdir -p "$slim/tools"
cp -a "$build"/libnormjit.so* "$slim/"
cp "$build/tools/normjit" "$slim/tools/"
echo "build.sh: $slim ($(du -sh "$slim" | cut -f1)); carry .devcarry, then e.g."
echo "  python3 scripts/ab_bench.py --specs LIST --variant head=.devcarry/$name --variant x=.devcarry/$name:KNOB=1"
