#!/usr/bin/env python3
"""The device-to-device copy's time against the remainder of its size (session 75).

The backward table's copies of 12593152 bytes a half (4 KiB x 3074.5) took 13.3 µs on the H100
and those of 12603392 (4 KiB x 3077) 10.3 µs. This times compare_torch's copy (uint8 `copy_`,
the source rotated over enough sets to pass 4x a 50 MiB L2, time_cuda's method) for halves of
BASE + r bytes, r over a range of remainders: multiples of 4 KiB (the sizes own_copy rounds to
since 4026e8a) and others.
  python3 scripts/experiments/copy_sizes.py [BASE ...]   (default: 12 MiB, 24 MiB, 48 MiB)
prints `half BYTES rem R: X µs (min Y)` lines.
"""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import compare_torch as ct  # noqa: E402


def main() -> int:
    import torch
    bases = [int(a) for a in sys.argv[1:]] or [12 << 20, 24 << 20, 48 << 20]
    for base in bases:
        sets = max(1, -(-4 * (50 << 20) // (2 * base)))
        for rem in (0, 256, 1024, 2048, 3072, 4096, 6144, 8192, 10240, 16384, 65536):
            half = base + rem
            src = [torch.empty(half, dtype=torch.uint8, device="cuda").fill_(7)
                   for _ in range(sets)]
            dst = torch.empty_like(src[0])
            times = ct.time_cuda(lambda i: dst.copy_(src[i % sets]), 50, 5, 1.0, 100.0)
            print(f"half {half:10d} rem {rem:6d} (mod 4096: {half % 4096:4d}): "
                  f"{statistics.median(times) * 1e3:8.2f} µs (min {min(times) * 1e3:8.2f})",
                  flush=True)
            src = dst = None
            ct.free_device_memory()
    return 0


if __name__ == "__main__":
    sys.exit(main())
