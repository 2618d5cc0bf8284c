"""Inference engines' hand-written CUDA RMSNorm kernels as peers of the performance tables.

Two peers, each a shared library of C entry points over the engine's own kernels, built from the
engine's release on PyPI (nothing of theirs is in this repository):
  flashinfer  FlashInfer's include/flashinfer/norm.cuh, launched by FlashInfer's own host
              functions (scripts/peers/flashinfer_norm.cu, built by
              scripts/peers/build_flashinfer.sh into BUILD/peers/libflashinfer_norm.so): the
              kernels of FlashInfer's CUDA norm module (FLASHINFER_USE_CUDA_NORM=1), the ones
              sgl-kernel carries. On an H200 FlashInfer 0.7's own Python API runs CuTe DSL
              kernels by default, whose compiler (nvidia-cutlass-dsl) is not part of this peer.
  vllm        vLLM's csrc/layernorm_kernels.cu kernels, launched as vLLM's host code launches
              them (scripts/peers/vllm_norm.cu, built by scripts/peers/build_vllm.sh into
              BUILD/peers/libvllm_norm.so), and rms_norm_static_fp8_quant_kernel of
              csrc/layernorm_quant_kernels.cu.

load(name, build) opens one with ctypes and returns functions with the arguments and results of
the engine's Python API, taking PyTorch tensors:

    rmsnorm(x, w, eps)                  y = x / rms(x) * w; x 2-D [rows, d] (rows may be
                                        strided), or 3-D [batch, heads, d] (per head, two-level
                                        strides); y a new contiguous tensor
    fused_add_rmsnorm(x, r, w, eps)     in place: r <- x + r, x <- rmsnorm(r) * w; returns None
    rmsnorm_quant(x, w, scale, eps)     y (e4m3) = clamp(x / rms(x) * w / scale[0]): both
                                        divide by their scale (vLLM's rms_norm_static_fp8_quant)
  flashinfer only:
    gemma_rmsnorm(x, w, eps)            y = x / rms(x) * (1 + w)

Each launches on PyTorch's current stream (FlashInfer: with programmatic dependent launch where
its API enables it by default, compute capability 9.0 and up) and raises RuntimeError with
CUDA's error text if the launch fails.

Only the standard library is imported at module level; torch where a function runs.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

_u32, _i64, _f32, _int, _ptr = (ctypes.c_uint32, ctypes.c_int64, ctypes.c_float, ctypes.c_int,
                                ctypes.c_void_p)


@dataclass(frozen=True)
class Peer:
    title: str                 # as the tables name it
    library: str               # under BUILD/peers
    about: str                 # what was built and how, beside the library
    build_script: str
    env: str                   # a library path that overrides BUILD/peers/library
    argtypes: dict             # C function -> argument types after dtype (the .cu file's)
    error_function: str


PEERS = {
    "flashinfer": Peer(
        "FlashInfer", "libflashinfer_norm.so", "flashinfer_norm.txt",
        "scripts/peers/build_flashinfer.sh", "NORMJIT_FLASHINFER_LIB", {
            "fi_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _f32, _int, _ptr],
            "fi_gemma_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _f32, _int, _ptr],
            "fi_fused_add_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _f32, _int, _ptr],
            "fi_rmsnorm_quant_e4m3": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _ptr, _f32, _int,
                                      _ptr],
            "fi_qk_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _f32,
                              _int, _ptr],
        }, "fi_error_string"),
    "vllm": Peer(
        "vLLM", "libvllm_norm.so", "vllm_norm.txt", "scripts/peers/build_vllm.sh",
        "NORMJIT_VLLM_LIB", {
            "vl_rms_norm": [_ptr, _ptr, _i64, _ptr, _f32, _int, _int, _ptr],
            "vl_rms_norm_heads": [_ptr, _ptr, _i64, _i64, _int, _int, _ptr, _f32, _int, _ptr],
            "vl_fused_add_rms_norm": [_ptr, _i64, _ptr, _i64, _ptr, _f32, _int, _int, _ptr],
            "vl_rms_norm_fp8": [_ptr, _ptr, _int, _ptr, _ptr, _f32, _int, _int, _ptr],
        }, "vl_error_string"),
}


def library_path(name: str, build: Optional[Path]) -> Path:
    """The peer's environment variable when set, else BUILD/peers/LIBRARY."""
    peer = PEERS[name]
    env = os.environ.get(peer.env)
    return Path(env) if env else Path(build or "build") / "peers" / peer.library


