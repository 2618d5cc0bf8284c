#!/usr/bin/env python3
"""What torch.compile generates for a variant's PyTorch expression, on the GPU machine.

The variants table (tools/bench_variants.py) times normjit against torch.compile of the same
expression; this script shows the kernels that compile runs for one (variant, tokens, hidden):
their Triton source, the launch configuration Inductor's autotuner chose (XBLOCK, R0_BLOCK,
num_warps, num_stages), registers and spills where the Triton launcher reports them, and their
PTX. It times nothing.

    python3 scripts/inductor_code.py --variant add-rmsnorm --tokens 1024 --hidden 4096 --out DIR

Writes DIR/<variant>-t<tokens>-h<hidden>-<dtype>.py (the generated module) and one .ptx per kernel,
and prints one line per kernel. Needs PyTorch with CUDA and Triton.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

VARIANTS = ("add-rmsnorm", "add-layernorm", "rmsnorm", "layernorm")


DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def inputs(torch, variant: str, tokens: int, hidden: int, dtype: str):
    gen = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, DTYPES[dtype])
    x = torch.randn(tokens, hidden, device="cuda", dtype=dt, generator=gen)
    r = torch.randn(tokens, hidden, device="cuda", dtype=dt, generator=gen)
    w = torch.randn(hidden, device="cuda", dtype=dt, generator=gen)
    b = torch.randn(hidden, device="cuda", dtype=dt, generator=gen)
    return {"add-rmsnorm": (x, r, w), "add-layernorm": (x, r, w, b), "rmsnorm": (x, w),
            "layernorm": (x, w, b)}[variant]


def expression(bv, variant: str):
    """The variants table's own expressions (bench_variants.py) for add + norm, so that compile
    sees the same code; plain rows as the main table's modules compute them (nn.RMSNorm and
    nn.LayerNorm call these functions)."""
    F = bv.F
    if variant == "add-rmsnorm":
        return bv.pt_add_rmsnorm
    if variant == "add-layernorm":
        return bv.pt_add_layernorm
    if variant == "rmsnorm":
        return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, bv.EPS_RMS)
    return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, bv.EPS_LN)


def autotuners():
    """Every CachingAutotuner of the modules Inductor has loaded in this process."""
    from torch._inductor.codecache import PyCodeCache
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # older layouts
        from torch._inductor.triton_heuristics import CachingAutotuner
    modules = (getattr(PyCodeCache, "modules", None)
               or list(getattr(PyCodeCache, "cache", {}).values()))
    found = {}
    for mod in modules:
        for name, obj in vars(mod).items():
            if isinstance(obj, CachingAutotuner):
                found[name] = obj
    return found


def ptx_of(tuner, launcher) -> dict:
    """The compiled kernel's assembly: where it hangs depends on the PyTorch version (the
    launcher's binary, or the autotuner's compile results)."""
    places = [getattr(launcher, "bin", None), launcher]
    for result in getattr(tuner, "compile_results", None) or []:
        places.append(getattr(result, "kernel", None))
    for place in places:
        asm = getattr(place, "asm", None)
        if isinstance(asm, dict) and "ptx" in asm:
            return asm
    return {}


def describe(name: str, tuner, out: Path, stem: str) -> str:
    launchers = getattr(tuner, "launchers", None) or []
    if not launchers:
        return f"{name}: no launcher compiled"
    la = launchers[0]
    cfg = getattr(la, "config", None)
    kwargs = dict(getattr(cfg, "kwargs", {}) or {})
    fields = [f"{k}={v}" for k, v in sorted(kwargs.items())]
    for attr in ("num_warps", "num_stages"):
        if cfg is not None and hasattr(cfg, attr):
            fields.append(f"{attr}={getattr(cfg, attr)}")
    for attr in ("n_regs", "n_spills", "shared"):
        if hasattr(la, attr):
            fields.append(f"{attr}={getattr(la, attr)}")
    fields.append(f"configs tried={len(getattr(tuner, 'configs', []) or [])}")
    asm = ptx_of(tuner, la)
    if "ptx" in asm:
        path = out / f"{stem}-{name}.ptx"
        path.write_text(asm["ptx"])
        fields.append(f"ptx {path.name}")
    return f"{name}: " + ", ".join(fields)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=VARIANTS, default="add-rmsnorm")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                    help="x's dtype (and the residual's and parameters'; default bf16)")
    ap.add_argument("--out", type=Path, default=Path("inductor-code"),
                    help="folder for the generated module and PTX (created)")
    args = ap.parse_args(argv)
    for name in ("tokens", "hidden"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1 (got {getattr(args, name)})")

    import torch
    import torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code
    if not torch.cuda.is_available():
        print("inductor_code: no CUDA device", file=sys.stderr)
        return 2
    import bench_variants as bv
    bv.torch, bv.F = torch, F

    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.variant}-t{args.tokens}-h{args.hidden}-{args.dtype}"
    torch._dynamo.reset()
    fn = torch.compile(expression(bv, args.variant), dynamic=False)
    _, sources = run_and_get_code(fn, *inputs(torch, args.variant, args.tokens, args.hidden,
                                              args.dtype))
    torch.cuda.synchronize()
    text = "\n\n# ---- next module ----\n\n".join(sources)
    (args.out / f"{stem}.py").write_text(text)
    kernels = sorted(set(re.findall(r"^(triton_\w+) = async_compile\.triton", text, re.M)))
    print(f"{stem}: {len(kernels)} kernel(s) in the generated code ({args.out / (stem + '.py')})")
    tuners = autotuners()
    for name in kernels:
        print("  " + (describe(name, tuners[name], args.out, stem) if name in tuners
                      else f"{name}: its autotuner was not found"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
