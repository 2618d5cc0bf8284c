#!/usr/bin/env python3
"""A/B timing of normjit builds (or settings) on the GPU machine, for docs/performance-notes.md.

Each variant is a build folder holding tools/normjit and its libnormjit.so.0 (carried to the GPU
machine), optionally with environment variables (a throwaway build's switches). Every variant
times the same spec list with `normjit bench --specs FILE --json`, in turn, for --rounds rounds
(round 1 of every variant, then round 2, ...), each variant with its own cache folder. Prints a
Markdown table of medians in µs, one row per spec, the rounds of a variant as `a / b`, each
variant after the first with its time over the first's in brackets (the mean of its rounds over
the mean of the first's: below 1.00, faster), a last row with the geometric mean of those
ratios over the specs both timed, and writes the JSON of every run to --out.

  python3 scripts/ab_bench.py --specs scripts/specs/row-backward.txt \\
      --variant base=build-base --variant new=build-gpu --variant nopf=build-gpu:NJ_X=0
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys


def parse_variant(text):
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME=BUILD[:VAR=VALUE,...]")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise argparse.ArgumentTypeError(
            f"--variant {text!r}: the name {name!r} takes letters, digits, '.', '_' and '-' only "
            "(it names the variant's JSON files and cache folder)")
    build, _, env_text = rest.partition(":")
    env = {}
    for item in filter(None, env_text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--variant {text!r}: {item!r} is not VAR=VALUE")
        env[key] = value
    return name, build, env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", required=True, help="spec list, one spec text per line")
    ap.add_argument("--variant", action="append", type=parse_variant, required=True,
                    help="NAME=BUILD[:VAR=VALUE,...]: a build folder and its environment")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of every variant (default 2)")
    ap.add_argument("--repeat", type=int, default=20, help="normjit bench --repeat (default 20)")
    ap.add_argument("--out", default=os.environ.get("OUT", "ab-out"), help="folder for the JSON")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    medians = {}  # spec -> {(variant, round): µs}
    specs = []
    for r in range(1, a.rounds + 1):
        for name, build, env in a.variant:
            tool = os.path.join(build, "tools", "normjit")
            run_env = dict(os.environ, **env)
            run_env["LD_LIBRARY_PATH"] = build
            run_env["NORMJIT_CACHE_DIR"] = os.path.join("/tmp", f"ab-cache-{name}")
            cmd = [tool, "bench", "--specs", a.specs, "--repeat", str(a.repeat), "--json"]
            print(f"round {r}: {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, env=run_env, capture_output=True, text=True)
            with open(os.path.join(a.out, f"{name}.r{r}.json"), "w") as f:
                f.write(done.stdout)
            if done.returncode != 0:
                print(f"{name} round {r}: exit {done.returncode}: {done.stderr.strip()[-400:]}",
                      file=sys.stderr)
            try:
                results = json.loads(done.stdout)["results"]
            except (json.JSONDecodeError, KeyError):
                continue
            for res in results:
                spec = res["spec"]
                if spec not in medians:
                    medians[spec] = {}
                    specs.append(spec)
                if "median_ms" in res:
                    medians[spec][(name, r)] = 1000.0 * res["median_ms"]
    names = [v[0] for v in a.variant]
    print(table(specs, names, medians, a.rounds))


def table(specs, names, medians, rounds):
    """The Markdown table: rounds a cell, ratios to the first variant, their geometric means."""
    def mean_of(spec, name):
        values = [medians[spec].get((name, r)) for r in range(1, rounds + 1)]
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    lines = ["| spec | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    logs = {name: [] for name in names[1:]}
    for spec in specs:
        base = mean_of(spec, names[0])
        cells = []
        for i, name in enumerate(names):
            values = [medians[spec].get((name, r)) for r in range(1, rounds + 1)]
            cell = " / ".join("n/a" if v is None else f"{v:.2f}" for v in values)
            mean = mean_of(spec, name)
            if i > 0 and base and mean:
                cell += f" ({mean / base:.2f})"
                logs[name].append(math.log(mean / base))
            cells.append(cell)
        lines.append(f"| `{spec}` | " + " | ".join(cells) + " |")
    if len(names) > 1:
        means = [f"{math.exp(sum(v) / len(v)):.3f} over {len(v)}" if v else "n/a"
                 for v in logs.values()]
        lines.append(f"| geometric mean of the ratios to {names[0]} | | " + " | ".join(means) +
                     " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
