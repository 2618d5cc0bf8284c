"""The scripts in examples/ as a user who copies them runs them, without a GPU: each compiles,
`--help` exits 0 and explains, without a CUDA device they stop with a message (no traceback),
decoder_norms.py and train_step.py run their CPU path (every normjit.torch call through
PyTorch's fallback), and
each seed's ModelNew takes its Model's state_dict and computes what Model does. Catches an
example drifting from the API (a renamed function or keyword). The PyTorch tests skip where it
is not installed; the GPU run is scripts/python_gpu.sh (run_seeds.py --small)."""
import importlib.util
import py_compile
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ("decoder_norms", "groupnorm", "layernorm", "rmsnorm_channels", "run_seeds",
           "train_step")
DEVICE_FLAG = ("decoder_norms", "train_step")  # --device cpu: their calls through the fallback
SEEDS = ("rmsnorm_channels", "layernorm", "groupnorm")

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="PyTorch is not installed (scripts/test.sh installs it; NORMJIT_TEST_TORCH=0 leaves "
           "it out)")


def run_example(name: str, monkeypatch, *args: str) -> int:
    """examples/<name>.py run as `python3 examples/<name>.py ARGS` is, in this process (torch
    imported once); returns its exit status."""
    monkeypatch.syspath_prepend(str(EXAMPLES))  # a script's own folder is on sys.path
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *args])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    return exit_.value.code


def test_the_examples_are_the_ones_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_compiles(name, tmp_path):
    py_compile.compile(str(EXAMPLES / f"{name}.py"), cfile=str(tmp_path / f"{name}.pyc"),
                       doraise=True)


@needs_torch
@pytest.mark.parametrize("name", SCRIPTS)
def test_example_help(name, monkeypatch, capsys):
    assert run_example(name, monkeypatch, "--help") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {name}.py") and "error:" not in out
    assert "--device" in out if name in DEVICE_FLAG else "--small" in out


@needs_torch
@pytest.mark.parametrize("name", SCRIPTS)
def test_example_without_a_gpu_says_so(name, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = () if name in DEVICE_FLAG else ("--small",)
    assert run_example(name, monkeypatch, *args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{name}: error: no CUDA device") or \
        err.startswith(f"{name}.py: error: no CUDA device"), err


@needs_torch
def test_decoder_norms_runs_on_the_cpu(monkeypatch, capsys):
    import warnings

    with warnings.catch_warnings():  # the script ignores the fallback warnings for its run
        code = run_example("decoder_norms", monkeypatch, "--device", "cpu", "--tokens", "4",
                           "--hidden", "256")
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().endswith("decoder_norms: ok") and "fp8" in out


@needs_torch
def test_train_step_runs_on_the_cpu(monkeypatch, capsys):
    import warnings

    with warnings.catch_warnings():  # the script ignores the fallback warnings for its run
        code = run_example("train_step", monkeypatch, "--device", "cpu", "--steps", "2",
                           "--hidden", "64", "--heads", "4", "--blocks", "1", "--batch", "2")
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.strip().splitlines()
    assert lines[-1] == "train_step: ok" and len(lines) == 4, out  # a header, 2 steps, ok


@needs_torch
def test_train_step_on_the_gpu(monkeypatch, capsys, no_fallback):
    """On a GPU (skipped without one): normjit's kernels train the stack, gradients within the
    example's bound of PyTorch's, no fallback warning."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch: the GPU run is on the GPU machine")
    code = run_example("train_step", monkeypatch, "--steps", "3", "--hidden", "256")
    out = capsys.readouterr().out
    assert code == 0 and out.rstrip().endswith("train_step: ok"), out


@needs_torch
@pytest.mark.parametrize("name", SEEDS)
def test_seed_model_new_matches_model_on_the_cpu(name, quiet):
    import torch

    spec = importlib.util.spec_from_file_location(f"seed_{name}", EXAMPLES / f"{name}.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    m.batch_size, m.dim1, m.dim2 = 2, 4, 4  # get_inputs()/get_init_inputs() read them
    torch.manual_seed(0)
    ref = m.Model(*m.get_init_inputs())
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p))
    new = m.ModelNew(*m.get_init_inputs())
    new.load_state_dict(ref.state_dict())  # strict: the same keys
    (x,) = m.get_inputs()
    assert x.shape[0] == 2
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x))
