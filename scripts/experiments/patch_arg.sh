# shellcheck shell=bash
# Shared by build.sh and rebase.sh (sourced, from the repository root): resolve_patch TOOL ARG
# sets `patch` to the absolute path of the experiment patch ARG names (a file, or a patch of
# scripts/experiments with or without .patch), or says why not and exits 2.
resolve_patch() {
  local tool=$1 arg=$2
  patch=$arg
  [ -f "$patch" ] || patch=scripts/experiments/${arg%.patch}.patch
  if [ ! -f "$patch" ]; then
    echo "$tool: no patch $arg (neither a file nor scripts/experiments/${arg%.patch}.patch)" >&2
    exit 2
  fi
  patch=$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")
}
