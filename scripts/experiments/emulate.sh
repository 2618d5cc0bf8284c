#!/usr/bin/env bash
# An experiment patch's kernels on the CPU, under each knob setting, before any GPU time:
#   scripts/experiments/emulate.sh PATCH SPECS SETTING...
#   e.g. scripts/experiments/emulate.sh group-nhwc-backward-overlap LIST \
#          NJX_NHWC_PREFETCH=2 NJX_NHWC_SUM_ITEMS=3,NJX_NHWC_OWN=1
# PATCH: as build.sh takes it. SPECS: a spec list as tests/emulation/specs.txt (a spec a line,
# '#' comments; keep the tensors to a few tens of MB: each CTA is a process). SETTING: the knobs
# of one run, comma-separated VAR=VALUE. The worktree /tmp/emu-NAME (HEAD, the patch applied)
# is built with the tests (Release, target kernel_emulation: the patch's planner and emitter,
# the host form of its templates), then tests/emulation/run.sh runs SPECS with `--bits` with the
# knobs off and under each SETTING: every launch against float64 on devices of 5 and 300
# co-resident CTAs, and each setting's output bits against the knobs-off run's. Prints a line a
# setting; logs in /tmp/emu-NAME-logs. Exit status: 0 every launch matched float64 (a setting
# whose bits differ is reported, not failed: other sizes give other sums); 1 a launch did not,
# or the patch or build failed; 2 usage. EMU_ARGS: more options for kernel_emulation, e.g.
# EMU_ARGS="--arch sm_90:2 --co 4,16" to plan for a part of 2 SMs (the split kernels' streamed
# parts then start at rows of tens of thousands of elements) on devices of 4 and 16 CTAs.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
if (($# < 2)); then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
# shellcheck source=scripts/experiments/patch_arg.sh
source scripts/experiments/patch_arg.sh
resolve_patch emulate.sh "$1"
specs=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
if [ ! -f "$specs" ]; then
  echo "emulate.sh: no spec list $2" >&2
  exit 2
fi
shift 2
for setting in "$@"; do
  if [[ ! "$setting" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^,]*(,[A-Za-z_][A-Za-z0-9_]*=[^,]*)*$ ]]; then
    echo "emulate.sh: SETTING '$setting' is not VAR=VALUE[,VAR=VALUE...]" >&2
    exit 2
  fi
done
name=$(basename "$patch" .patch)
tree=/tmp/emu-$name
logs=/tmp/emu-$name-logs

patched_worktree emulate.sh "$tree"
rm -rf "$logs" && mkdir -p "$logs"
echo "emulate.sh: building $tree/build (kernel_emulation)"
if ! { cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$tree/build" --target kernel_emulation; } >"$logs/build.log" 2>&1; then
  tail -n 20 "$logs/build.log" >&2
  echo "emulate.sh: the build failed (all of it: $logs/build.log)" >&2
  exit 1
fi

read -r -a emu_args <<<"${EMU_ARGS:-}"

# run SETTING: the emulation under SETTING's knobs (off: none); sets `bits` to the launches'
# hashes, one a line, and fails where a launch did not match float64.
run() {
  local setting=$1 log=$logs/${1//,/_}.log knobs=()
  [ "$setting" = off ] || IFS=, read -r -a knobs <<<"$setting"
  local status=0
  env ${knobs[@]+"${knobs[@]}"} bash "$tree/tests/emulation/run.sh" \
    "$tree/build/tests/emulation/kernel_emulation" "${CXX:-c++}" "$logs/work" "$specs" --bits \
    ${emu_args[@]+"${emu_args[@]}"} \
    >"$log" 2>&1 || status=$?
  bits=$(grep -o 'bits [0-9a-f]*' "$log" || true)
  echo "$setting: $(tail -n 1 "$log")"
  return "$status"
}

failed=0
run off || failed=1
reference=$bits
for setting in "$@"; do
  if ! run "$setting"; then
    failed=1
  elif [ "$bits" = "$reference" ]; then
    echo "  bits: the same as with the knobs off"
  else
    echo "  bits: $(diff <(echo "$reference") <(echo "$bits") | grep -c '^<') of" \
      "$(echo "$reference" | grep -c .) launches differ from the knobs-off run's"
  fi
done
echo "emulate.sh: logs in $logs"
exit "$failed"
