#!/usr/bin/env python3
"""Reads the lines row-backward-clock.patch's kernels print (NJX_BWD_CLOCK=1: one per CTA,
"njx L=launch b=block sm=SM t=t0,t1,t2,t3 c=c01,c12,c23"; t in ns of the global timer: the CTA's
start, its partial stored (before the grid barrier), after the barrier, after the final sum; c
the SM's cycles of the three spans) and prints, per launch, in µs from the first CTA's start:
  starts      the spread of the CTAs' starts (last - first)
  arrivals    the first and the last CTA's arrival at the barrier
  released    the first and the last departure after the last arrival
  ends        the last CTA's end (after its share of the final sum)
  rows        the median and the largest time from a CTA's start to its arrival
  late        of the 10% of CTAs that arrived last, how many were among the 10% that started last
and the medians of those over the launches after the first (the first pays the module's load).
  python3 scripts/experiments/row-backward-clock.py FILE [FILE ...]
"""
import re
import statistics
import sys

LINE = re.compile(r"njx L=(\d+) b=(\d+) sm=(\d+) t=(\d+),(\d+),(\d+),(\d+) c=(\d+),(\d+),(\d+)")


def launches(text):
    by = {}
    for m in LINE.finditer(text):
        launch, block, sm, t0, t1, t2, t3 = (int(v) for v in m.groups()[:7])
        by.setdefault(launch, []).append((block, sm, t0, t1, t2, t3))
    return by


def summary(ctas):
    first = min(c[2] for c in ctas)
    us = lambda t: (t - first) / 1000.0  # noqa: E731
    starts = sorted(c[2] for c in ctas)
    arrivals = sorted(c[3] for c in ctas)
    departures = sorted(c[4] for c in ctas)
    ends = sorted(c[5] for c in ctas)
    spans = sorted((c[3] - c[2]) / 1000.0 for c in ctas)
    tenth = max(1, len(ctas) // 10)
    late_start = {c[0] for c in sorted(ctas, key=lambda c: c[2])[-tenth:]}
    late_arrival = {c[0] for c in sorted(ctas, key=lambda c: c[3])[-tenth:]}
    return {
        "ctas": len(ctas),
        "starts": us(starts[-1]),
        "first arrival": us(arrivals[0]),
        "last arrival": us(arrivals[-1]),
        "first release": us(departures[0]),
        "last release": us(departures[-1]),
        "last end": us(ends[-1]),
        "rows median": statistics.median(spans),
        "rows max": spans[-1],
        "late": f"{len(late_start & late_arrival)} of {tenth}",
    }


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    text = ""
    for path in argv[1:]:
        try:
            with open(path) as f:
                text += f.read()
        except OSError as e:
            print(f"row-backward-clock: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 2
    by = launches(text)
    if not by:
        print("row-backward-clock: no 'njx L=...' lines (was NJX_BWD_CLOCK=1 set, and the "
              "patch's build used?)", file=sys.stderr)
        return 1
    rows = [(launch, summary(ctas)) for launch, ctas in sorted(by.items())]
    keys = list(rows[0][1])
    print("| launch | " + " | ".join(keys) + " |")
    print("|---:|" + "---:|" * len(keys))
    for launch, s in rows:
        print(f"| {launch} | " + " | ".join(
            f"{v:.2f}" if isinstance(v, float) else str(v) for v in s.values()) + " |")
    later = [s for _, s in rows[1:]] or [rows[0][1]]
    print("| median of launches after the first | " + " | ".join(
        f"{statistics.median(s[k] for s in later):.2f}" if isinstance(later[0][k], float)
        else "" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
