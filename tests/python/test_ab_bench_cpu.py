"""scripts/ab_bench.py where there is no GPU: stand-in builds whose tools/normjit prints the JSON
of `normjit bench --specs F --json`, with a median that depends on the build, the environment
the variant names and the round, so that the table's cells can be checked one by one. No torch
needed."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from stand_in import stand_in_build

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ab_bench.py"

# A stand-in `normjit`: each spec's median in ms is BASE_MS (the build's) + 0.001 * (line number)
# + 0.0001 * NJ_EXTRA (the variant's environment) + 0.00001 * its call count (the round); one
# spec errors the way `normjit bench` reports an unsupported one; the cache folder, the library
# path and the arguments are recorded for the test.
FAKE = r'''#!{python}
import json, os, sys
from pathlib import Path
here = Path(__file__).resolve().parent.parent
count_file = here / "calls"
calls = int(count_file.read_text()) + 1 if count_file.exists() else 1
count_file.write_text(str(calls))
with open(here / "log", "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "cache": os.environ.get("NORMJIT_CACHE_DIR"),
                          "lib": os.environ.get("LD_LIBRARY_PATH")}}) + "\n")
specs = sys.argv[sys.argv.index("--specs") + 1]
lines = [l.strip() for l in open(specs) if l.strip() and not l.startswith("#")]
results = []
for i, spec in enumerate(lines, 1):
    if "unsupported" in spec:
        results.append({{"spec": spec, "error": "no", "error_code": "unsupported"}})
        continue
    ms = {base} + 0.001 * i + 0.0001 * int(os.environ.get("NJ_EXTRA", "0")) + 0.00001 * calls
    results.append({{"spec": spec, "median_ms": ms}})
print(json.dumps({{"results": results}}))
'''


def make_build(root: Path, name: str, base_ms: float) -> Path:
    return stand_in_build(root, name, FAKE.format(python=sys.executable, base=base_ms))


def test_table_has_each_variant_and_round(tmp_path):
    a = make_build(tmp_path, "a", 1.0)
    b = make_build(tmp_path, "b", 2.0)
    specs = tmp_path / "specs.txt"
    specs.write_text("# a comment\nop=rmsnorm shape=4,8\n\nop=layernorm shape=2,16 unsupported\n"
                     "op=layernorm shape=4,8\n")
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--specs", str(specs), "--rounds", "2", "--repeat", "7",
         "--out", str(out), "--variant", f"a={a}", "--variant", f"b={b}",
         "--variant", f"b3={b}:NJ_EXTRA=3"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    table = [line for line in run.stdout.splitlines() if line.startswith("|")]
    assert table[0] == "| spec | a | b | b3 |"
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in table[2:]}
    # Rounds alternate variants: a round 1, b round 1, b3 round 1, then round 2 of each, so each
    # build's call count (the last digit) says which round a cell came from. After the first
    # variant, each cell carries the mean of its rounds over the first's, in brackets.
    assert rows["`op=rmsnorm shape=4,8`"] == ["1001.01 / 1001.02", "2001.01 / 2001.03 (2.00)",
                                              "2001.32 / 2001.34 (2.00)"]
    assert rows["`op=layernorm shape=4,8`"] == ["1003.01 / 1003.02", "2003.01 / 2003.03 (2.00)",
                                                "2003.32 / 2003.34 (2.00)"]
    assert rows["`op=layernorm shape=2,16 unsupported`"] == ["n/a / n/a"] * 3
    # The last row: each variant's geometric mean of those ratios over the specs both timed.
    ratios = {"b": (2001.02 / 1001.015, 2003.02 / 1003.015),
              "b3": (2001.33 / 1001.015, 2003.33 / 1003.015)}
    geo = {name: math.sqrt(r[0] * r[1]) for name, r in ratios.items()}
    assert table[-1].startswith("| geometric mean of the ratios to a |")
    assert rows["geometric mean of the ratios to a"] == [
        "", f"{geo['b']:.3f} over 2", f"{geo['b3']:.3f} over 2"]
    # Every run's JSON is kept, each variant with its own cache and its build's library.
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.r{r}.json" for n in ("a", "b", "b3") for r in (1, 2))
    log = [json.loads(line) for line in (b / "log").read_text().splitlines()]
    assert {entry["cache"] for entry in log} == {"/tmp/ab-cache-b", "/tmp/ab-cache-b3"}
    assert {entry["lib"] for entry in log} == {str(b)}
    assert all(entry["argv"][entry["argv"].index("--repeat") + 1] == "7" for entry in log)


def test_a_bad_variant_is_named(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--specs", "x", "--variant", "b=dir:NOEQ"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "'NOEQ' is not VAR=VALUE" in run.stderr
    run = subprocess.run([sys.executable, str(SCRIPT), "--specs", "x", "--variant", "a/b=dir"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "the name 'a/b' takes letters, digits" in run.stderr


def test_a_failing_build_is_reported_and_its_cells_are_na(tmp_path):
    broken = stand_in_build(tmp_path, "broken",
                            "#!/bin/sh\necho 'normjit: error: no GPU' >&2\nexit 1\n")
    good = make_build(tmp_path, "good", 1.0)
    specs = tmp_path / "specs.txt"
    specs.write_text("op=rmsnorm shape=4,8\n")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--specs", str(specs), "--rounds", "1", "--out",
         str(tmp_path / "out"), "--variant", f"good={good}", "--variant", f"broken={broken}"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert run.returncode == 0
    assert "broken round 1: exit 1: normjit: error: no GPU" in run.stderr
    assert "| `op=rmsnorm shape=4,8` | 1001.01 | n/a |" in run.stdout
    assert "| geometric mean of the ratios to good | | n/a |" in run.stdout
