"""Shared by the Python tests. Tests that need PyTorch skip with a reason where it is not
installed (CI installs none: the PyPI wheel brings several GB of CUDA libraries); tests that
need a GPU skip with a reason where PyTorch sees none."""
import contextlib
import os
from pathlib import Path

import pytest


def pytest_report_header(config):
    import normjit
    lines = [f"normjit {normjit.__version__} from {Path(normjit.__file__).parent}",
             f"libnormjit: {normjit.library_path()}"]
    try:
        import torch
        cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
        lines.append(f"torch {torch.__version__}: {cuda}")
    except ImportError:
        lines.append("torch: not installed (the PyTorch tests skip)")
    return lines


@pytest.fixture
def out_dir():
    """$OUT when set (the GPU machine's folder that comes back), else None."""
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
    return Path(out) if out else None


class NoDeviceGuard:
    """Stands in for torch.cuda.device where CPU tensors take the launch path through a stub:
    its context does nothing. A class, not a function: PyTorch's own code tests
    isinstance(d, torch.cuda.device) (torch.compile on a GPU machine asks for the device's
    capability while it traces), which a function there would break."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextlib.contextmanager
def launch_path_into(monkeypatch, library, *, take_cpu=True, clear_warned=False):
    """normjit.torch's launch path routed into `library`, a stand-in for libnormjit (a stub that
    records the launches, or an emulator that computes them) for the duration of a test: its
    prepare() serves normjit.engine(), and the launch functions it has (launch, launch_ex,
    launch_backward) replace the library's, the others failing the test if called; no CUDA
    device or stream is touched. take_cpu: CPU tensors count as on normjit's device, every other
    check of a call the real one (grad included); a test that decides that itself passes False.
    The op's kernel and call caches are emptied for the test and restored after it (and, with
    clear_warned, the fallback warnings already given forgotten before and after)."""
    import normjit
    import torch
    from normjit.torch import _ops

    if take_cpu:
        monkeypatch.setattr(_ops, "_on_device", lambda x: True)
    monkeypatch.setattr(normjit, "engine", lambda: library)
    monkeypatch.setattr(torch.cuda, "device", NoDeviceGuard)
    monkeypatch.setattr(_ops, "_raw_stream", lambda device: 0)
    for name in ("launch", "launch_ex", "launch_backward"):
        # Set even where the stand-in lacks it: the first prepare would bind the real one.
        missing = lambda *args, name=name: pytest.fail(f"{name} called")  # noqa: E731
        monkeypatch.setattr(_ops, "_" + name, getattr(library, name, missing))
    saved = dict(_ops._kernels), dict(_ops._calls)
    _ops._kernels.clear()
    _ops._calls.clear()
    if clear_warned:
        _ops._warned.clear()
    try:
        yield library
    finally:
        _ops._kernels.clear()
        _ops._calls.clear()
        _ops._kernels.update(saved[0])
        _ops._calls.update(saved[1])
        if clear_warned:
            _ops._warned.clear()


@pytest.fixture
def fresh_warnings():
    """normjit.torch's fallback warnings (one per reason) forgotten before and after the test, so
    that a test sees the warnings its own calls give. Test modules that import torch use it for
    every test (pytestmark); a module-level autouse here would import torch for all."""
    from normjit.torch import _ops

    _ops._warned.clear()
    yield
    _ops._warned.clear()


@pytest.fixture
def no_fallback():
    """A NormjitFallbackWarning is an error in the test: the GPU modules' calls must take
    normjit's kernels (they use it for every test, through pytestmark)."""
    import warnings

    import normjit.torch as njt
    from normjit.torch import _ops

    _ops._warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        yield
    _ops._warned.clear()


@pytest.fixture
def quiet():
    """normjit.torch's fallback warnings ignored for the test (CPU tensors fall back)."""
    import warnings

    import normjit.torch as njt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
        yield
