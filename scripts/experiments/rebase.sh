#!/usr/bin/env bash
# Moves an experiment patch onto this checkout's HEAD, in place:
#   scripts/experiments/rebase.sh PATCH      e.g. scripts/experiments/rebase.sh row-odd-values
# PATCH: a file of scripts/experiments (with or without .patch) or a path. The patch is applied
# in a scratch worktree at HEAD (/tmp/rebase-NAME) with a three-way merge where it no longer
# applies as it is; its leading comment lines (before the first `diff --git`) are kept and the
# "(patch of REV)" they name is set to HEAD's short hash; the diff is written again from the
# worktree. Conflicts are not resolved here: the worktree is left with the conflict markers for
# you to resolve (then `git -C /tmp/rebase-NAME add -A` and run this again with --from-worktree).
#   scripts/experiments/rebase.sh --from-worktree PATCH   writes the patch from that worktree's
#        staged and unstaged changes (after you resolved them) and removes the worktree
# Exit status: 0 rewritten (or already at HEAD); 1 conflicts left in the worktree; 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
from_worktree=false
if [ "${1:-}" = "--from-worktree" ]; then
  from_worktree=true
  shift
fi
if (($# != 1)); then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
# shellcheck source=scripts/experiments/patch_arg.sh
source scripts/experiments/patch_arg.sh
resolve_patch rebase.sh "$1"
name=$(basename "$patch" .patch)
tree=/tmp/rebase-$name
head=$(git rev-parse --short HEAD)

# Writes the patch: its leading comments with "(patch of REV)" set to HEAD, then the worktree's
# changes against HEAD (staged and not).
write_patch() {
  local header
  header=$(sed -n '/^diff --git/q;p' "$patch" | sed -E "s/\(patch of [0-9a-f]+\)/(patch of $head)/")
  git -C "$tree" add -A
  {
    if [ -n "$header" ]; then printf '%s\n' "$header"; fi
    git -C "$tree" diff --cached HEAD
  } >"$patch.new"
  mv "$patch.new" "$patch"
  git worktree remove --force "$tree"
  echo "rebase.sh: $(basename "$patch") is a patch of $head"
}

if $from_worktree; then
  [ -d "$tree" ] || { echo "rebase.sh: no worktree $tree" >&2; exit 2; }
  if grep -rlE '^(<<<<<<<|>>>>>>>) ' "$tree" --include='*.cpp' --include='*.hpp' \
    --include='*.cuh' --include='*.py' >/dev/null 2>&1; then
    echo "rebase.sh: conflict markers are still in $tree" >&2
    exit 1
  fi
  write_patch
  exit 0
fi

git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git worktree prune
git worktree add --detach -q "$tree" HEAD
if git -C "$tree" apply "$patch" 2>/dev/null; then
  write_patch
  exit 0
fi
if git -C "$tree" apply --3way "$patch"; then
  write_patch
  exit 0
fi
echo "rebase.sh: conflicts in $tree (git -C $tree diff); resolve them, then" >&2
echo "  scripts/experiments/rebase.sh --from-worktree $(basename "$patch")" >&2
exit 1
