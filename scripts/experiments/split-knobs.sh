#!/usr/bin/env bash
# The split kernel's choices against their alternatives on this GPU (an experiment, not a
# test): a throwaway build whose plan reads NJX_VECTORS (vectors per thread, so CTAs per row),
# NJX_STAGE (0: the next row not staged in shared memory) and NJX_PF (0, 1, 2: where the later
# row is prefetched into L2), made from this checkout with split-knobs.patch applied:
#   git worktree add /tmp/njx HEAD && git -C /tmp/njx apply "$PWD/scripts/experiments/split-knobs.patch"
#   cmake -S /tmp/njx -B build-exp -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMJIT_BUILD_TESTS=OFF
#   cmake --build build-exp --target normjit_cli
# then, on the GPU machine: scripts/experiments/split-knobs.sh [build-exp] (or scripts/ab_bench.py
# with --variant NAME=build-exp:NJX_VECTORS=2,... for a Markdown table of rounds). The few-row
# GroupNorm -> SiLU maps of the SD VAE: SPECS=scripts/specs/groupnorm-vae-batch.txt.
# Each setting (KNOBS, ';'-separated; default the split forward's below) times SPECS (default
# scripts/specs/split-seeds.txt) with `normjit bench --repeat 30`, in two rounds; the log goes
# to $OUT/knobs.log (or ./knobs.log) and the table of medians (ms, round 1 / round 2) to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
tool=${1:-build-exp}/tools/normjit
log=${OUT:-.}/knobs.log
export NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/njx-cache}
specs=${SPECS:-scripts/specs/split-seeds.txt}
settings=("NJX_NONE=1" "NJX_VECTORS=4" "NJX_VECTORS=2" "NJX_PF=0" "NJX_PF=1"
          "NJX_STAGE=0 NJX_PF=1" "NJX_STAGE=0 NJX_PF=0")
if [ -n "${KNOBS:-}" ]; then IFS=';' read -r -a settings <<< "$KNOBS"; fi
: > "$log"
nvidia-smi -L | tee -a "$log"
for round in 1 2; do
  for v in "${settings[@]}"; do
    echo "== round $round $v" >> "$log"
    read -r -a knobs <<< "$v"  # a setting may set several knobs
    env "${knobs[@]}" "$tool" bench --specs "$specs" --repeat 30 >> "$log" 2>&1
  done
done
python3 - "$log" "${settings[@]}" <<'PY'
import re, sys
log, settings = sys.argv[1], sys.argv[2:]
rows, cur, spec = {}, None, None
for line in open(log):
    m = re.match(r"== round (\d) (.*)", line)
    if m:
        cur = m.group(2).strip()
        continue
    m = re.match(r"op=(\S+) shape=(\S+) dtype=(\S+)", line)
    if m:
        spec = f"{m.group(1)} {m.group(2)} {m.group(3)}"
        continue
    m = re.search(r"([\d.]+) ms median", line)
    if m and cur and spec:
        rows.setdefault(spec, {}).setdefault(cur, []).append(m.group(1))
print("| seed | " + " | ".join(settings) + " |")
print("|---|" + "---:|" * len(settings))
for s, d in rows.items():
    print(f"| {s} | " + " | ".join(" / ".join(d.get(k, [])) for k in settings) + " |")
PY
