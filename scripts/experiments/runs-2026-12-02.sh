#!/usr/bin/env bash
# The GPU runs of 2026-12-02, all made and written up in performance-notes ("The row backward's
# final sum over every CTA, and a barrier for each team", and "The row backward's grid barrier
# with release and acquire"); kept to say how the numbers there were made. The next runs are in
# runs-2026-12-03.sh. Each step's library:
#   flags     scripts/experiments/build.sh row-backward-flagged-sum flags   (.devcarry/flags)
#   clock     scripts/experiments/build.sh row-backward-clock clock         (.devcarry/clock)
#   pairs     build-gpu of 33c3a3c with row-backward-cluster-pairs.patch applied (NJX_BWD_PAIRS)
#   barrier   build-gpu of 33c3a3c with row-backward-barrier-modes.patch applied (NJX_BWD_BARRIER)
# On the GPU machine (carry build-gpu .devcarry):
#   bash scripts/experiments/runs-2026-12-02.sh flags|pairs   the backward GPU tests over the
#        library with the knob (3 shards at once), then, if they pass, its A/B on the LLM and
#        ViT/BERT rows
#   bash scripts/experiments/runs-2026-12-02.sh barrier   the A/B of the barrier's three modes
#   bash scripts/experiments/runs-2026-12-02.sh clock   each CTA's timestamps, 4 specs
# Logs and tables go to $OUT (default ./runs-out).
set -uo pipefail
# shellcheck source=scripts/experiments/lib.sh
source "$(dirname "$0")/lib.sh"

# tests_then_ab NAME KNOB=VALUE LIB: the row backward's GPU tests over LIB (.devcarry/NAME, or
# build-gpu) with the knob; if they pass, the A/B of LIB without and with the knob on the LLM and
# ViT/BERT rows.
tests_then_ab() {
  local name=$1 knob=$2 lib=$3 list
  test_shards "$name" "$lib" "$knob" 300 "${ROW_BACKWARD_FILTERS[@]}" || exit 1
  for list in row-backward-final-sum row-backward-team-barriers; do
    timeout 200 python3 scripts/ab_bench.py --rounds 2 --out "/tmp/$name-ab-$list" \
      --specs "scripts/specs/$list.txt" --variant "head=$lib" \
      --variant "$name=$lib:$knob" 2>&1 | tee "$out/$name-ab-$list.txt"
  done
}

case "${1:-}" in
  flags)
    tests_then_ab flags NJX_BWD_FLAGS=1 .devcarry/flags
    ;;
  pairs)
    # NJX_BWD_PAIRS=1 in this checkout's build-gpu: the row backward's CTAs in clusters of two.
    tests_then_ab pairs NJX_BWD_PAIRS=1 build-gpu
    ;;
  barrier)
    # NJX_BWD_BARRIER=1|2|3 in this checkout's build-gpu: the row backward's grid barrier.
    for list in row-backward-final-sum row-backward-team-barriers; do
      timeout 280 python3 scripts/ab_bench.py --rounds 2 --out "/tmp/barrier-ab-$list" \
        --specs "scripts/specs/$list.txt" --variant head=build-gpu \
        --variant acqrel=build-gpu:NJX_BWD_BARRIER=1 --variant acqrel-sleep=build-gpu:NJX_BWD_BARRIER=2 \
        --variant spin=build-gpu:NJX_BWD_BARRIER=3 2>&1 | tee "$out/barrier-ab-$list.txt"
    done
    ;;
  clock)
    n=0
    while IFS= read -r spec; do
      case "$spec" in '' | '#'*) continue ;; esac
      n=$((n + 1))
      echo "## $spec" | tee -a "$out/clock.md"
      NJX_BWD_CLOCK=1 LD_LIBRARY_PATH=.devcarry/clock NORMJIT_CACHE_DIR=/tmp/runs-cache-clock \
        timeout 60 .devcarry/clock/tools/normjit bench --spec "$spec" --repeat 5 --warmup 1 \
        >"$out/clock-$n.txt" 2>&1
      python3 scripts/experiments/row-backward-clock.py "$out/clock-$n.txt" | tee -a "$out/clock.md"
    done < scripts/specs/row-backward-ncu.txt
    ;;
  *)
    sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
