#!/usr/bin/env python3
"""Which rows of the performance tables had a copy whose half was not whole 4 KiB before
own_copy rounded it (4026e8a; session 75): those copies took a fixed time longer on the H100
(scripts/experiments/copy_sizes.py), so the rows' `% of copy` read high until they are rerun.
For each table (the forward tables of compare_torch.py, the variants, the vision rows, the
backward), the rows of its default problem list: how many there are and how many are affected,
and their names with --names.
  python3 scripts/experiments/copy_remainders.py [--names]
No GPU, no torch.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import bench_backward as bb  # noqa: E402
import bench_variants as bv  # noqa: E402
import bench_vision as bvi  # noqa: E402
import compare_torch as ct  # noqa: E402


def main() -> int:
    names = "--names" in sys.argv[1:]
    tables = {
        "forward (compare_torch.py)": [(f"{p.name} {p.dtype}", p.bytes_moved)
                                       for p in ct.default_problems()],
        "variants (bench_variants.py)": [
            (f"{c.variant.key} t{c.tokens} h{c.hidden}",
             c.variant.bytes_moved(c.tokens, c.hidden))
            for g in bv.grid(list(bv.VARIANTS), False) for c in g],
        "vision (bench_vision.py)": [(f"{c.name} {c.dtype}", c.bytes_moved)
                                     for c in bvi.default_cases()],
        "backward (bench_backward.py)": [(f"{p.name} {p.dtype}", bb.backward_bytes(p))
                                         for p in bb.default_problems()],
    }
    for title, rows in tables.items():
        hit = [n for n, b in rows if ct.copy_rounded(b)]
        print(f"{title}: {len(hit)} of {len(rows)} rows")
        if names:
            for n in hit:
                print(f"  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
