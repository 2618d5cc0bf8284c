#!/usr/bin/env python3
"""Cut GoogleTest tests into shards of about equal time, for scripts/gpu_suite.sh.

gtest's own sharding (GTEST_TOTAL_SHARDS) deals the tests out in turn, so a shard may draw
several of the slowest ones: on the H200 (2026-11-29, six shards) one shard summed 327 s and
another 99 s, and the first ran past its limit. This script gives each test, longest first, to
the shard with the least time so far (longest processing time first), from the seconds of a
previous run (TIMES: lines `Suite.Test SECONDS`; a test it lacks counts as the median of those it
has, or 1 s), and prints one --gtest_filter value a shard, one a line.

  shard_tests.py --times scripts/gpu_test_times.txt --shards 6 --list LIST
      LIST: the output of `gpu_tests --gtest_list_tests` (a file, or - for stdin)
  shard_tests.py --record LOG... > TIMES
      the seconds of each test that passed in gtest logs ("[       OK ] Suite.Test (N ms)")
  shard_tests.py --unfinished LIST LOG...
      one --gtest_filter value: the tests of LIST that did not pass in the logs (failed, cut by
      a time limit, or never reached), for running just them again (GTEST_FILTER=...); prints
      nothing when every listed test passed
"""
import argparse
import re
import statistics
import sys

OK_LINE = re.compile(r"^\[       OK \] (\S+) \((\d+) ms\)")


def listed_tests(text: str) -> list[str]:
    """The full names of `--gtest_list_tests` output: `Suite.` lines, then indented names."""
    names, suite = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            suite = line.split("#")[0].strip()
        elif suite is not None:
            names.append(suite + line.split("#")[0].strip())
    return names


def read_times(text: str) -> dict[str, float]:
    times = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            times[parts[0]] = float(parts[1])
        except ValueError:
            raise SystemExit(f"shard_tests: line {number} of the times is not "
                             f"`Suite.Test SECONDS`: {line!r}")
    return times


def shards_of(tests: list[str], times: dict[str, float], count: int) -> list[list[str]]:
    """Longest first, each to the shard with the least time so far (ties: the lowest index);
    every shard's tests in the listed order."""
    known = [times[t] for t in tests if t in times]
    default = statistics.median(known) if known else 1.0
    cost = {t: times.get(t, default) for t in tests}
    order = sorted(range(len(tests)), key=lambda i: (-cost[tests[i]], i))
    load = [0.0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for i in order:
        k = min(range(count), key=lambda s: (load[s], s))
        load[k] += cost[tests[i]]
        members[k].append(i)
    return [[tests[i] for i in sorted(m)] for m in members]


def record(paths: list[str]) -> str:
    out = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = OK_LINE.match(line)
                if m:
                    out.append(f"{m.group(1)} {int(m.group(2)) / 1000:.2f}")
    return "\n".join(sorted(out)) + ("\n" if out else "")


def passed(paths: list[str]) -> set[str]:
    names = set()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            names.update(m.group(1) for m in map(OK_LINE.match, f) if m)
    return names


def unfinished(tests: list[str], logs: list[str]) -> list[str]:
    """The listed tests without an OK line in the logs, in the listed order."""
    done = passed(logs)
    return [t for t in tests if t not in done]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[8:]))
    ap.add_argument("--times", help="seconds of each test from an earlier run (see --record)")
    ap.add_argument("--shards", type=int, help="how many shards (at least 1)")
    ap.add_argument("--list", help="gpu_tests --gtest_list_tests output: a file, or - for stdin")
    ap.add_argument("--record", nargs="+", metavar="LOG",
                    help="print the times of the tests that passed in these gtest logs")
    ap.add_argument("--unfinished", nargs="+", metavar=("LIST", "LOG"),
                    help="print the tests of LIST (--gtest_list_tests output) that did not pass "
                         "in the logs, as one --gtest_filter value")
    a = ap.parse_args(argv)
    if a.unfinished:
        if len(a.unfinished) < 2:
            ap.error("--unfinished takes the list and at least one log")
        with open(a.unfinished[0], encoding="utf-8") as f:
            rest = unfinished(listed_tests(f.read()), a.unfinished[1:])
        if rest:
            print(":".join(rest))
        return 0
    if a.record:
        sys.stdout.write(record(a.record))
        return 0
    if a.times is None or a.shards is None or a.list is None:
        ap.error("give --times, --shards and --list (or --record LOG...)")
    if a.shards < 1:
        ap.error(f"--shards must be at least 1, not {a.shards}")
    text = sys.stdin.read() if a.list == "-" else open(a.list, encoding="utf-8").read()
    tests = listed_tests(text)
    if not tests:
        raise SystemExit("shard_tests: the list names no tests (expected `gpu_tests "
                         "--gtest_list_tests` output)")
    with open(a.times, encoding="utf-8") as f:
        times = read_times(f.read())
    for shard in shards_of(tests, times, a.shards):
        # An empty shard runs nothing: a filter no test matches.
        print(":".join(shard) if shard else "-*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
