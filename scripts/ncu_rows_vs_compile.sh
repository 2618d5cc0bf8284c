#!/usr/bin/env bash
# Nsight Compute's counters of normjit's forward row kernel beside torch.compile's kernel of the
# same RMSNorm, on the GPU machine: for LLM rows where compile runs at the speed of a copy and
# normjit a few percent behind (bf16 x [tokens, hidden] with an f32 weight, issue 18's variant
# 2, or a bf16 weight), and add + RMSNorm (a bf16 residual, variant 1: y and h written, compile's
# y and h new tensors), each kernel's duration, the bytes it moved between DRAM and L2 and between
# L2 and the SMs, its L1 hit rate, the warps active, and the average warp's stall reasons per
# issued instruction, so that performance-notes can say where the two kernels differ.
#   scripts/ncu_rows_vs_compile.sh [build-dir] [tokens,hidden,param-dtype[,add] ...]
#   (default: build-gpu and 16384,8192,f32 16384,4096,f32 16384,8192,bf16 16384,16384,f32;
#   e.g. 1024,4096,bf16,add for add + RMSNorm at 1024 tokens)
# For each case: one launch of normjit's row_norm (the third, `normjit bench`) and of compile's
# kernel (the launch of a fourth call of the compiled expression, in an NVTX range, after three
# that compile it and warm up, each on its own x of 4). The CSV files and the tables go to $OUT
# (default ncu-out). Needs ncu (NCU, default /usr/local/cuda/bin/ncu), PyTorch with Triton, and
# the build's tools/normjit with its libnormjit.so. ncu runs with --clock-control none.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 2
build=$(cd "${1:-build-gpu}" && pwd) || exit 2
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then cases=("$@"); else
  # shellcheck disable=SC2054  # each case is one word of commas
  cases=(16384,8192,f32 16384,4096,f32 16384,8192,bf16 16384,16384,f32)
fi
ncu=${NCU:-/usr/local/cuda/bin/ncu}
out=${OUT:-ncu-out}
mkdir -p "$out"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
metrics+=,l1tex__t_sector_hit_rate.pct,launch__registers_per_thread,launch__block_size
metrics+=,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active
for reason in long_scoreboard barrier short_scoreboard wait lg_throttle mio_throttle \
  no_instruction not_selected selected; do
  metrics+=,smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio
done
compile_py=$(mktemp --suffix=.py)
trap 'rm -f "$compile_py"' EXIT
cat > "$compile_py" <<'PY'
import sys
import torch
tokens, hidden, pdt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
add = sys.argv[4] == "add"
wdt = {"f32": torch.float32, "bf16": torch.bfloat16}[pdt]
EPS = 1e-6

def rmsnorm(x, w):  # tools/bench_variants.py's variant 2 (f32 weight) and its bf16 form
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)

def add_rmsnorm(x, r, w):  # tools/bench_variants.py's pt_add_rmsnorm (variant 1)
    h = x + r
    hf = h.float()
    y = w * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
    return y, h

xs = [torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
rs = [torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
w = torch.randn(hidden, device="cuda", dtype=wdt)
f = torch.compile(add_rmsnorm if add else rmsnorm)
args = (lambda i: (xs[i], rs[i], w)) if add else (lambda i: (xs[i], w))
for i in range(3):  # compiled (and any autotuning launches) by the first call
    f(*args(i))
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("timed")  # the launch ncu profiles (--nvtx-include timed/)
f(*args(3))
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY
status=0
for c in "${cases[@]}"; do
  IFS=, read -r tokens hidden pdt form <<< "$c"
  form=${form:-plain}
  if [ "$form" != plain ] && [ "$form" != add ]; then
    echo "ncu_rows_vs_compile.sh: case '$c': the fourth field is 'add' or nothing" >&2
    exit 2
  fi
  spec="op=rmsnorm shape=$tokens,$hidden dtype=bf16 normalized_dims=1 affine=weight eps=1e-06"
  [ "$pdt" = bf16 ] || spec+=" param_dtype=$pdt"
  [ "$form" = add ] && spec+=" residual=bf16"
  name="$tokens-$hidden-$pdt-$form"
  echo "## [$tokens, $hidden] bf16, $pdt weight, $form: normjit"
  LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    NORMJIT_CACHE_DIR=${NORMJIT_CACHE_DIR:-/tmp/ncu-rows-cache} \
    "$ncu" --clock-control none --metrics "$metrics" --kernel-name regex:row_norm -s 2 -c 1 --csv \
    "$build/tools/normjit" bench --spec "$spec" --repeat 1 --warmup 2 \
    > "$out/normjit-$name.csv" 2> "$out/normjit-$name.err" || status=1
  python3 scripts/ncu_table.py "$out/normjit-$name.csv" || status=1
  echo "## [$tokens, $hidden] bf16, $pdt weight, $form: torch.compile"
  "$ncu" --clock-control none --metrics "$metrics" --nvtx --nvtx-include "timed/" -c 1 --csv \
    python3 "$compile_py" "$tokens" "$hidden" "$pdt" "$form" \
    > "$out/compile-$name.csv" 2> "$out/compile-$name.err" || status=1
  python3 scripts/ncu_table.py "$out/compile-$name.csv" || status=1
done
exit $status
