"""tools/flashinfer_peer.py, the FlashInfer peer of the performance tables, where there is no GPU:
its ctypes argument lists against the C entry points of scripts/peers/flashinfer_norm.cu, the
reasons it gives when the library is absent or broken, and (with PyTorch) the arguments each
function passes for 2-D, strided, 3-D per-head, in-place and fp8 calls, through a stand-in of
the library that records them."""
import ctypes
import re
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import flashinfer_peer as fp  # noqa: E402

C_TYPES = {"int": ctypes.c_int, "uint32_t": ctypes.c_uint32, "float": ctypes.c_float,
           "void*": ctypes.c_void_p, "float*": ctypes.c_void_p}


def c_signatures():
    """name -> ctypes argument types of each `int fi_...(...)` in the .cu file."""
    text = (REPO / "scripts" / "peers" / "flashinfer_norm.cu").read_text()
    sigs = {}
    for name, params in re.findall(r"^int (fi_\w+)\(([^)]*)\)", text, flags=re.M):
        types_ = []
        for param in " ".join(params.split()).split(","):
            words = param.replace("*", " * ").split()
            base = words[0] + ("*" if "*" in words else "")
            types_.append(C_TYPES[base])
        sigs[name] = types_
    return sigs


def test_argument_lists_match_the_c_entry_points():
    sigs = c_signatures()
    assert set(sigs) == set(fp._ARGTYPES), (sorted(sigs), sorted(fp._ARGTYPES))
    for name, argtypes in fp._ARGTYPES.items():
        assert sigs[name] == [ctypes.c_int] + argtypes, name


def test_absent_library_says_where_and_how(monkeypatch, tmp_path):
    monkeypatch.delenv("NORMJIT_FLASHINFER_LIB", raising=False)
    fns, why = fp.load(tmp_path)
    assert fns == {} and str(tmp_path / "peers" / fp.LIBRARY) in why
    assert "build_flashinfer.sh" in why and why.startswith("absent")
    bogus = tmp_path / "bogus.so"
    bogus.write_text("not a library")
    monkeypatch.setenv("NORMJIT_FLASHINFER_LIB", str(bogus))
    assert fp.library_path(tmp_path) == bogus
    fns, why = fp.load(tmp_path)
    assert fns == {} and "did not load" in why and str(bogus) in why


class Recorder:
    """The library's functions, recording their arguments; status 0 unless told otherwise."""

    def __init__(self):
        self.calls = []
        self.status = 0

    def __getattr__(self, name):
        if name.startswith("fi_") and name != "fi_error_string":
            return lambda *a: (self.calls.append((name, a)), self.status)[1]
        raise AttributeError(name)

    def fi_error_string(self, status):
        return b"an illegal memory access was encountered"


def test_functions_pass_what_flashinfer_takes(monkeypatch):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (CI installs none)")
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda: types.SimpleNamespace(cuda_stream=1234))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (9, 0))
    lib = Recorder()
    fns = fp._functions(lib)
    assert set(fns) == {"rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "rmsnorm_quant"}

    # Strided rows: a slice of a wider tensor keeps its row stride; y is contiguous.
    wide = torch.zeros(6, 96, dtype=torch.bfloat16)
    x = wide[:, :64]
    w = torch.ones(64, dtype=torch.bfloat16)
    y = fns["rmsnorm"](x, w, 1e-6)
    name, a = lib.calls[-1]
    assert name == "fi_rmsnorm" and y.shape == (6, 64) and y.is_contiguous()
    assert a[0] == 0 and a[1] == x.data_ptr() and a[2] == w.data_ptr() and a[3] == y.data_ptr()
    assert a[4:8] == (6, 64, 96, 64) and a[8] == 1e-6 and a[9:] == (1, 1234)

    # 3-D: the per-head kernel with both strides of x (a q view of a qkv tensor) and of y.
    qkv = torch.zeros(5, 3 * 4 * 8, dtype=torch.float16)
    q = qkv[:, :32].view(5, 4, 8)
    y = fns["rmsnorm"](q, torch.ones(8, dtype=torch.float16), 1e-5)
    name, a = lib.calls[-1]
    assert name == "fi_qk_rmsnorm" and a[0] == 1 and y.shape == (5, 4, 8)
    assert a[4:11] == (5, 4, 8, 96, 8, 32, 8), a

    # In place: x and the residual, each with its own row stride; nothing returned.
    x = torch.zeros(3, 16, dtype=torch.bfloat16)
    r = torch.zeros(3, 32, dtype=torch.bfloat16)[:, :16]
    assert fns["fused_add_rmsnorm"](x, r, torch.ones(16, dtype=torch.bfloat16), 1e-6) is None
    name, a = lib.calls[-1]
    assert name == "fi_fused_add_rmsnorm" and a[1:3] == (x.data_ptr(), r.data_ptr())
    assert a[4:8] == (3, 16, 16, 32)

    # fp8: an e4m3 y and the scale's address; Gemma: its own entry point.
    scale = torch.full((1,), 1 / 128, dtype=torch.float32)
    y = fns["rmsnorm_quant"](x, torch.ones(16, dtype=torch.bfloat16), scale, 1e-6)
    name, a = lib.calls[-1]
    assert name == "fi_rmsnorm_quant_e4m3" and y.dtype == torch.float8_e4m3fn
    assert a[8] == scale.data_ptr() and a[4:8] == (3, 16, 16, 16)
    fns["gemma_rmsnorm"](x, torch.ones(16, dtype=torch.bfloat16), 1e-6)
    assert lib.calls[-1][0] == "fi_gemma_rmsnorm"

    # Before Hopper, no programmatic dependent launch (FlashInfer's device_support_pdl).
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (8, 0))
    fns = fp._functions(lib)
    fns["rmsnorm"](x, torch.ones(16, dtype=torch.bfloat16), 1e-6)
    assert lib.calls[-1][1][9] == 0

    # What it refuses, naming what is wrong; a failed launch raises with CUDA's text.
    with pytest.raises(ValueError, match="bf16 or f16"):
        fns["rmsnorm"](torch.zeros(2, 8), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="last dim contiguous"):
        fns["rmsnorm"](torch.zeros(8, 2, dtype=torch.bfloat16).t(), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="one f32"):
        fns["rmsnorm_quant"](x, torch.ones(16, dtype=torch.bfloat16), torch.ones(2), 1e-6)
    lib.status = 700
    with pytest.raises(RuntimeError, match="FlashInfer rmsnorm: an illegal memory access"):
        fns["rmsnorm"](x, torch.ones(16, dtype=torch.bfloat16), 1e-6)
