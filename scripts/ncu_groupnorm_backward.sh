#!/usr/bin/env bash
# Nsight Compute's DRAM counters for the GroupNorm seed's backward, normjit's kernel beside the
# kernels of torch.compile's generated backward, on the GPU machine:
#   scripts/ncu_groupnorm_backward.sh [build-dir] [dtype ...]    (default: build-gpu bf16 f32)
# For each dtype: normjit's group_backward kernel (one launch of `normjit bench --backward`) and
# torch.compile's first kernels whose names hold "backward" (the per-(n, c) sums over x and dy,
# then the per-group reduction of those sums; its dx kernel is not among them: its time is the
# backward's total less theirs), each with its duration, the DRAM bytes it read and wrote and
# DRAM throughput as a percentage of the peak sustained. The CSV files and the tables go to $OUT
# (default ncu-out). Needs ncu (NCU, default /usr/local/cuda/bin/ncu), PyTorch and the build's
# tools/normjit with its libnormjit.so.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=$(cd "${1:-build-gpu}" && pwd) || exit 2
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then dtypes=("$@"); else dtypes=(bf16 f32); fi
ncu=${NCU:-/usr/local/cuda/bin/ncu}
out=${OUT:-ncu-out}
mkdir -p "$out"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active
compile_py=$(mktemp --suffix=.py)
trap 'rm -f "$compile_py"' EXIT
cat > "$compile_py" <<'PY'
import sys
import torch
import torch.nn.functional as F
dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[sys.argv[1]]
x = torch.randn(112, 64, 512, 512, device="cuda", dtype=dtype, requires_grad=True)
w = torch.randn(64, device="cuda", dtype=dtype, requires_grad=True)
b = torch.randn(64, device="cuda", dtype=dtype, requires_grad=True)
dy = torch.randn_like(x)
f = torch.compile(lambda x, w, b: F.group_norm(x, 8, w, b, 1e-5))
for _ in range(2):
    torch.autograd.grad(f(x, w, b), (x, w, b), dy)
torch.cuda.synchronize()
PY
status=0
for dt in "${dtypes[@]}"; do
  LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$ncu" --metrics "$metrics" \
    --kernel-name regex:group_backward -c 1 --csv "$build/tools/normjit" bench --op groupnorm \
    --shape 112,64,512,512 --groups 8 --dtype "$dt" --backward --repeat 1 --warmup 0 \
    > "$out/normjit-$dt.csv" 2> "$out/normjit-$dt.err" || status=1
  echo "## normjit, $dt"
  python3 scripts/ncu_table.py "$out/normjit-$dt.csv" || status=1
  "$ncu" --metrics "$metrics" --kernel-name regex:backward -c 4 --csv python3 "$compile_py" "$dt" \
    > "$out/compile-$dt.csv" 2> "$out/compile-$dt.err" || status=1
  echo "## torch.compile, $dt"
  python3 scripts/ncu_table.py "$out/compile-$dt.csv" || status=1
done
exit $status
