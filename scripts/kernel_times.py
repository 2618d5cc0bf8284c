#!/usr/bin/env python3
"""Kernel durations (CUPTI, through torch.profiler) beside event-bracketed times, in the loop
tools/compare_torch.py times: x rotating, each call writing one output (a fresh tensor from
PyTorch's caching allocator for normjit.torch, torch.compile and Liger; one buffer for the
copy), a sleep kernel queued first. Separates a kernel's own time from what the events add
around it. On the GPU machine, with normjit (and Liger-Kernel, optional) importable:
  PYTHONPATH=<site with normjit and liger_kernel> python3 scripts/kernel_times.py out.json
"""
import json
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import normjit.torch as njt

CASES = [("rmsnorm", 1, 4096), ("rmsnorm", 128, 8192), ("rmsnorm", 4096, 4096),
         ("layernorm", 12608, 768), ("layernorm", 4096, 4096)]
CALLS = 30


def implementations(op, hidden, w, b, out):
    eps = 1e-6
    if op == "rmsnorm":
        module = torch.nn.RMSNorm(hidden, eps=eps)
        fns = {"normjit": lambda x: njt.rms_norm(x, (hidden,), w, eps)}
    else:
        module = torch.nn.LayerNorm(hidden, eps=eps)
        fns = {"normjit": lambda x: njt.layer_norm(x, (hidden,), w, b, eps)}
    try:
        if op == "rmsnorm":
            from liger_kernel.ops.rms_norm import rms_norm_forward
            fns["liger"] = lambda x: rms_norm_forward(x, w, eps, 0.0, "gemma", None)[0]
        else:
            from liger_kernel.ops.layer_norm import layer_norm_forward
            fns["liger"] = lambda x: layer_norm_forward(x, w, b, eps)[0]
    except ImportError as e:
        print(f"kernel_times: Liger-Kernel not measured ({e})", file=sys.stderr)
    fns["compile"] = torch.compile(module.cuda().to(w.dtype), dynamic=False)
    fns["copy"] = lambda x: out.copy_(x)
    return fns


def measure(fn, xs):
    n = len(xs)
    for i in range(5):
        fn(xs[i % n])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(int(20e-3 * 2e9))
        for i in range(CALLS):
            starts[i].record()
            fn(xs[i % n])
            ends[i].record()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and "sleep" not in e.name
               and "spin_kernel" not in e.name]
    return {"event_us": statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)),
            "kernel_us": statistics.median(e.device_time for e in kernels) if kernels else None,
            "kernels": sorted({e.name[:80] for e in kernels})}


def main() -> int:
    if not torch.cuda.is_available():
        print("kernel_times: needs a CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    rows = []
    with torch.no_grad():
        for op, tokens, hidden in CASES:
            dt = torch.bfloat16
            sets = max(1, min(64, int(4 * 50e6 // (4 * tokens * hidden)) + 1))
            xs = [torch.randn(tokens, hidden, device="cuda", dtype=dt) for _ in range(sets)]
            w = torch.rand(hidden, device="cuda", dtype=dt) + 0.5
            b = torch.randn(hidden, device="cuda", dtype=dt)
            out = torch.empty_like(xs[0])
            for name, fn in implementations(op, hidden, w, b, out).items():
                row = {"op": op, "tokens": tokens, "hidden": hidden, "impl": name,
                       **measure(fn, xs)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