def load(name: str, build: Optional[Path]) -> tuple[dict[str, Callable], str]:
    """(functions by the engine's names, what was built and how) or ({}, why it is absent).
    NORMJIT_ENGINE_PEERS, when set, lists the peers to load (comma-separated; empty: none), so
    that a run can leave one out without a code change (a peer whose kernel faults would end a
    table's run: a CUDA context does not survive an illegal address)."""
    peer = PEERS[name]
    chosen = os.environ.get("NORMJIT_ENGINE_PEERS")
    if chosen is not None and name not in [c.strip() for c in chosen.split(",")]:
        return {}, f"absent: left out by NORMJIT_ENGINE_PEERS={chosen!r}"
    path = library_path(name, build)
    if not path.is_file():
        return {}, (f"absent: no {path} (built by {peer.build_script} BUILD; "
                    "scripts/device_prep.sh runs it)")
    try:
        lib = ctypes.CDLL(str(path))
        for fn_name, argtypes in peer.argtypes.items():
            fn = getattr(lib, fn_name)
            fn.argtypes, fn.restype = [_int] + argtypes, _int
        err = getattr(lib, peer.error_function)
        err.argtypes, err.restype = [_int], ctypes.c_char_p
    except (OSError, AttributeError) as e:
        return {}, f"absent: {path} did not load ({e})"
    about = path.with_name(peer.about)
    what = about.read_text().strip() if about.is_file() else f"{path} (how built: unknown)"
    try:
        return FUNCTIONS[name](lib), what
    except ImportError as e:
        return {}, f"absent: PyTorch is not importable ({e})"


class _Calls:
    """What both peers' functions share: dtype codes, the stream, checked launches."""

    def __init__(self, lib: Any, peer: Peer):
        import torch
        self.torch, self.lib, self.peer = torch, lib, peer
        self.codes = {torch.bfloat16: 0, torch.float16: 1}
        self.pdl_by_device: dict[int, int] = {}

    def dtype(self, x) -> int:
        if x.dtype not in self.codes:
            raise ValueError(f"{self.peer.title}'s norm kernels take bf16 or f16 x, not {x.dtype}")
        return self.codes[x.dtype]

    def pdl(self, x) -> int:
        # flashinfer.utils.device_support_pdl: compute capability 9.0 and up.
        cuda = self.torch.cuda
        d = x.device.index if x.device.index is not None else cuda.current_device()
        if d not in self.pdl_by_device:
            self.pdl_by_device[d] = int(cuda.get_device_capability(d)[0] >= 9)
        return self.pdl_by_device[d]

    def stream(self) -> int:
        return self.torch.cuda.current_stream().cuda_stream

    def check(self, what: str, status: int) -> None:
        if status:
            text = getattr(self.lib, self.peer.error_function)(status).decode()
            raise RuntimeError(f"{self.peer.title} {what}: {text}")

    def rows(self, x) -> tuple[int, int, int]:
        if x.dim() != 2 or x.stride(1) != 1:
            raise ValueError(f"{self.peer.title}'s row kernels take 2-D x with its last dim "
                             f"contiguous, not shape {tuple(x.shape)} strides {x.stride()}")
        return x.shape[0], x.shape[1], x.stride(0)

    def heads(self, x) -> tuple[int, int, int, int, int]:
        if x.stride(2) != 1:
            raise ValueError(f"{self.peer.title}'s per-head kernel takes x with its last dim "
                             "contiguous")
        return (*x.shape, x.stride(0), x.stride(1))

    def scale(self, scale) -> None:
        if scale.dtype != self.torch.float32 or scale.numel() != 1:
            raise ValueError(f"{self.peer.title}'s fp8 RMSNorm takes a scale of one f32")

    def output(self, x, dtype=None):
        return self.torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)


