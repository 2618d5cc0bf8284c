#!/usr/bin/env python3
"""The machine code of normjit's many-rows RMSNorm kernel beside an Inductor-like persistent
reduction for the same rows (docs/performance-notes.md, the rows of 8192 behind torch.compile).
Needs no GPU: normjit's PTX comes from `normjit dump --emit ptx` for [4096, hidden] bf16 with a
weight; the other kernel is what torch.compile writes for such a row, written out by hand
(XBLOCK 1, RBLOCK = hidden, the weight loaded with eviction_policy='evict_last'), compiled by
Triton for sm_90; both assembled by the ptxas of Triton's wheel and disassembled by its
cuobjdump. Prints each kernel's instruction count, registers and the counts of its memory,
barrier, shuffle and arithmetic instructions (--list: every instruction).
  python3 -m venv /tmp/tv && /tmp/tv/bin/pip install triton==3.6.0
  /tmp/tv/bin/python scripts/rows_sass.py --normjit build/tools/normjit [--hidden 8192] [--warps 8]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_sass import assemble, nvidia_bin, print_listing, sass_of  # noqa: E402


@triton.jit
def inductor_like_rms(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr,
                      RBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    tmp0 = tl.load(in_ptr0 + (rindex + RBLOCK * xindex), xmask, other=0.0).to(tl.float32)
    tmp3 = tl.where(xmask, tmp0 * tmp0, 0)
    tmp4 = tl.sum(tmp3, 1)[:, None]
    tmp9 = tl.math.rsqrt(tmp4 / RBLOCK + 1e-06)
    tmp11 = tl.load(in_ptr1 + rindex, None, eviction_policy='evict_last').to(tl.float32)
    tl.store(out_ptr0 + (rindex + RBLOCK * xindex), (tmp0 * tmp9 * tmp11).to(tl.bfloat16), xmask)


KINDS = ("LDG", "STG", "BAR", "SHFL", "LDS", "STS", "MUFU", "FFMA", "FMUL", "FADD", "IMAD",
         "IADD3", "LEA", "PRMT", "F2FP")


def summary(name, sass, cubin):
    out = subprocess.run([nvidia_bin("cuobjdump"), "-res-usage", cubin], capture_output=True,
                         text=True).stdout
    regs = re.findall(r"REG:(\d+)", out)
    kinds = {}
    for ins in sass:
        op = re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]
        if op.split(".")[0] in KINDS:
            kinds[op] = kinds.get(op, 0) + 1
    print(f"{name}: {len(sass)} instructions, {regs[0] if regs else '?'} registers")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--normjit", required=True, help="the normjit CLI")
    ap.add_argument("--hidden", type=int, default=8192, help="row length (a power of two)")
    ap.add_argument("--warps", type=int, default=8, help="warps of the Inductor-like kernel")
    ap.add_argument("--list", action="store_true", help="also print both kernels' instructions")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rows-sass-")
    sig = {"in_ptr0": "*bf16", "in_ptr1": "*bf16", "out_ptr0": "*bf16", "xnumel": "i32",
           "XBLOCK": "constexpr", "RBLOCK": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(4)}
    kernel = triton.compile(
        ASTSource(inductor_like_rms, sig, {"XBLOCK": 1, "RBLOCK": a.hidden}, attrs),
        target=GPUTarget("cuda", 90, 32), options={"num_warps": a.warps})
    ind_cubin = os.path.join(tmp, "inductor.cubin")
    with open(ind_cubin, "wb") as f:
        f.write(kernel.asm["cubin"])
    spec = (f"op=rmsnorm shape=4096,{a.hidden} dtype=bf16 normalized_dims=1 affine=weight "
            "eps=1e-06")
    ptx = subprocess.run([a.normjit, "dump", "--spec", spec, "--arch", "sm_90", "--emit", "ptx"],
                         check=True, capture_output=True, text=True).stdout
    nj_cubin = assemble(ptx, tmp, "normjit")
    print(f"[4096, {a.hidden}] bf16 RMSNorm with a weight, sm_90")
    for name, cubin in ((f"Inductor-like ({a.warps} warps)", ind_cubin), ("normjit", nj_cubin)):
        sass = sass_of(cubin)
        summary(name, sass, cubin)
        if a.list:
            print_listing(sass)
    return 0


if __name__ == "__main__":
    sys.exit(main())
