"""scripts/shard_tests.py (gpu_suite.sh's shards of about equal time): the gtest list parsed, the
longest-first assignment, unknown tests at the median, the filters printed, the times recorded
from gtest logs, and clear errors. No GPU, no torch."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "shard_tests.py"

spec = importlib.util.spec_from_file_location("shard_tests", SCRIPT)
shard_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shard_tests)

LIST = """Ops.
  Fixed
  Sweep
Typed/0.  # TypeParam = float
  Works
Variants.
  Slow
  Fast
  New
"""


def test_gtest_list_parsed_with_its_comments():
    assert shard_tests.listed_tests(LIST) == [
        "Ops.Fixed", "Ops.Sweep", "Typed/0.Works", "Variants.Slow", "Variants.Fast",
        "Variants.New"]


def test_longest_first_to_the_least_loaded_shard_every_test_once_in_listed_order():
    tests = shard_tests.listed_tests(LIST)
    times = {"Ops.Fixed": 40, "Ops.Sweep": 30, "Typed/0.Works": 5, "Variants.Slow": 100,
             "Variants.Fast": 1}  # Variants.New: unknown, the median (30)
    shards = shard_tests.shards_of(tests, times, 2)
    assert sorted(t for s in shards for t in s) == sorted(tests)
    for s in shards:
        assert s == [t for t in tests if t in s]
    cost = dict(times, **{"Variants.New": 30})
    loads = sorted(sum(cost[t] for t in s) for s in shards)
    # Longest first: 100 | 40, 30, 30 (100), then 5 to the first of the tie and 1 to the other;
    # gtest's dealing in turn gives 40 + 5 + 1 = 46 against 30 + 100 + 30 = 160.
    assert loads == [101, 105]


def test_shards_beyond_the_tests_run_nothing(tmp_path):
    (tmp_path / "list.txt").write_text("A.\n  One\n")
    (tmp_path / "times.txt").write_text("# a comment\nA.One 2.5\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--times", str(tmp_path / "times.txt"),
                          "--shards", "3", "--list", str(tmp_path / "list.txt")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["A.One", "-*", "-*"]


def test_filters_from_stdin_one_line_a_shard(tmp_path):
    (tmp_path / "times.txt").write_text("Ops.Fixed 40\nVariants.Slow 100\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--times", str(tmp_path / "times.txt"),
                          "--shards", "2", "--list", "-"], input=LIST, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    # The four unknown tests count 70 s (the median of 40 and 100): Slow | Sweep, Works | Fast
    # to the first (170 against 140) | New (210) | Fixed to the first (210), the tie's lowest.
    assert out == ["Ops.Fixed:Variants.Slow:Variants.Fast", "Ops.Sweep:Typed/0.Works:Variants.New"]


def test_record_reads_the_passed_tests_of_gtest_logs(tmp_path):
    log = tmp_path / "gtest-0.log"
    log.write_text("[ RUN      ] Ops.Fixed\n[       OK ] Ops.Fixed (43210 ms)\n"
                   "[ RUN      ] Ops.Bad\n[  FAILED  ] Ops.Bad (5 ms)\n"
                   "[       OK ] Variants.Fast (12 ms)\n")
    assert shard_tests.record([str(log)]) == "Ops.Fixed 43.21\nVariants.Fast 0.01\n"


@pytest.mark.parametrize("times,message", [
    ("Ops.Fixed\n", "line 1 of the times is not `Suite.Test SECONDS`"),
    ("Ops.Fixed 1\nOps.Sweep many\n", "line 2 of the times"),
])
def test_a_bad_times_line_is_named(tmp_path, times, message):
    (tmp_path / "times.txt").write_text(times)
    r = subprocess.run([sys.executable, str(SCRIPT), "--times", str(tmp_path / "times.txt"),
                        "--shards", "2", "--list", "-"], input=LIST, capture_output=True,
                       text=True)
    assert r.returncode != 0 and message in r.stderr


def test_missing_arguments_and_zero_shards_are_refused():
    r = subprocess.run([sys.executable, str(SCRIPT), "--shards", "2"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "give --times, --shards and --list" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--times", "t", "--shards", "0", "--list",
                        "-"], capture_output=True, text=True, input=LIST)
    assert r.returncode == 2 and "--shards must be at least 1, not 0" in r.stderr


def test_the_repository_times_cover_tests_with_positive_seconds():
    times = shard_tests.read_times((REPO / "scripts" / "gpu_test_times.txt").read_text())
    assert len(times) > 50 and all(s >= 0 for s in times.values())
    assert sum(times.values()) > 600  # seconds, not milliseconds


def test_unfinished_lists_the_tests_without_an_ok_line(tmp_path):
    log = tmp_path / "gtest-0.log"
    log.write_text("[ RUN      ] Ops.Fixed\n[       OK ] Ops.Fixed (43210 ms)\n"
                   "[ RUN      ] Ops.Sweep\n[  FAILED  ] Ops.Sweep (5 ms)\n"
                   "[ RUN      ] Variants.Slow\n")
    tests = shard_tests.listed_tests(LIST)
    assert shard_tests.unfinished(tests, [str(log)]) == [
        "Ops.Sweep", "Typed/0.Works", "Variants.Slow", "Variants.Fast", "Variants.New"]
    (tmp_path / "list.txt").write_text(LIST)
    out = subprocess.run([sys.executable, str(SCRIPT), "--unfinished", str(tmp_path / "list.txt"),
                          str(log)], capture_output=True, text=True, check=True).stdout
    assert out == "Ops.Sweep:Typed/0.Works:Variants.Slow:Variants.Fast:Variants.New\n"
    log.write_text("".join(f"[       OK ] {t} (1 ms)\n" for t in tests))
    out = subprocess.run([sys.executable, str(SCRIPT), "--unfinished", str(tmp_path / "list.txt"),
                          str(log)], capture_output=True, text=True, check=True).stdout
    assert out == ""
    r = subprocess.run([sys.executable, str(SCRIPT), "--unfinished", str(tmp_path / "list.txt")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--unfinished takes the list and at least one log" in r.stderr


# A stand-in for gpu_tests: gtest's listing and filters (flag over GTEST_FILTER), one test that
# passes, one that fails, one that hangs and one after it.
FAKE_GTEST = r"""#!/usr/bin/env bash
set -f
filter=${GTEST_FILTER:-*}
list=0
for a in "$@"; do
  case $a in
    --gtest_filter=*) filter=${a#--gtest_filter=} ;;
    --gtest_list_tests) list=1 ;;
  esac
