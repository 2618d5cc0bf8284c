#!/usr/bin/env python3
"""One torch.compile call of a variants-table expression, for Nsight Compute (GPU machine).
Compiles tools/bench_variants.py's expression for (variant, tokens, hidden) in bf16, warms it up
(autotuning included), then makes exactly one call between cudaProfilerStart and
cudaProfilerStop, so that `ncu --profile-from-start off` measures that call's kernels alone:
  ncu --clock-control none --profile-from-start off --metrics ... \\
      python3 scripts/experiments/ncu_compile_kernel.py add-rmsnorm 1024 4096
Variants: add-rmsnorm (pt_add_rmsnorm) and add-layernorm (pt_add_layernorm), y and h new tensors
as in the table's compile column. Times nothing.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import bench_variants as bv  # noqa: E402

bv.torch, bv.F = torch, F


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[1] not in ("add-rmsnorm", "add-layernorm"):
        print(__doc__, file=sys.stderr)
        return 2
    variant, tokens, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    r = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    fn = torch.compile(bv.pt_add_rmsnorm if variant == "add-rmsnorm" else bv.pt_add_layernorm,
                       dynamic=False)
    args = (x, r, w) if variant == "add-rmsnorm" else (x, r, w, b)
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn(*args)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"ncu_compile_kernel: one call of compiled {variant} [{tokens}, {hidden}] bf16 profiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
