"""tools/kernel_peers.py, the inference engines' kernels as peers of the performance tables, where
there is no GPU: its ctypes argument lists against the C entry points of scripts/peers/*.cu, the
reasons it gives when a library is absent or broken, and (with PyTorch) the arguments each
function passes for 2-D, strided, 3-D per-head, in-place and fp8 calls, through a stand-in of
each library that records them; and scripts/perf_lib.sh's peers_from_sources, which builds a
missing peer library from the sources kept in BUILD/peers before a table."""
import ctypes
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import kernel_peers as kp  # noqa: E402

C_TYPES = {"int": ctypes.c_int, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
           "float": ctypes.c_float, "void*": ctypes.c_void_p, "float*": ctypes.c_void_p}
SOURCES = {"flashinfer": "flashinfer_norm.cu", "vllm": "vllm_norm.cu"}


def c_signatures(source):
    """name -> ctypes argument types of each extern "C" `int name(...)` of the .cu file."""
    text = (REPO / "scripts" / "peers" / source).read_text()
    text = text[text.index('extern "C" {'):]
    sigs = {}
    for name, params in re.findall(r"^int (\w+)\(([^)]*)\)", text, flags=re.M):
        types_ = []
        for param in " ".join(params.split()).split(","):
            words = [w for w in param.replace("*", " * ").split() if w != "const"]
            base = words[0] + ("*" if "*" in words else "")
            types_.append(C_TYPES[base])
        sigs[name] = types_
    return sigs


@pytest.mark.parametrize("name", sorted(kp.PEERS))
def test_argument_lists_match_the_c_entry_points(name):
    sigs = c_signatures(SOURCES[name])
    argtypes = kp.PEERS[name].argtypes
    assert set(sigs) == set(argtypes), (sorted(sigs), sorted(argtypes))
    for fn, types_ in argtypes.items():
        assert sigs[fn] == [ctypes.c_int] + types_, fn
    text = (REPO / "scripts" / "peers" / SOURCES[name]).read_text()
    assert f"const char* {kp.PEERS[name].error_function}(int status)" in text
    assert (REPO / kp.PEERS[name].build_script).is_file()


@pytest.mark.parametrize("name", sorted(kp.PEERS))
def test_absent_library_says_where_and_how(monkeypatch, tmp_path, name):
    peer = kp.PEERS[name]
    monkeypatch.delenv(peer.env, raising=False)
    fns, why = kp.load(name, tmp_path)
    assert fns == {} and str(tmp_path / "peers" / peer.library) in why
    assert peer.build_script in why and why.startswith("absent")
    bogus = tmp_path / "bogus.so"
    bogus.write_text("not a library")
    monkeypatch.setenv(peer.env, str(bogus))
    assert kp.library_path(name, tmp_path) == bogus
    fns, why = kp.load(name, tmp_path)
    assert fns == {} and "did not load" in why and str(bogus) in why
    other = [n for n in kp.PEERS if n != name][0]
    monkeypatch.setenv("NORMJIT_ENGINE_PEERS", other)
    fns, why = kp.load(name, tmp_path)
    assert fns == {} and why == f"absent: left out by NORMJIT_ENGINE_PEERS='{other}'"
    monkeypatch.setenv("NORMJIT_ENGINE_PEERS", f" {other}, {name}")
    assert "did not load" in kp.load(name, tmp_path)[1]


class Recorder:
    """A library's functions, recording their arguments; status 0 unless told otherwise."""

    def __init__(self):
        self.calls = []
        self.status = 0

    def __getattr__(self, name):
        if name.endswith("_error_string"):
            return lambda status: b"an illegal memory access was encountered"
        if name.startswith(("fi_", "vl_")):
            return lambda *a: (self.calls.append((name, a)), self.status)[1]
        raise AttributeError(name)


def stub_cuda(monkeypatch, torch, capability=(9, 0)):
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda: types.SimpleNamespace(cuda_stream=1234))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: capability)


def test_functions_pass_what_flashinfer_takes(monkeypatch):
    torch = pytest.importorskip("torch",
                                reason="PyTorch is not installed (scripts/test.sh installs it)")
    stub_cuda(monkeypatch, torch)
    lib = Recorder()
    fns = kp.FUNCTIONS["flashinfer"](lib)
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
    fns = kp.FUNCTIONS["flashinfer"](lib)
    fns["rmsnorm"](x, torch.ones(16, dtype=torch.bfloat16), 1e-6)
    assert lib.calls[-1][1][9] == 0

    # What it refuses, naming what is wrong; a failed launch raises with CUDA's text.
    with pytest.raises(ValueError, match="FlashInfer's norm kernels take bf16 or f16"):
        fns["rmsnorm"](torch.zeros(2, 8), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="last dim contiguous"):
        fns["rmsnorm"](torch.zeros(8, 2, dtype=torch.bfloat16).t(), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="FlashInfer's fp8 RMSNorm takes a scale of one f32"):
        fns["rmsnorm_quant"](x, torch.ones(16, dtype=torch.bfloat16), torch.ones(2), 1e-6)
    lib.status = 700
    with pytest.raises(RuntimeError, match="FlashInfer rmsnorm: an illegal memory access"):
        fns["rmsnorm"](x, torch.ones(16, dtype=torch.bfloat16), 1e-6)