def _flashinfer(lib: Any) -> dict[str, Callable]:
    c = _Calls(lib, PEERS["flashinfer"])

    def rmsnorm(x, w, eps: float):
        y = c.output(x)
        if x.dim() == 3:
            b, h, d, sn, sh = c.heads(x)
            c.check("rmsnorm (3-D)", lib.fi_qk_rmsnorm(
                c.dtype(x), x.data_ptr(), w.data_ptr(), y.data_ptr(), b, h, d, sn, sh,
                y.stride(0), y.stride(1), eps, c.pdl(x), c.stream()))
            return y
        rows, d, sx = c.rows(x)
        c.check("rmsnorm", lib.fi_rmsnorm(c.dtype(x), x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                          rows, d, sx, y.stride(0), eps, c.pdl(x), c.stream()))
        return y

    def gemma_rmsnorm(x, w, eps: float):
        rows, d, sx = c.rows(x)
        y = c.output(x)
        c.check("gemma_rmsnorm", lib.fi_gemma_rmsnorm(
            c.dtype(x), x.data_ptr(), w.data_ptr(), y.data_ptr(), rows, d, sx, y.stride(0), eps,
            c.pdl(x), c.stream()))
        return y

    def fused_add_rmsnorm(x, r, w, eps: float) -> None:
        rows, d, sx = c.rows(x)
        _, _, sr = c.rows(r)
        c.check("fused_add_rmsnorm", lib.fi_fused_add_rmsnorm(
            c.dtype(x), x.data_ptr(), r.data_ptr(), w.data_ptr(), rows, d, sx, sr, eps,
            c.pdl(x), c.stream()))

    def rmsnorm_quant(x, w, scale, eps: float):
        rows, d, sx = c.rows(x)
        c.scale(scale)
        y = c.output(x, c.torch.float8_e4m3fn)
        c.check("rmsnorm_quant", lib.fi_rmsnorm_quant_e4m3(
            c.dtype(x), x.data_ptr(), w.data_ptr(), y.data_ptr(), rows, d, sx, y.stride(0),
            scale.data_ptr(), eps, c.pdl(x), c.stream()))
        return y

    return {"rmsnorm": rmsnorm, "gemma_rmsnorm": gemma_rmsnorm,
            "fused_add_rmsnorm": fused_add_rmsnorm, "rmsnorm_quant": rmsnorm_quant}


def _vllm(lib: Any) -> dict[str, Callable]:
    c = _Calls(lib, PEERS["vllm"])

    def rmsnorm(x, w, eps: float):
        y = c.output(x)
        if x.dim() == 3:
            b, h, d, sn, sh = c.heads(x)
            c.check("rms_norm (3-D)", lib.vl_rms_norm_heads(
                c.dtype(x), y.data_ptr(), x.data_ptr(), sn, sh, b, h, w.data_ptr(), eps, d,
                c.stream()))
            return y
        rows, d, sx = c.rows(x)
        c.check("rms_norm", lib.vl_rms_norm(c.dtype(x), y.data_ptr(), x.data_ptr(), sx,
                                            w.data_ptr(), eps, rows, d, c.stream()))
        return y

    def fused_add_rmsnorm(x, r, w, eps: float) -> None:
        rows, d, sx = c.rows(x)
        _, _, sr = c.rows(r)
        c.check("fused_add_rms_norm", lib.vl_fused_add_rms_norm(
            c.dtype(x), x.data_ptr(), sx, r.data_ptr(), sr, w.data_ptr(), eps, rows, d,
            c.stream()))

    def rmsnorm_quant(x, w, scale, eps: float):
        rows, d, sx = c.rows(x)
        c.scale(scale)
        y = c.output(x, c.torch.float8_e4m3fn)
        c.check("rms_norm_static_fp8_quant", lib.vl_rms_norm_fp8(
            c.dtype(x), y.data_ptr(), x.data_ptr(), sx, w.data_ptr(), scale.data_ptr(), eps, rows,
            d, c.stream()))
        return y

    return {"rmsnorm": rmsnorm, "fused_add_rmsnorm": fused_add_rmsnorm,
            "rmsnorm_quant": rmsnorm_quant}


