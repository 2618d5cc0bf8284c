#!/usr/bin/env bash
# ptxas's registers and spill stores of the row backward's kernels, offline (no GPU), for two
# builds side by side: RMSNorm with a weight, LayerNorm with weight and bias and without, in f32,
# f16 and bf16, rows of 128 to 16384 (99 specs of 64 rows; the backward plans one kernel for
# every batch), each compiled by `normjit dump --emit resources --arch sm_90:132:4814`.
#   scripts/backward_resources.sh OLD NEW     e.g. .devcarry/spread build-gpu
# OLD and NEW: build folders (or .devcarry/NAME copies) holding tools/normjit and its library.
# Prints one line per spec: "spec | OLD registers spills | NEW registers spills", the changed
# lines marked with "*". One spec at a time: about 5 minutes on 2 cores.
set -euo pipefail
if (($# != 2)); then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
for b in "$1" "$2"; do
  [ -x "$b/tools/normjit" ] || { echo "backward_resources.sh: no $b/tools/normjit" >&2; exit 2; }
done
specs=$(for op in "rmsnorm affine=weight" "layernorm affine=both" "layernorm affine=none"; do
  for dt in f32 f16 bf16; do
    for h in 128 768 1000 1024 2047 2048 3072 4096 4097 8192 16384; do
      echo "op=${op% *} shape=64,$h dtype=$dt normalized_dims=1 ${op#* } backward=true"
    done
  done
done)
one() {  # build spec -> "R regs S spill"
  LD_LIBRARY_PATH="$1" "$1/tools/normjit" dump --spec "$2" --arch sm_90:132:4814 \
    --emit resources 2>&1 | awk '/^registers:/ {r = $2} /^spill stores:/ {s = $3}
    END {printf "%s regs %s spill", (r == "" ? "?" : r), (s == "" ? "?" : s)}'
}
while IFS= read -r spec; do
  a=$(one "$1" "$spec") &&
    b=$(one "$2" "$spec") &&
    printf '%s %s | %s | %s\n' "$([ "$a" = "$b" ] && echo ' ' || echo '*')" "$spec" "$a" "$b"
done <<<"$specs"
