#!/usr/bin/env python3
"""Where a GroupNorm backward kernel's loads sit in its machine code (no GPU needed).

`normjit dump --emit ptx` of the spec, assembled by ptxas for sm_90 and disassembled by
cuobjdump (the CUDA toolkit's, or the PyPI wheel nvidia-cuda-cuobjdump's: pip download
--no-deps nvidia-cuda-cuobjdump, then unzip it). Prints the registers and spill stores ptxas
reports, the instruction count, and two positions (docs/performance-notes.md, 2026-11-28):
  step 1   the index of the last global load before the first team reduction (SHFL), of the
           instructions before it: the later, the less a unit's loads are issued together
  step 2   the 16-byte loads after the first grid barrier (ATOMG) before the first 16-byte
           store: the chunks of x and dy in flight when dx starts going out

  python3 scripts/sass_loads.py --normjit build-gpu/tools/normjit --cuobjdump PATH \\
      --shape 1,128,255,255 --groups 32 --dtype f16 [--arch sm_90:132:4814]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def run(args, **kw):
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"sass_loads: {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--normjit", required=True, help="tools/normjit of a build folder")
    ap.add_argument("--ptxas", default="/usr/local/cuda/bin/ptxas")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--groups", required=True)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--affine", default="both")
    ap.add_argument("--arch", default="sm_90:132:4814",
                    help="the plan's target (normjit dump --arch)")
    a = ap.parse_args()
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.dirname(a.normjit)) or ".")
    ptx = run([a.normjit, "dump", "--op", "groupnorm", "--shape", a.shape, "--groups", a.groups,
               "--dtype", a.dtype, "--affine", a.affine, "--backward", "--arch", a.arch,
               "--emit", "ptx"], env=env).stdout
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(ptx_path, "w") as f:
            f.write(ptx)
        info = run([a.ptxas, "-arch=sm_90", "-v", "-o", cubin, ptx_path]).stderr
        sass = run([a.cuobjdump, "-sass", cubin]).stdout
    registers = re.search(r"Used (\d+) registers", info)
    spills = re.search(r"(\d+) bytes spill stores", info)
    ops = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops.append(m.group(1))
    first_shfl = next((i for i, op in enumerate(ops) if op.startswith("SHFL")), len(ops))
    loads = [i for i in range(first_shfl) if ops[i].startswith("LDG")]
    barrier = next((i for i, op in enumerate(ops) if op.startswith("ATOMG")), None)
    ahead = None
    if barrier is not None:
        ahead = 0
        for op in ops[barrier:]:
            if op.startswith("STG.E.128"):
                break
            ahead += op.startswith("LDG.E.128")
    print(f"groupnorm {a.shape} {a.dtype} G={a.groups} backward, {a.arch}: "
          f"{registers.group(1) if registers else '?'} registers, "
          f"{spills.group(1) if spills else '?'} bytes spilled, {len(ops)} instructions; "
          f"step 1: last load at {loads[-1] + 1 if loads else '-'} of {first_shfl}; "
          f"step 2: {ahead if ahead is not None else '-'} 16-byte loads before the first "
          "16-byte store")


if __name__ == "__main__":
    main()