FUNCTIONS = {"flashinfer": _flashinfer, "vllm": _vllm}


def smoke(build: Optional[Path]) -> int:
    """On a GPU: each peer's functions once on small bf16 inputs against float64 (it loads and
    computes what its names say); a line per function. 0 all close, 1 not, 2 a peer absent."""
    try:
        import torch
    except ImportError as e:
        print(f"kernel_peers: PyTorch is not importable ({e}); nothing checked")
        return 2

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    wide = (torch.randn(37, 4096 + 512, device=dev) * 2 + 1).to(bf16)
    x = wide[:, :4096]  # strided rows: a slice of a wider tensor
    r = torch.randn(37, 4096, device=dev, dtype=bf16)
    w = torch.randn(4096, device=dev, dtype=bf16) * 0.5 + 1
    qkv = torch.randn(5, 6144, device=dev, dtype=bf16)
    q = qkv[:, :4096].view(5, 32, 128)
    wq = torch.randn(128, device=dev, dtype=bf16)
    h = (x + r).to(bf16)

    def ref(v, weight, offset=0.0):
        vd = v.double()
        return vd * torch.rsqrt(vd.pow(2).mean(-1, keepdim=True) + 1e-6) * (weight.double()
                                                                            + offset)

    status = 0
    for name in PEERS:
        fns, what = load(name, build)
        print(f"{PEERS[name].title}: {what}")
        if not fns:
            status = max(status, 2)
            continue
        xi, ri = x.contiguous(), r.clone()
        fns["fused_add_rmsnorm"](xi, ri, w, 1e-6)
        results = {"rmsnorm": (fns["rmsnorm"](x, w, 1e-6), ref(x, w)),
                   "rmsnorm (3-D)": (fns["rmsnorm"](q, wq, 1e-6), ref(q, wq)),
                   "fused_add_rmsnorm": (xi, ref(h, w))}
        if "gemma_rmsnorm" in fns:
            results["gemma_rmsnorm"] = (fns["gemma_rmsnorm"](x, w, 1e-6), ref(x, w, 1.0))
        if "rmsnorm_quant" in fns:
            scale = torch.full((1,), 1 / 128, device=dev)
            results["rmsnorm_quant"] = (fns["rmsnorm_quant"](x, w, scale, 1e-6),
                                        (ref(x, w) * 128).clamp(-448, 448))
        torch.cuda.synchronize()
        h_ok = torch.equal(ri, h)
        status |= 0 if h_ok else 1
        print(f"  fused_add_rmsnorm h: {'bit-equal to x + r' if h_ok else 'OFF'}")
        for fn, (y, expected) in results.items():
            tol = 0.07 if fn == "rmsnorm_quant" else 1e-2  # e4m3: 3 mantissa bits
            err = ((y.double() - expected).norm() / expected.norm()).item()
            ok = err < tol and bool(torch.isfinite(y.double()).all())
            status |= 0 if ok else 1
            print(f"  {fn}: rel. err {err:.1e} {'ok' if ok else 'FAIL'}")
    return status


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Load each peer library and check each of its "
                                 "functions once on the GPU against float64.")
    ap.add_argument("--build", default="build", help="the build folder holding peers/ (build)")
    raise SystemExit(smoke(Path(ap.parse_args().build)))
