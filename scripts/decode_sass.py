#!/usr/bin/env python3
"""The machine code of the decode RMSNorm kernel beside Liger-Kernel's (docs/performance-notes.md,
"Decode rows"). Needs no GPU: normjit's PTX comes from `normjit dump --emit ptx`, Liger's kernel
(the body of liger_kernel.ops.rms_norm._rms_norm_forward_kernel in its Gemma casting mode, with
the 16-byte divisibility Triton's launcher gives aligned arguments) is compiled by Triton for
sm_90, and both are assembled by the ptxas of Triton's wheel and disassembled by its cuobjdump.
Prints, for each kernel, the instructions before its first load of x, where its loads of the
weight and its stores sit, the longest chain of dependent FFMAs in the per-thread sum of squares,
and the instruction count.
  python3 -m venv /tmp/tv && /tmp/tv/bin/pip install triton==3.6.0
  /tmp/tv/bin/python scripts/decode_sass.py --normjit build/tools/normjit [--hidden 4096]
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


@triton.jit
def liger_rms_forward(Y_ptr, Y_row_stride, X_ptr, X_row_stride, W_ptr, RSTD_ptr, n_cols, eps,
                      offset, BLOCK_SIZE: tl.constexpr):
    # liger_kernel 0.8.5's _rms_norm_forward_kernel, casting mode "gemma", with a weight.
    row_idx = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    X_row = tl.load(X_ptr + row_idx * X_row_stride + col_offsets, mask=mask, other=0)
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0)
    X_row_dtype = X_row.dtype
    W_row = W_row.to(tl.float32)
    X_row = X_row.to(tl.float32)
    mean_square = tl.sum(X_row * X_row, axis=0) / n_cols
    rstd = tl.math.rsqrt(mean_square + eps.to(tl.float32))
    tl.store(RSTD_ptr + row_idx, rstd)
    Y_row = X_row * rstd * (offset.to(tl.float32) + W_row)
    tl.store(Y_ptr + row_idx * Y_row_stride + col_offsets, Y_row.to(X_row_dtype), mask=mask)


def nvidia_bin(tool):
    d = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    return os.path.join(d, tool)


def assemble(ptx, tmp, name):
    """Assembles NVRTC's PTX for sm_90 with the ptxas of Triton's wheel; returns the cubin's
    path. That ptxas may be older than the PTX ISA NVRTC writes; nothing the kernels use needs
    more than what it reads, so the version line is lowered to its own."""
    ptxas = nvidia_bin("ptxas")
    have = re.search(r"current version is '([\d.]+)'", subprocess.run(
        [ptxas, "-arch=sm_90", "-"], input=".version 99.0\n", capture_output=True,
        text=True).stderr)
    if have:
        ptx = re.sub(r"^\.version [\d.]+", f".version {have.group(1)}", ptx, flags=re.M)
    with open(os.path.join(tmp, name + ".ptx"), "w") as f:
        f.write(ptx)
    cubin = os.path.join(tmp, name + ".cubin")
    subprocess.run([ptxas, "-arch=sm_90", "-O3", os.path.join(tmp, name + ".ptx"), "-o", cubin],
                   check=True)
    return cubin


def sass_of(cubin):
    out = subprocess.run([nvidia_bin("cuobjdump"), "-sass", cubin], check=True,
                         capture_output=True, text=True).stdout
    return [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", out)]


def longest_ffma_chain(sass):
    # Registers written by an FFMA, and the chain length that ends there.
    depth, best = {}, 0
    for ins in sass:
        m = re.match(r"(?:@!?P\d\s+)?FFMA\s+(R\d+),\s*(R\d+),\s*(R\d+),\s*(R\d+)", ins)
        if not m:
            continue
        dst, *srcs = m.groups()
        d = 1 + max(depth.get(s, 0) for s in srcs)
        depth[dst] = d
        best = max(best, d)
    return best


def report(name, sass, x_base_loads):
    loads = [i for i, s in enumerate(sass) if "LDG" in s]
    stores = [i for i, s in enumerate(sass) if "STG" in s]
    first_x = loads[0]
    weight = loads[x_base_loads:]
    print(f"{name}: {len(sass)} instructions; first load of x at instruction {first_x}; "
          f"loads of x at {loads[:x_base_loads]}, of the weight at {weight}; stores at {stores}; "
          f"longest FFMA chain {longest_ffma_chain(sass)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--normjit", required=True, help="the normjit CLI")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--list", action="store_true",
                    help="also print both kernels' instructions")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="decode-sass-")
    ptxas = nvidia_bin("ptxas")
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    print("ptxas:", version.strip().splitlines()[-1])

    spec = [a.normjit, "dump", "--op", "rmsnorm", "--shape", f"1,{a.hidden}", "--dtype", "bf16",
            "--normalized-dims", "1", "--affine", "weight", "--eps", "1e-6", "--arch", "sm_90"]
    ptx = subprocess.run(spec + ["--emit", "ptx"], check=True, capture_output=True,
                         text=True).stdout
    plan = subprocess.run(spec + ["--emit", "plan"], check=True, capture_output=True,
                          text=True).stdout
    x_loads_nj = int(re.search(r"vectors per thread: (\d+)", plan).group(1))
    nj = sass_of(assemble(ptx, tmp, "normjit"))

    block = 1 << (a.hidden - 1).bit_length()
    warps = 4 if block < 2048 else 8 if block < 8192 else 16 if block < 32768 else 32
    sig = {"Y_ptr": "*bf16", "Y_row_stride": "i32", "X_ptr": "*bf16", "X_row_stride": "i32",
           "W_ptr": "*bf16", "RSTD_ptr": "*fp32", "n_cols": "i32", "eps": "fp32",
           "offset": "fp32", "BLOCK_SIZE": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(7)}
    kernel = triton.compile(ASTSource(liger_rms_forward, sig, {"BLOCK_SIZE": block}, attrs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    with open(os.path.join(tmp, "liger.cubin"), "wb") as f:
        f.write(kernel.asm["cubin"])
    lg = sass_of(os.path.join(tmp, "liger.cubin"))

    vec_bytes = 16
    print(f"[1, {a.hidden}] bf16 RMSNorm with a weight, sm_90")
    report("normjit", nj, x_loads_nj)
    if a.list:
        print_listing(nj)
    report(f"Liger ({warps} warps, BLOCK_SIZE {block})", lg,
           max(1, a.hidden * 2 // vec_bytes // (32 * warps)))
    if a.list:
        print_listing(lg)
    return 0


def print_listing(sass):
    for i, ins in enumerate(sass):
        print(f"  {i:4d}  {ins}")


if __name__ == "__main__":
    sys.exit(main())
