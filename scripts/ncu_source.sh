#!/usr/bin/env bash
# Nsight Compute's warp-stall samples per SASS instruction of one kernel, for each spec of a spec
# list, on the GPU machine: where in the machine code a kernel's warps wait (the loads of a row,
# a team's reduction, the grid barrier's poll, the final sum of the CTAs' partials, ...), for
# performance-notes. For each spec: one launch of the kernel (the third, after two that warm the
# caches and the clocks) profiled with the SourceCounters, WarpStateStats, SpeedOfLight and
# LaunchStats sections into a report, then the report's source page as CSV (one row per SASS
# instruction with its samples). scripts/sass_stalls.py sums the samples by region.
#   scripts/ncu_source.sh [build-dir] [spec-list]
#   (default: build-gpu and scripts/specs/row-backward-final-sum.txt)
# KERNEL: a regex of the kernel's name (default row_backward). The reports, the CSV files and
# ncu's output go to $OUT (default ncu-out). Needs ncu (NCU, default /usr/local/cuda/bin/ncu) and
# the build's tools/normjit with its libnormjit.so. ncu runs with --clock-control none (the GPU's
# clocks are never changed). A spec whose plan runs another kernel is named as such and skipped.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 2
build=$(cd "${1:-build-gpu}" && pwd) || exit 2
list=${2:-scripts/specs/row-backward-final-sum.txt}
[ -f "$list" ] || { echo "ncu_source: no spec list $list" >&2; exit 2; }
ncu=${NCU:-/usr/local/cuda/bin/ncu}
out=${OUT:-ncu-out}
kernel=${KERNEL:-row_backward}
mkdir -p "$out"
status=0
n=0
while IFS= read -r spec; do
  case "$spec" in '' | '#'*) continue ;; esac
  n=$((n + 1))
  one="$out/spec-$n.txt"
  printf '%s\n' "$spec" > "$one"
  echo "## $n: $spec"
  LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/ncu-source-cache} \
    "$ncu" --clock-control none --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section LaunchStats --kernel-name "regex:$kernel" -s 2 -c 1 \
    -f -o "$out/report-$n" "$build/tools/normjit" bench --specs "$one" --repeat 1 --warmup 2 \
    > "$out/ncu-$n.log" 2>&1 || status=1
  if [ ! -f "$out/report-$n.ncu-rep" ]; then
    # The spec's plan is not that kernel (ncu profiled none): say which kernels it saw.
    echo "no $kernel kernel profiled: $(grep -h -A3 'Available Kernels\|No kernels' "$out/ncu-$n.log" | tr '\n' ' ')"
    continue
  fi
  "$ncu" -i "$out/report-$n.ncu-rep" --page source --csv --print-source sass \
    > "$out/source-$n.csv" 2> "$out/source-$n.err" || status=1
  "$ncu" -i "$out/report-$n.ncu-rep" --page details --csv > "$out/details-$n.csv" 2>&1 || status=1
  echo "source page: $(wc -l < "$out/source-$n.csv") lines; details: $(wc -l < "$out/details-$n.csv") lines"
done < "$list"
exit $status
