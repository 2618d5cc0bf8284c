#!/usr/bin/env python3
"""torch.compile's and Liger-Kernel's LayerNorm forward on bf16 rows [rows, n], three calls
each inside cudaProfilerStart/Stop, for Nsight Compute (docs/performance-notes.md compares
them with normjit's kernel under the same sections). On the GPU machine, Liger on PYTHONPATH:
  ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section Occupancy -c 6 python3 scripts/layernorm_peers.py 6304 1024
"""
import sys

import torch


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: layernorm_peers.py ROWS N", file=sys.stderr)
        return 2
    rows, n = int(sys.argv[1]), int(sys.argv[2])
    dt = torch.bfloat16
    x = torch.randn(rows, n, device="cuda", dtype=dt)
    w = torch.randn(n, device="cuda", dtype=dt)
    b = torch.randn(n, device="cuda", dtype=dt)
    compiled = torch.compile(torch.nn.LayerNorm(n, eps=1e-6).cuda().to(dt), dynamic=False)
    from liger_kernel.ops.layer_norm import layer_norm_forward
    with torch.no_grad():
        for _ in range(3):  # compile and warm up outside the profiled range
            compiled(x)
            layer_norm_forward(x, w, b, 1e-6)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(3):
            compiled(x)
        for _ in range(3):
            layer_norm_forward(x, w, b, 1e-6)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
