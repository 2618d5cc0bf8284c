#!/usr/bin/env python3
"""What a forward kernel costs in machine code (no GPU needed): instructions, MUFU operations.

For each spec text (as `normjit dump --spec` takes it), `normjit dump --emit ptx` assembled by
ptxas for sm_90 and disassembled by cuobjdump (the CUDA toolkit's, or the PyPI wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm: pip download --no-deps, unzip, nvdisasm on
PATH). Prints the registers and spill stores ptxas reports, the SASS instructions, the MUFU
operations (and how many of them are predicated) and the branch and convergence instructions
(BRA, BSSY, BSYNC); with --positions also where the 16-byte global loads (LDG.E.128), all
global loads, bulk L2 prefetches (UBLKPF), block barriers (BAR), shuffles (SHFL), shared-memory
stores (STS), exits and 16-byte stores (STG.E.128) sit, as instruction indices (from 0), and
how many of the global loads follow the first shuffle (loads ptxas sank into the reduction) and
the first 16-byte store (loads kept behind stores that may alias them). The environment passes
through to normjit, so an experiment's knobs
(scripts/experiments/*.patch) apply. A ptxas older than the PTX ISA NVRTC writes (e.g. the one
in Triton's wheel) gets the PTX's version line lowered to its own. Used for
docs/performance-notes.md, "GroupNorm -> GELU: what erff costs in the machine code", "The
forward rows' L2 prefetch" and "The parameters' loads above the reduction":

  python3 scripts/sass_counts.py --normjit build-gpu/tools/normjit --cuobjdump PATH \\
      --spec "op=groupnorm shape=1,256,512,512 dtype=f16 groups=32 affine=both activation=gelu"
  NJX_PF_DEP=1 python3 scripts/sass_counts.py --normjit .devcarry/pfall/tools/normjit \\
      --ptxas TRITON/backends/nvidia/bin/ptxas --cuobjdump TRITON/backends/nvidia/bin/cuobjdump \\
      --positions --spec "op=rmsnorm shape=4096,8192 dtype=bf16 normalized_dims=1 affine=weight"
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_loads import run  # noqa: E402  (the same subprocess helper)

import tempfile  # noqa: E402


def counts(a, spec):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.dirname(a.normjit)) or ".")
    ptx = run([a.normjit, "dump", "--spec", spec, "--arch", a.arch, "--emit", "ptx"],
              env=env).stdout
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        have = re.search(r"current version is '([\d.]+)'", subprocess.run(
            [a.ptxas, "-arch=sm_90", "-"], input=".version 99.0\n", capture_output=True,
            text=True).stderr)
        if have:
            ptx = re.sub(r"^\.version [\d.]+", f".version {have.group(1)}", ptx, flags=re.M)
        with open(ptx_path, "w") as f:
            f.write(ptx)
        info = run([a.ptxas, "-arch=sm_90", "-O3", "-v", "-o", cubin, ptx_path]).stderr
        sass = run([a.cuobjdump, "-sass", cubin]).stdout
    ops = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T]\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops.append((m.group(1) is not None, m.group(2)))
    registers = re.search(r"Used (\d+) registers", info)
    spills = re.search(r"(\d+) bytes spill stores", info)
    mufu = [pred for pred, op in ops if op.startswith("MUFU")]
    branches = sum(op.split(".")[0] in ("BRA", "BSSY", "BSYNC") for _, op in ops)
    text = (f"{registers.group(1) if registers else '?'} registers, "
            f"{spills.group(1) if spills else '?'} bytes spilled, {len(ops)} instructions, "
            f"{len(mufu)} MUFU ({sum(mufu)} predicated), {branches} BRA/BSSY/BSYNC")
    if a.positions:
        at = {}
        for name, prefix in (("LDG.E.128", "LDG.E.128"), ("LDG (any width)", "LDG"),
                             ("UBLKPF", "UBLKPF"), ("BAR", "BAR."), ("SHFL", "SHFL"),
                             ("STS", "STS"), ("EXIT", "EXIT"), ("STG.E.128", "STG.E.128")):
            at[name] = [i for i, (_, op) in enumerate(ops) if op.startswith(prefix)]
            text += f"\n  {name} at {at[name]}"
        loads = at["LDG (any width)"]
        for what, first in (("shuffle", "SHFL"), ("16-byte store", "STG.E.128")):
            if at[first]:
                late = sum(i > at[first][0] for i in loads)
                text += f"\n  global loads after the first {what}: {late} of {len(loads)}"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--normjit", required=True, help="tools/normjit of a build folder")
    ap.add_argument("--ptxas", default="/usr/local/cuda/bin/ptxas")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--spec", action="append", default=[], help="a spec text; repeatable")
    ap.add_argument("--specs", help="a file of spec texts, one a line ('#' lines skipped), as "
                                    "normjit bench --specs reads")
    ap.add_argument("--arch", default="sm_90", help="the plan's target (normjit dump --arch)")
    ap.add_argument("--positions", action="store_true",
                    help="also the instruction indices of the global loads (16-byte and any), "
                         "bulk prefetches, barriers, shuffles, shared stores, exits and 16-byte "
                         "stores, and how many global loads follow the first shuffle and the first "
                         "16-byte store")
    a = ap.parse_args()
    specs = list(a.spec)
    if a.specs:
        with open(a.specs) as f:
            specs += [line.strip() for line in f if line.strip() and not line.startswith("#")]
    if not specs:
        ap.error("give --spec or --specs")
    for spec in specs:
        print(f"{spec}: {counts(a, spec)}")


if __name__ == "__main__":
    main()