done
matches() { local IFS=:; for p in $filter; do [[ $1 == $p ]] && return 0; done; return 1; }
((list)) && echo "Ops."
failed=0
for t in Fast Fails Hang Later; do
  matches "Ops.$t" || continue
  if ((list)); then echo "  $t"; continue; fi
  echo "[ RUN      ] Ops.$t"
  case $t in
    Fails) echo "[  FAILED  ] Ops.$t (1 ms)"; failed=1 ;;
    Hang) sleep 60 ;;
    *) echo "[       OK ] Ops.$t (2 ms)" ;;
  esac
done
((list)) || echo "[  $( ((failed)) && echo FAILED || echo PASSED)  ] done."
exit "$failed"
"""


def test_gpu_suite_names_the_unfinished_tests_and_runs_just_them(tmp_path):
    """scripts/gpu_suite.sh with a stand-in gpu_tests (no GPU): a failed test and a shard cut by
    TG give gtest-unfinished.txt and the line that reruns them; GTEST_FILTER keeps a second run's
    listing and shards to the tests named; PYTEST=off leaves the Python suite out."""
    import zipfile
    build = tmp_path / "build"
    (build / "tests" / "gpu").mkdir(parents=True)
    fake = build / "tests" / "gpu" / "gpu_tests"
    fake.write_text(FAKE_GTEST)
    fake.chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "normjit-0-py3-none-any.whl", "w") as z:
        z.writestr("normjit/__init__.py", "")
    times = tmp_path / "times.txt"
    times.write_text("Ops.Fast 1\nOps.Fails 1\nOps.Hang 1\nOps.Later 1\n")

    def suite(out, **env):
        full = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OUT": str(out),
                "WHEELS": str(wheels), "NORMJIT_SITE": str(tmp_path / "site"),
                "TIMES": str(times), "PYTEST": "off", "TG": "3", **env}
        return subprocess.run(["bash", str(REPO / "scripts" / "gpu_suite.sh"), str(build)],
                              capture_output=True, text=True, env=full, timeout=60)

    # Two shards: Fast and Hang | Fails and Later (longest first, ties to the lowest index).
    r = suite(tmp_path / "out1", SHARDS="2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (tmp_path / "out1" / "gtest-unfinished.txt").read_text() == "Ops.Fails:Ops.Hang\n"
    assert "2 tests did not pass" in r.stdout
    assert "GTEST_FILTER='Ops.Fails:Ops.Hang' PYTEST=off" in r.stdout
    assert "pytest: left out (PYTEST=off)" in r.stdout
    r = suite(tmp_path / "out2", SHARDS="2", GTEST_FILTER="Ops.Fast:Ops.Later")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "out2" / "gtest-list.txt").read_text() == "Ops.\n  Fast\n  Later\n"
    assert not (tmp_path / "out2" / "gtest-unfinished.txt").exists()
    assert sorted(shard_tests.record([str(p) for p in (tmp_path / "out2").glob("gtest-*.log")])
                  .split()) == sorted(["Ops.Fast", "0.00", "Ops.Later", "0.00"])
