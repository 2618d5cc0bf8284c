#!/usr/bin/env python3
"""Summarizes the archives of lib.sh's harness_settings (NAME.tgz or its unpacked folder, several
merged: one device call each): per row (variant, tokens, hidden) and setting, the range of the
medians over the runs, in place (normjit µs) and separate (separate µs, the residual variants),
and the mean of the in-place medians over the first setting's (plan) mean.

    python3 scripts/experiments/settings_table.py A.tgz B.tgz ... [--labels plan,res,resx]
"""
import argparse
import json
import statistics
import sys
import tarfile
from pathlib import Path


def runs_of(path: Path) -> list[tuple[str, dict]]:
    """(label, harness JSON) of each r<round>-<label>.json in an archive or folder."""
    found = []
    if path.is_dir():
        for f in sorted(path.rglob("r*-*.json")):
            found.append((f.stem.split("-", 1)[1], json.loads(f.read_text())))
    else:
        with tarfile.open(path) as tar:
            for m in sorted(tar.getmembers(), key=lambda m: m.name):
                name = Path(m.name)
                if m.isfile() and name.suffix == ".json" and name.stem.startswith("r"):
                    data = json.load(tar.extractfile(m))
                    found.append((name.stem.split("-", 1)[1], data))
    return found


def span(values: list[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archives", nargs="+", type=Path)
    ap.add_argument("--labels", help="settings in this order (default: as first seen)")
    args = ap.parse_args(argv)
    inplace: dict = {}
    separate: dict = {}
    labels: list[str] = []
    for archive in args.archives:
        for label, data in runs_of(archive):
            if label not in labels:
                labels.append(label)
            for r in data["rows"]:
                key = (r["variant"], r["tokens"], r["hidden"], label)
                if r["normjit"].get("us"):
                    inplace.setdefault(key, []).append(r["normjit"]["us"])
                if (r.get("separate") or {}).get("us"):
                    separate.setdefault(key, []).append(r["separate"]["us"])
    if args.labels:
        labels = args.labels.split(",")
    rows = sorted({k[:3] for k in inplace})
    head = ["variant", "tokens", "hidden"] + [f"{lab}, in place" for lab in labels] + [
        f"{lab}, separate" for lab in labels] + [f"{lab} / {labels[0]}" for lab in labels[1:]]
    print("| " + " | ".join(head) + " |")
    print("|---|---:|---:|" + "---|" * (len(head) - 3))
    for row in rows:
        cells = [row[0], str(row[1]), str(row[2])]
        cells += [span(inplace.get(row + (lab,), [])) for lab in labels]
        cells += [span(separate.get(row + (lab,), [])) for lab in labels]
        base = inplace.get(row + (labels[0],))
        for lab in labels[1:]:
            vals = inplace.get(row + (lab,))
            cells.append(f"{statistics.mean(vals) / statistics.mean(base):.3f}"
                         if vals and base else "")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
