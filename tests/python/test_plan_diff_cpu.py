"""scripts/plan_diff.py with stand-in builds whose tools/normjit prints a plan made from its
flags (what `normjit dump --emit plan` prints), so that which specs differ, which are refused and
how the spec text becomes flags can be checked. No GPU, no torch."""
import subprocess
import sys
from pathlib import Path

from stand_in import stand_in_build

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "plan_diff.py"

# A stand-in `normjit dump`: the plan is the spec line, a strategy line that build B changes for
# shapes starting with 9 (naming the flags it was given) and a block line alike in both; fp8
# output (out-dtype e4m3) is refused by both builds alike on sm_80, and build B refuses groups=7.
FAKE = r'''#!{python}
import sys
args = sys.argv[1:]
assert args[:5] == ["dump", "--emit", "plan", "--arch", args[4]], args
arch, flags = args[4], args[5:]
if arch == "sm_80" and "--out-dtype" in flags:
    print("normjit: error: invalid out_dtype 'e4m3': fp8 output needs sm_89 or later",
          file=sys.stderr)
    sys.exit(1)
if "{build}" == "b" and "--groups" in flags and flags[flags.index("--groups") + 1] == "7":
    print("normjit: error: invalid groups '7'", file=sys.stderr)
    sys.exit(1)
shape = flags[flags.index("--shape") + 1]
print("spec: printed by build {build}")
changed = "{build}" == "b" and shape.startswith("9")
print("strategy: " + ("row-split (" + " ".join(flags) + ")" if changed else "row-registers"))
print("block: 256x1")
'''


def make_build(root: Path, name: str) -> Path:
    return stand_in_build(root, name, FAKE.format(python=sys.executable, build=name))


def run(tmp_path, lines, arch=None):
    a, b = make_build(tmp_path, "a"), make_build(tmp_path, "b")
    specs = tmp_path / "specs.txt"
    specs.write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, str(SCRIPT), "--a", str(a), "--b", str(b), str(specs)]
    if arch:
        cmd += ["--arch", arch]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_lists_the_specs_whose_plans_differ_and_only_the_lines_that_differ(tmp_path):
    r = run(tmp_path, ["# a comment", "op=rmsnorm shape=4,8 normalized_dims=1",
                       "", "op=layernorm shape=32,65537 normalized_dims=1 residual=bf16",
                       "op=rmsnorm shape=4,8 normalized_dims=1",
                       "op=groupnorm shape=9,64,8,8 groups=8 save_stats=true backward=false"])
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    # The spec line is left out: builds print it alike or not, the plan is what is compared.
    assert f"{tmp_path / 'specs.txt'}:6: op=groupnorm shape=9,64,8,8 groups=8 save_stats=true " \
           "backward=false" in out
    assert "  A strategy: row-registers" in out
    assert any(line.startswith("  B strategy: row-split (") for line in out)
    assert not any("block:" in line for line in out)
    assert not any(line.startswith("  A spec") or line.startswith("  B spec") for line in out)
    assert not any("op=rmsnorm" in line or "op=layernorm" in line for line in out), out
    # A repeated spec is planned once; key=value words become dump's flags (save_stats=true a
    # bare flag, backward=false none).
    assert out[-1] == ("plan_diff: 3 specs on sm_90:132:4814: 1 plans differ, 0 planned by one "
                       "build only, 0 refused by both alike (not for this target)")


def test_flags_follow_the_spec_text(tmp_path):
    r = run(tmp_path, ["op=groupnorm shape=9,64,8,8 groups=8 save_stats=true backward=false "
                       "normalized_dims=0 residual=f32"])
    assert r.returncode == 0, r.stderr
    assert ("  B strategy: row-split (--op groupnorm --shape 9,64,8,8 --groups 8 --save-stats "
            "--normalized-dims 0 --residual f32)") in r.stdout.splitlines()


def test_refused_by_both_is_counted_by_one_is_a_failure(tmp_path):
    r = run(tmp_path, ["op=rmsnorm shape=4,8 out_dtype=e4m3", "op=groupnorm shape=2,7,8 groups=7"],
            arch="sm_80")
    assert r.returncode == 1
    out = r.stdout.splitlines()
    assert not any("out_dtype=e4m3" in line for line in out[:-1]), out
    assert "  A planned it" in out
    assert "  B failed: normjit: error: invalid groups '7'" in out
    assert out[-1].endswith("0 plans differ, 1 planned by one build only, 1 refused by both alike "
                            "(not for this target)")


def test_bad_arguments(tmp_path):
    make_build(tmp_path, "a")
    r = subprocess.run([sys.executable, str(SCRIPT), "--a", str(tmp_path / "a"), "--b",
                        str(tmp_path / "none"), "x.txt"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "no " + str(tmp_path / "none") + "/tools/normjit" in r.stderr
    make_build(tmp_path, "b")
    r = subprocess.run([sys.executable, str(SCRIPT), "--a", str(tmp_path / "a"), "--b",
                        str(tmp_path / "b"), str(tmp_path / "missing.txt")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "missing.txt" in r.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("op=rmsnorm shape\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "--a", str(tmp_path / "a"), "--b",
                        str(tmp_path / "b"), str(bad)], capture_output=True, text=True, timeout=60)
    assert (r.returncode == 1
            and "word 'shape' of spec 'op=rmsnorm shape' is not key=value" in r.stdout)
