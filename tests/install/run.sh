#!/usr/bin/env bash
# Installs the build into a temporary prefix, then configures, builds and runs a separate
# project that does find_package(normjit) and links normjit::normjit.
set -euo pipefail
build=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# The package names no CUDA path or package: its headers need none, so a consumer needs no
# toolkit (nor one at the build machine's path) to compile against it.
if grep -n -i "cuda" "$work"/prefix/lib*/cmake/normjit/*.cmake | grep -v -E ':[0-9]+: *#' >&2; then
  echo "install test: the installed CMake package refers to CUDA (above)" >&2
  exit 1
fi
cmake -S "$source/tests/install/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer" "$work/cache"
"$work/consumer/consumer_c" "$work/cache"
