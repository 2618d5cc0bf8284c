#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's source page (`ncu -i REP --page source --csv
--print-source sass`, as scripts/ncu_source.sh writes it): the warp-stall samples of each SASS
instruction summed by region of the machine code, and the instructions with the most samples,
each with its leading stall reasons.

Regions: a new one starts at each instruction that matches --split (a regex; by default block
and memory barriers, global atomics and exits, which cut a row kernel into its row loop, its
team reductions, its grid barrier and its final sum); a region is named by its first
instruction and its index in the listing. Samples are proportional to warp time: a share of the
samples is the share of the warps' time spent there, issuing or stalled.
  python3 scripts/sass_stalls.py ncu-out/source-1.csv [--top 12] [--split REGEX]
"""
import argparse
import csv
from collections import Counter
import re
import sys

DEFAULT_SPLIT = r"BAR\.SYNC|MEMBAR|ATOMG|EXIT"


def load(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError(f"{path}: no source-page header (a column named Address)")
    kernel = ""
    for line in lines[:start]:
        if line.startswith('"Kernel Name"'):
            kernel = next(csv.reader([line]))[1]
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    try:
        src, samples = head.index("Source"), head.index("Warp Stall Sampling (All Samples)")
    except ValueError as e:
        raise ValueError(f"{path}: {e} (is it ncu's source page with --print-source sass?)")
    reasons = [(i, name) for i, name in enumerate(head)
               if name.startswith("stall_") and not name.endswith("(Not Issued)")]
    out = []
    for r in rows[1:]:
        if len(r) < len(head):
            continue
        n = int(r[samples] or 0)
        why = {name[len("stall_"):]: int(r[i] or 0) for i, name in reasons if (r[i] or "0") != "0"}
        out.append((r[src].strip(), n, why))
    return kernel, out


def leading(why, total, k=3):
    top = sorted(why.items(), key=lambda kv: -kv[1])[:k]
    return (", ".join(f"{name} {count * 100 / total:.0f}%" for name, count in top if count)
            if total else "")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu's source page as CSV (SASS)")
    ap.add_argument("--top", type=int, default=12, help="instructions listed (default 12)")
    ap.add_argument("--split", default=DEFAULT_SPLIT,
                    help=f"regex of the instructions that start a region (default {DEFAULT_SPLIT})")
    a = ap.parse_args(argv[1:])
    try:
        kernel, rows = load(a.csv)
        split = re.compile(a.split)
    except (OSError, ValueError, re.error) as e:
        print(f"sass_stalls: {e}", file=sys.stderr)
        return 2
    total = sum(n for _, n, _ in rows)
    if total == 0:
        print(f"sass_stalls: {a.csv}: no warp-stall samples", file=sys.stderr)
        return 1
    print(f"{kernel}: {total} samples over {len(rows)} instructions")
    overall = Counter()
    for _, _, why in rows:
        overall.update(why)
    print(f"stall reasons over the kernel: {leading(overall, sum(overall.values()), k=6)}")
    print("\nregions (a new one at each instruction matching the split regex):")
    print("| from | first instruction | samples | share | leading stall reasons |")
    print("|---:|---|---:|---:|---|")
    regions = []
    for i, (text, n, why) in enumerate(rows):
        if not regions or split.search(text):
            regions.append([i, text, 0, Counter()])
        regions[-1][2] += n
        regions[-1][3].update(why)
    for first, text, n, why in regions:
        if n:
            print(f"| {first} | `{text[:48]}` | {n} | {n * 100 / total:.1f}% | "
                  f"{leading(why, sum(why.values()))} |")
    print(f"\nthe {a.top} instructions with the most samples:")
    print("| index | instruction | samples | share | leading stall reasons |")
    print("|---:|---|---:|---:|---|")
    ranked = sorted(range(len(rows)), key=lambda i: -rows[i][1])[:a.top]
    for i in ranked:
        text, n, why = rows[i]
        print(f"| {i} | `{text[:48]}` | {n} | {n * 100 / total:.1f}% | "
              f"{leading(why, sum(why.values()))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
