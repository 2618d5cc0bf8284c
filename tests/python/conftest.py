"""Shared by the Python tests. Tests that need PyTorch skip with a reason where it is not
installed (scripts/test.sh installs it, CI's run included, unless NORMJIT_TEST_TORCH=0); tests
that need a GPU skip with a reason where PyTorch sees none."""
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


class LaunchRecorder:
    """A stand-in library for launch_path_into: prepare records the spec texts (a distinct
    handle each), launch and launch_ex record their arguments and write nothing."""

    def __init__(self):
        self.specs, self.launches = [], []

    def prepare(self, spec):
        self.specs.append(spec)
        return 0x7F0000001000 + 0x100 * len(self.specs)

    def launch(self, *args):
        self.launches.append(args)
        return 0

    def launch_ex(self, *args):
        self.launches.append(args)
        return 0


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


def keeping_backend(graphs):
    """An aot_autograd backend that keeps the code of the forward and backward graphs."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm.code)
            return make_boxed_func(gm.forward)
        return compiler

    return aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))


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


# transformers' LlamaRMSNorm and GemmaRMSNorm code, for the tests of patch() where transformers
# is not installed (test_variants_cpu.py, test_autograd_cpu.py)

_LLAMA = '''
import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
'''

_GEMMA = '''
import torch
from torch import nn


class {name}(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        # {comment}
        output = output * {one} + self.weight.float())
        return output.type_as(x)
'''


@pytest.fixture
def fake_transformers(tmp_path, monkeypatch):
    """A package named transformers with LlamaRMSNorm's and GemmaRMSNorm's code (as
    transformers has them), Gemma2's and Gemma3's copies, and a near miss; skipped where the
    real transformers is installed (the GPU tests patch its Gemma)."""
    import importlib.util
    import sys
    if "transformers" in sys.modules or importlib.util.find_spec("transformers") is not None:
        pytest.skip("transformers is installed: test_variants_gpu.py patches its Gemma")
    from normjit.torch import _patch
    root = tmp_path / "transformers"
    files = {
        "models/llama/modeling_llama.py": _LLAMA,
        "models/gemma/modeling_gemma.py": _GEMMA.format(name="GemmaRMSNorm", one="(1.0",
                                                        comment="Llama does x.to(float16) * w"),
        "models/gemma2/modeling_gemma2.py": _GEMMA.format(name="Gemma2RMSNorm", one="(1.0",
                                                          comment="another comment"),
        "models/gemma3/modeling_gemma3.py": _GEMMA.format(name="Gemma3RMSNorm", one="(1.0",
                                                          comment=""),
        "models/other/modeling_other.py": _GEMMA.format(name="OtherRMSNorm", one="(2.0",
                                                        comment="2 + weight"),
    }
    for path, text in files.items():
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    for d in [root, *{(root / p).parent for p in files}, root / "models"]:
        (d / "__init__.py").touch()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_patch, "_llama_body", None)
    monkeypatch.setattr(_patch, "_gemma_bodies", None)
    import importlib
    modules = {name: importlib.import_module(f"transformers.models.{name}.modeling_{name}")
               for name in ("gemma", "gemma2", "gemma3", "other")}
    yield modules
    for name in [m for m in sys.modules if m == "transformers" or m.startswith("transformers.")]:
        del sys.modules[name]
