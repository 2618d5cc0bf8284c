"""Shared by the Python tests. Tests that need PyTorch skip with a reason where it is not
installed (CI installs none: the PyPI wheel brings several GB of CUDA libraries); tests that
need a GPU skip with a reason where PyTorch sees none."""
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
