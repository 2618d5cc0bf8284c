#!/usr/bin/env python3
"""Runs each seed example's ModelNew against its reference Model on the GPU (the state_dict
of Model loaded into ModelNew), in float32 and bfloat16, against float64:

    python3 examples/run_seeds.py            # the seeds' own shapes (7.5 GB inputs)
    python3 examples/run_seeds.py --small    # the same problems, batch 2
    python3 examples/run_seeds.py --small --only groupnorm

Each seed (rmsnorm_channels.py, layernorm.py, groupnorm.py) runs this for itself too:
python3 examples/groupnorm.py [--small]. Needs a CUDA device.
"""
import argparse
import importlib.util
import math
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SEEDS = ("rmsnorm_channels", "layernorm", "groupnorm")


def main(argv=None, prog=None, seed=None) -> int:
    """seed: run that seed alone (a seed example's own entry point, which has no --only)."""
    description = __doc__ if seed is None else (
        f"Runs the seed example {seed}.py's ModelNew against its reference Model on the GPU,\n"
        "in float32 and bfloat16, against float64 (run_seeds.py runs every seed). Needs a CUDA\n"
        "device.")
    ap = argparse.ArgumentParser(prog=prog, description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="batch 2 instead of the seeds' batch")
    if seed is None:
        ap.add_argument("--only", choices=SEEDS, action="append",
                        help="run this seed (repeatable; default all)")
    args = ap.parse_args(argv)
    if seed is not None:
        args.only = [seed]
    if not torch.cuda.is_available():
        print(f"{ap.prog}: error: no CUDA device (the seeds compare normjit's kernels on the GPU)",
              file=sys.stderr)
        return 1
    failed = 0
    for name in args.only or SEEDS:
        m = load(name)
        if args.small:
            m.batch_size = 2  # get_inputs() reads it: no full-batch input made and sliced
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
            torch.manual_seed(0)
            ref_model = m.Model(*m.get_init_inputs()).cuda()
            with torch.no_grad():
                for p in ref_model.parameters():
                    p.copy_(1 + 0.3 * torch.randn_like(p))
            new = m.ModelNew(*m.get_init_inputs()).cuda()
            new.load_state_dict(ref_model.state_dict())
            (x,) = m.get_inputs()
            x = x.cuda().to(dtype)
            with torch.inference_mode():
                y = new.to(dtype)(x)
                ref = ref_model.double()(x.double())
                err = ((y.double() - ref).norm() / ref.norm()).item()
            ok = math.isfinite(err) and err < tol
            failed += not ok
            print(f"{name:17s} {str(dtype):15s} x {list(x.shape)}: rel. err {err:.2e} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
            del x, y, ref
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
