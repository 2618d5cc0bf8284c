#!/usr/bin/env python3
"""How well the GroupNorm backward's waves fill the GPU, from `normjit dump` alone (no GPU).

For each GroupNorm backward spec of a spec list (scripts/specs/*.txt; other lines are skipped),
asks the plan (`--emit plan`: rows per wave, units per row) and the compiled kernel (`--emit
resources`: registers a thread) for the given target, and prints, per spec:

  slots      CTAs of 256 threads the device holds at once: SMs x min(8, 65536 // (registers x
             256)) (registers rounded up to ptxas's granule of 8), x the units a CTA runs at once
  units      units of one wave: min(rows per wave, N x G) x units per row
  rounds     ceil(units / slots): a persistent CTA takes its units in turn between two barriers
  filled     units / (rounds x slots): the share of the slots busy in a wave's rounds

A wave whose units exceed the slots by a little (two rounds, the second nearly empty) takes
about two units' time for little more than one round's work.

  python3 scripts/wave_rounds.py --specs scripts/specs/groupnorm-backward.txt \\
      --build build-gpu --arch sm_90:132:4814
"""
import argparse
import math
import os
import re
import subprocess
import sys


def dump(tool, env, spec, arch, emit):
    args = [tool, "dump", "--op", "groupnorm", "--shape", spec["shape"], "--groups", spec["groups"],
            "--dtype", spec.get("dtype", "f32"), "--affine", spec.get("affine", "both"),
            "--backward", "--arch", arch, "--emit", emit]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"wave_rounds: {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def field(pattern, text, what, spec_line):
    match = re.search(pattern, text)
    if not match:
        sys.exit(f"wave_rounds: no {what} in the plan of {spec_line!r}")
    return int(match.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", required=True, help="a spec list (one `op=... key=value` per line)")
    ap.add_argument("--build", default="build-gpu", help="build folder with tools/normjit")
    ap.add_argument("--arch", default="sm_90:132:4814",
                    help="the target, as `normjit dump --arch` takes it (default: an H200)")
    a = ap.parse_args()
    tool = os.path.join(a.build, "tools", "normjit")
    if not os.access(tool, os.X_OK):
        sys.exit(f"wave_rounds: no {tool} (--build names a build folder)")
    env = dict(os.environ, LD_LIBRARY_PATH=a.build)
    sm_count = int(a.arch.split(":")[1]) if a.arch.count(":") >= 1 else 132
    print(f"target {a.arch} ({sm_count} SMs); `python3 scripts/wave_rounds.py --specs {a.specs} "
          f"--arch {a.arch}`\n")
    print("| spec (backward) | plan | registers | slots | rows a wave | units a row | units | "
          "rounds | filled |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    try:
        with open(a.specs) as f:
            lines = [line.strip() for line in f if line.startswith("op=groupnorm")]
    except OSError as e:
        sys.exit(f"wave_rounds: --specs {a.specs}: {e.strerror}")
    if not lines:
        sys.exit(f"wave_rounds: --specs {a.specs}: no `op=groupnorm ... backward=true` line")
    for line in lines:
        spec = dict(token.split("=", 1) for token in line.split())
        plan = dump(tool, env, spec, a.arch, "plan")
        resources = dump(tool, env, spec, a.arch, "resources")
        registers = field(r"registers: (\d+)", resources, "register count", line)
        wave_rows = field(r"rows per wave: (\d+)", plan, "rows per wave", line)
        row_units = field(r"(\d+) per group of", plan, "units per row", line)
        block = re.search(r"block: (\d+)x(\d+)", plan)
        units_per_cta = int(block.group(2)) if block else 1
        granule = math.ceil(max(registers, 1) / 8) * 8
        per_sm = min(8, 65536 // (granule * 256))
        slots = sm_count * per_sm * units_per_cta
        shape = [int(x) for x in spec["shape"].split(",")]
        rows = min(wave_rows, shape[0] * int(spec["groups"]))
        units = rows * row_units
        rounds = math.ceil(units / slots)
        kind = "streamed" if "streamed" in plan else "L2 waves"
        print(f"| groupnorm {spec['shape']} {spec.get('dtype', 'f32')} G={spec['groups']} "
              f"| {kind} | "
              f"{registers} | {slots} | {rows} | {row_units} | {units} | {rounds} | "
              f"{units / (rounds * slots):.0%} |")


if __name__ == "__main__":
    main()
