#!/usr/bin/env python3
"""The metrics of an `ncu --csv` file (one row per kernel launch and metric), as one block per
launch: its kernel name, grid and block, then each metric's value. Lines before ncu's CSV header
(the profiled program's own output) are skipped.
  python3 scripts/ncu_table.py FILE.csv
"""
import csv
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        with open(argv[1], newline="") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"ncu_table: cannot read {argv[1]}: {e.strerror}", file=sys.stderr)
        return 2
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        print(f"ncu_table: {argv[1]} has no ncu CSV header (did ncu profile a kernel?)",
              file=sys.stderr)
        return 1
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    col = {name: head.index(name) for name in
           ("ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Unit",
            "Metric Value")}
    current = None
    for row in rows[1:]:
        if len(row) < len(head):
            continue
        if row[col["ID"]] != current:
            current = row[col["ID"]]
            print(f"[{current}] {row[col['Kernel Name']]}  grid {row[col['Grid Size']]}"
                  f"  block {row[col['Block Size']]}")
        print(f"    {row[col['Metric Name']]:55s} {row[col['Metric Value']]:>18s}"
              f" {row[col['Metric Unit']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
