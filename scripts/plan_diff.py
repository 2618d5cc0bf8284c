#!/usr/bin/env python3
"""Which problems a planner change moves: the plans of two builds side by side, offline.

For every spec of the given lists (one spec text per line, as `normjit bench --specs` reads;
blank lines and lines starting with '#' skipped), runs `normjit dump --emit plan` of build A and
of build B for the same target and prints the specs whose plans differ, with the lines that
differ (strategy, block, vectors, staged, prefetch, why, ...). No GPU needed: --arch names the
target (default sm_90:132:4814, an H200). The spec text is passed as dump's flags, so that a
build older than `dump --spec` works too.

  scripts/plan_diff.py --a build-old --b build-gpu scripts/specs/*.txt
  scripts/plan_diff.py --a build-old --b build-gpu --arch sm_90 scripts/specs/split-cta.txt

Exit status: 0 when both builds plan the same specs (whether or not any plan differs; a spec
both refuse with the same error, such as fp8 output on sm_80, is counted, not shown), 1 when one
build plans a spec the other refuses (the error is printed), 2 on bad arguments.
"""
import argparse
import os
import subprocess
import sys

BOOLEAN_KEYS = {"save_stats", "backward"}


def flags_of(spec):
    """`normjit dump` flags for a spec text (key=value words)."""
    flags = []
    for word in spec.split():
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"word '{word}' of spec '{spec}' is not key=value")
        flag = "--" + key.replace("_", "-")
        if key in BOOLEAN_KEYS:
            if value not in ("true", "false"):
                raise ValueError(f"{key}={value} in spec '{spec}': expected true or false")
            if value == "true":
                flags.append(flag)
        else:
            flags += [flag, value]
    return flags


def specs_of(paths):
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                text = line.strip()
                if text and not text.startswith("#"):
                    yield path, number, text


def plan_of(build, spec, arch):
    """(plan lines without the spec line, error text or None)."""
    tool = os.path.join(build, "tools", "normjit")
    r = subprocess.run([tool, "dump", "--emit", "plan", "--arch", arch] + flags_of(spec),
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return None, (r.stderr.strip() or f"exit {r.returncode}")
    return [line for line in r.stdout.splitlines() if not line.startswith("spec:")], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--a", required=True, help="build directory A (holds tools/normjit)")
    ap.add_argument("--b", required=True, help="build directory B")
    ap.add_argument("--arch", default="sm_90:132:4814",
                    help="target, as normjit dump --arch takes it (default sm_90:132:4814)")
    ap.add_argument("lists", nargs="+", help="spec lists, one spec text per line")
    args = ap.parse_args()
    for build in (args.a, args.b):
        if not os.access(os.path.join(build, "tools", "normjit"), os.X_OK):
            print(f"plan_diff: no {build}/tools/normjit", file=sys.stderr)
            return 2
    seen, moved, failed, refused = set(), 0, 0, 0
    try:
        specs = list(specs_of(args.lists))
    except (OSError, UnicodeDecodeError) as e:
        print(f"plan_diff: {e}", file=sys.stderr)
        return 2
    for path, number, spec in specs:
        if spec in seen:
            continue
        seen.add(spec)
        try:
            a, a_error = plan_of(args.a, spec, args.arch)
            b, b_error = plan_of(args.b, spec, args.arch)
        except ValueError as e:
            print(f"{path}:{number}: {e}")
            failed += 1
            continue
        if a_error and a_error == b_error:
            refused += 1  # e.g. fp8 output on sm_80: neither build plans it for this target
            continue
        if a_error or b_error:
            failed += 1
            print(f"{path}:{number}: {spec}")
            for name, error in (("A", a_error), ("B", b_error)):
                print(f"  {name} {'failed: ' + error if error else 'planned it'}")
            continue
        if a == b:
            continue
        moved += 1
        print(f"{path}:{number}: {spec}")
        for line in a:
            if line not in b:
                print(f"  A {line}")
        for line in b:
            if line not in a:
                print(f"  B {line}")
    print(f"plan_diff: {len(seen)} specs on {args.arch}: {moved} plans differ, {failed} planned "
          f"by one build only, {refused} refused by both alike (not for this target)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
