"""scripts/inductor_code.py's parts that need no GPU: how a kernel's autotuner is described (the
configuration, registers, the PTX found where the PyTorch version keeps it) and the arguments'
checks. What torch.compile generates is only seen on the GPU machine. No GPU, no torch."""
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "inductor_code.py"


def load():
    spec = importlib.util.spec_from_file_location("inductor_code", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in scripts/
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = before
    return module


def launcher(**extra):
    config = SimpleNamespace(kwargs={"XBLOCK": 1, "R0_BLOCK": 2048}, num_warps=16, num_stages=1)
    return SimpleNamespace(config=config, n_regs=28, n_spills=0, **extra)


def test_describe_names_the_chosen_configuration_and_writes_the_ptx(tmp_path):
    ic = load()
    tuner = SimpleNamespace(launchers=[launcher()], configs=[1, 2, 3],
                            compile_results=[SimpleNamespace(kernel=SimpleNamespace(
                                asm={"ptx": ".version 8.7\n"}))])
    line = ic.describe("triton_red_k", tuner, tmp_path, "stem")
    assert line.startswith("triton_red_k: ")
    for part in ("R0_BLOCK=2048", "XBLOCK=1", "num_warps=16", "num_stages=1", "n_regs=28",
                 "n_spills=0", "configs tried=3", "ptx stem-triton_red_k.ptx"):
        assert part in line, (part, line)
    assert (tmp_path / "stem-triton_red_k.ptx").read_text() == ".version 8.7\n"


def test_ptx_is_taken_from_the_launchers_binary_first_and_missing_ptx_is_not_claimed(tmp_path):
    ic = load()
    own = launcher(bin=SimpleNamespace(asm={"ptx": "own"}))
    tuner = SimpleNamespace(launchers=[own], compile_results=[
        SimpleNamespace(kernel=SimpleNamespace(asm={"ptx": "other"}))])
    assert ic.ptx_of(tuner, own) == {"ptx": "own"}
    bare = SimpleNamespace(launchers=[launcher()], compile_results=[])
    line = ic.describe("k", bare, tmp_path, "s")
    assert "ptx" not in line and not list(tmp_path.iterdir())


def test_an_autotuner_without_launchers_says_so(tmp_path):
    ic = load()
    assert ic.describe("k", SimpleNamespace(launchers=[]), tmp_path, "s") == \
        "k: no launcher compiled"


def test_sizes_below_one_are_refused_naming_the_argument():
    for flag in ("--tokens", "--hidden"):
        done = subprocess.run([sys.executable, str(SCRIPT), flag, "0"], capture_output=True,
                              text=True)
        assert done.returncode == 2
        assert f"{flag} must be at least 1 (got 0)" in done.stderr