def test_functions_pass_what_vllm_takes(monkeypatch):
    torch = pytest.importorskip("torch",
                                reason="PyTorch is not installed (scripts/test.sh installs it)")
    stub_cuda(monkeypatch, torch)
    lib = Recorder()
    fns = kp.FUNCTIONS["vllm"](lib)
    assert set(fns) == {"rmsnorm", "fused_add_rmsnorm", "rmsnorm_quant"}
    wide = torch.zeros(6, 96, dtype=torch.float16)
    x, w = wide[:, :64], torch.ones(64, dtype=torch.float16)
    y = fns["rmsnorm"](x, w, 1e-6)
    name, a = lib.calls[-1]
    assert name == "vl_rms_norm" and y.is_contiguous() and a[0] == 1
    assert a[1:4] == (y.data_ptr(), x.data_ptr(), 96) and a[4] == w.data_ptr()
    assert a[5:] == (1e-6, 6, 64, 1234), a
    qkv = torch.zeros(5, 96, dtype=torch.bfloat16)
    q = qkv[:, :32].view(5, 4, 8)
    y = fns["rmsnorm"](q, torch.ones(8, dtype=torch.bfloat16), 1e-5)
    name, a = lib.calls[-1]
    assert name == "vl_rms_norm_heads" and y.shape == (5, 4, 8) and a[0] == 0
    assert a[3:7] == (96, 8, 5, 4) and a[9] == 8, a
    x = torch.zeros(3, 16, dtype=torch.bfloat16)
    r = torch.zeros(3, 32, dtype=torch.bfloat16)[:, :16]
    assert fns["fused_add_rmsnorm"](x, r, torch.ones(16, dtype=torch.bfloat16), 1e-6) is None
    name, a = lib.calls[-1]
    assert name == "vl_fused_add_rms_norm"
    assert a[1:5] == (x.data_ptr(), 16, r.data_ptr(), 32) and a[7:9] == (3, 16), a
    scale = torch.full((1,), 1 / 128, dtype=torch.float32)
    y = fns["rmsnorm_quant"](x, torch.ones(16, dtype=torch.bfloat16), scale, 1e-6)
    name, a = lib.calls[-1]
    assert name == "vl_rms_norm_fp8" and y.dtype == torch.float8_e4m3fn
    assert a[1:4] == (y.data_ptr(), x.data_ptr(), 16) and a[5] == scale.data_ptr()
    assert a[7:9] == (3, 16), a
    lib.status = 700
    with pytest.raises(RuntimeError, match="vLLM rms_norm: an illegal memory access"):
        fns["rmsnorm"](x, torch.ones(16, dtype=torch.bfloat16), 1e-6)


def test_peers_from_sources_builds_only_what_is_missing(tmp_path):
    """perf_lib.sh's peers_from_sources in a copy of the scripts whose build_PEER.sh are stubs
    (each records its call and writes the library, or fails when told): a peer whose library is
    there, or whose sources are not, is left alone; one with sources and no library is built; a
    build that fails is a warning naming its log's last line, not a failure of the table."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    (tmp_path / "scripts" / "peers").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "perf_lib.sh", tmp_path / "scripts")
    calls = tmp_path / "calls.txt"
    for peer in ("flashinfer", "vllm"):
        (tmp_path / "scripts" / "peers" / f"build_{peer}.sh").write_text(
            f'echo {peer} "$1" >> {calls}\n'
            f'if [ -n "${{FAIL_{peer.upper()}:-}}" ]; then echo "{peer}: no headers"; exit 1; fi\n'
            f'touch "$1/peers/lib{peer}_norm.so"\n')
    peers = tmp_path / "b" / "peers"

    def run(**env):
        return subprocess.run(["bash", "-c", "set -euo pipefail; source scripts/perf_lib.sh; "
                               "peers_from_sources t b"], cwd=tmp_path, capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", **env})

    # No sources: nothing to build.
    peers.mkdir(parents=True)
    r = run()
    assert r.returncode == 0 and not calls.exists(), r.stderr
    # vLLM's sources without its library, FlashInfer's library there: only vLLM is built.
    (peers / "vllm-0.34.0").mkdir()
    (peers / "flashinfer-0.7.4").mkdir()
    (peers / "libflashinfer_norm.so").touch()
    r = run()
    assert r.returncode == 0, r.stderr
    assert calls.read_text().split("\n")[:-1] == ["vllm b"]
    assert (peers / "libvllm_norm.so").exists() and "building the vllm peer" in r.stdout
    # Both libraries there: nothing built again.
    r = run()
    assert r.returncode == 0 and calls.read_text().count("\n") == 1
    # A build that fails: a warning with its log's last line; the caller goes on.
    (peers / "libvllm_norm.so").unlink()
    r = run(FAIL_VLLM="1")
    assert r.returncode == 0
    assert "the vllm peer did not build" in r.stderr and "vllm: no headers" in r.stderr
    assert not (peers / "libvllm_norm.so").exists()
