#!/usr/bin/env bash
# Nsight Compute's view of the forward split kernel (row_split.cuh) on the problems of a spec
# list, on the GPU machine: for each spec, one launch of its row_split kernel (the third, after
# two that warm the caches and the clocks) with its duration, the DRAM bytes it read and wrote,
# DRAM throughput as a percentage of the peak sustained, the warps active, and the average
# warp's stall reasons per issued instruction (where a warp of the kernel waits: on its loads
# (long scoreboard), on the row's barrier (the exchange's polls), on shared memory, ...), so
# that performance-notes can say what limits a split row with the counters' evidence.
#   scripts/ncu_split.sh [build-dir] [spec-list]
#   (default: build-gpu and scripts/specs/groupnorm-silu-ab.txt)
# KERNEL (a regex of the kernel's name, default row_split) profiles another kernel the same way,
# e.g. KERNEL=group_nhwc for the channels-last GroupNorm's.
# The CSV files and the tables go to $OUT (default ncu-out). Needs ncu (NCU, default
# /usr/local/cuda/bin/ncu) and the build's tools/normjit with its libnormjit.so. ncu runs with
# --clock-control none (docs: the GPU's clocks are never changed). A spec whose plan is another
# kernel (ncu profiles none) is named as such and skipped. First run: 2026-11-28 on an H200
# (performance-notes, "The split kernel's stage and prefetch ...").
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 2
build=$(cd "${1:-build-gpu}" && pwd) || exit 2
list=${2:-scripts/specs/groupnorm-silu-ab.txt}
[ -f "$list" ] || { echo "ncu_split: no spec list $list" >&2; exit 2; }
ncu=${NCU:-/usr/local/cuda/bin/ncu}
out=${OUT:-ncu-out}
mkdir -p "$out"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
metrics+=,launch__block_size,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active
for reason in long_scoreboard barrier membar short_scoreboard wait lg_throttle mio_throttle \
  math_pipe_throttle no_instruction branch_resolving drain sleeping not_selected selected; do
  metrics+=,smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio
done
status=0
n=0
while IFS= read -r spec; do
  case "$spec" in '' | '#'*) continue ;; esac
  n=$((n + 1))
  one="$out/spec-$n.txt"
  printf '%s\n' "$spec" > "$one"
  echo "## $n: $spec"
  LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/ncu-split-cache} \
    "$ncu" --clock-control none --metrics "$metrics" --kernel-name "regex:${KERNEL:-row_split}" -s 2 -c 1 --csv \
    "$build/tools/normjit" bench --specs "$one" --repeat 1 --warmup 2 \
    > "$out/ncu-$n.csv" 2> "$out/ncu-$n.err" || status=1
  if grep -q "No kernels were profiled" "$out/ncu-$n.csv" "$out/ncu-$n.err"; then
    # The spec's plan is not the split kernel (e.g. a small map held by one CTA a row): ncu
    # lists the kernels it saw instead.
    echo "not a ${KERNEL:-row_split} kernel: $(grep -h -A3 'Available Kernels' "$out/ncu-$n.csv" "$out/ncu-$n.err" | tail -n +2 | tr '\n' ' ')"
    continue
  fi
  python3 scripts/ncu_table.py "$out/ncu-$n.csv" || { status=1; tail -5 "$out/ncu-$n.err"; }
done < "$list"
exit $status
