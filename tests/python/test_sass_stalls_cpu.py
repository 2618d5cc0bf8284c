"""scripts/sass_stalls.py (where a kernel's warps wait, from Nsight Compute's source page): the
samples summed by region, regions cut at the split regex, the leading stall reasons, the most
sampled instructions, and clear errors. No GPU, no ncu: a source page written here."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "sass_stalls.py"

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)",'
          '"Warp Stall Sampling (Not-issued Samples)","stall_barrier","stall_long_sb",'
          '"stall_barrier (Not Issued)"')


def page(tmp_path, rows):
    lines = ['"Kernel Name","void normjit::row_backward<k>(normjit::Params)",', HEADER]
    for i, (text, samples, barrier, long_sb) in enumerate(rows):
        lines.append(f'"0x{i:x}","{text}","{samples}","0","{barrier}","{long_sb}","{barrier}"')
    path = tmp_path / "source.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True)


def test_regions_cut_at_barriers_and_exits_with_their_shares_and_reasons(tmp_path):
    path = page(tmp_path, [
        ("LDG.E.128 R8, desc[UR6][R2.64]", 0, 0, 0),
        ("FADD R1, R8, R9", 30, 0, 30),  # the row: 30 of 100
        ("BAR.SYNC.DEFER_BLOCKING 0x0", 0, 0, 0),
        ("LDS R3, [R0]", 50, 50, 0),  # waiting at the barrier: 50
        ("@P0 EXIT", 5, 0, 5),
        ("FADD R7, R16, R7", 15, 0, 15),  # after the first exit: 20
    ])
    done = run(path, "--top", 2)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "void normjit::row_backward<k>(normjit::Params): 100 samples over 6 instructions" in out
    assert "stall reasons over the kernel: long_sb 50%, barrier 50%" in out
    assert "| 0 | `LDG.E.128 R8, desc[UR6][R2.64]` | 30 | 30.0% | long_sb 100% |" in out
    assert "| 2 | `BAR.SYNC.DEFER_BLOCKING 0x0` | 50 | 50.0% | barrier 100% |" in out
    assert "| 4 | `@P0 EXIT` | 20 | 20.0% | long_sb 100% |" in out
    top = out.split("the 2 instructions with the most samples:")[1]
    assert top.index("LDS R3") < top.index("FADD R1")
    assert "FADD R7" not in top


def test_split_regex_of_the_caller(tmp_path):
    path = page(tmp_path, [("LDG R1", 10, 0, 10), ("SHFL.DOWN R2", 10, 0, 0),
                           ("FADD R3", 20, 0, 20)])
    done = run(path, "--split", "SHFL")
    assert done.returncode == 0, done.stderr
    assert "| 0 | `LDG R1` | 10 | 25.0% |" in done.stdout
    assert "| 1 | `SHFL.DOWN R2` | 30 | 75.0% | long_sb 100% |" in done.stdout


def test_clear_errors(tmp_path):
    missing = run(tmp_path / "none.csv")
    assert missing.returncode == 2 and "none.csv" in missing.stderr
    other = tmp_path / "details.csv"
    other.write_text('"ID","Kernel Name"\n"0","k"\n')
    wrong = run(other)
    assert wrong.returncode == 2 and "no source-page header" in wrong.stderr
    empty = page(tmp_path, [("FADD R1", 0, 0, 0)])
    none = run(empty)
    assert none.returncode == 1 and "no warp-stall samples" in none.stderr
    bad = run(page(tmp_path, [("FADD R1", 1, 0, 1)]), "--split", "[")
    assert bad.returncode == 2 and "sass_stalls:" in bad.stderr
