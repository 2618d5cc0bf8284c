# shellcheck shell=bash
# Shared by build.sh, emulate.sh and rebase.sh (sourced, from the repository root):
# resolve_patch TOOL ARG sets `patch` to the absolute path of the experiment patch ARG names (a
# file, or a patch of scripts/experiments with or without .patch), or says why not and exits 2;
# patched_worktree TOOL TREE makes TREE a fresh worktree at HEAD with `patch` applied, or says
# why not and exits 1.
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

patched_worktree() {
  local tool=$1 tree=$2
  echo "$tool: worktree $tree at $(git rev-parse --short HEAD) with $(basename "$patch")"
  git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
  git worktree prune
  git worktree add --detach -q "$tree" HEAD
  if ! git -C "$tree" apply "$patch"; then
    echo "$tool: $(basename "$patch") does not apply to HEAD ($(git rev-parse --short HEAD))" >&2
    exit 1
  fi
}
