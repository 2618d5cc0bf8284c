"""FlashInfer's hand-written CUDA RMSNorm kernels as a peer of the performance tables.

scripts/peers/build_flashinfer.sh compiles them (include/flashinfer/norm.cuh of the
flashinfer-python wheel) behind the C entry points of scripts/peers/flashinfer_norm.cu into
BUILD/peers/libflashinfer_norm.so; load() opens that library with ctypes and returns functions
with the arguments and results of FlashInfer's Python API (flashinfer.norm), taking PyTorch
tensors:

    rmsnorm(x, w, eps)                  y = x / rms(x) * w; x 2-D [rows, d] (rows may be
                                        strided), or 3-D [batch, heads, d] (per-head, FlashInfer's
                                        QKRMSNorm, two-level strides); y a new contiguous tensor
    gemma_rmsnorm(x, w, eps)            y = x / rms(x) * (1 + w)
    fused_add_rmsnorm(x, r, w, eps)     in place: r <- x + r, x <- rmsnorm(r) * w; returns None
    rmsnorm_quant(x, w, scale, eps)     y (e4m3) = clamp(x / rms(x) * w / scale[0]): FlashInfer
                                        divides by its scale

Each launches on PyTorch's current stream, with programmatic dependent launch where FlashInfer's
API enables it by default (compute capability 9.0 and up), and raises RuntimeError with CUDA's
error text if the launch fails. These are the kernels of FlashInfer's CUDA norm module
(FLASHINFER_USE_CUDA_NORM=1; also the ones sgl-kernel carries); on an H200 FlashInfer 0.7's own
Python API runs CuTe DSL kernels by default, whose compiler (nvidia-cutlass-dsl) is not part of
this peer.

Only the standard library is imported at module level; torch where a function runs.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, Callable, Optional

LIBRARY = "libflashinfer_norm.so"
ABOUT = "flashinfer_norm.txt"
BUILD_HINT = "scripts/peers/build_flashinfer.sh BUILD (scripts/device_prep.sh runs it)"

_u32, _f32, _int, _ptr = ctypes.c_uint32, ctypes.c_float, ctypes.c_int, ctypes.c_void_p
# name -> the C function's argument types after dtype (scripts/peers/flashinfer_norm.cu).
_ARGTYPES = {
    "fi_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _f32, _int, _ptr],
    "fi_gemma_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _f32, _int, _ptr],
    "fi_fused_add_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _f32, _int, _ptr],
    "fi_rmsnorm_quant_e4m3": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _ptr, _f32, _int, _ptr],
    "fi_qk_rmsnorm": [_ptr, _ptr, _ptr, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _f32, _int,
                      _ptr],
}


def library_path(build: Optional[Path]) -> Path:
    """NORMJIT_FLASHINFER_LIB when set, else BUILD/peers/libflashinfer_norm.so."""
    env = os.environ.get("NORMJIT_FLASHINFER_LIB")
    if env:
        return Path(env)
    return Path(build or "build") / "peers" / LIBRARY


def load(build: Optional[Path]) -> tuple[dict[str, Callable], str]:
    """(functions by FlashInfer's names, what was built and how) or ({}, why it is absent)."""
    path = library_path(build)
    if not path.is_file():
        return {}, f"absent: no {path} (built by {BUILD_HINT})"
    try:
        lib = ctypes.CDLL(str(path))
        for name, argtypes in _ARGTYPES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = [_int] + argtypes, _int
        lib.fi_error_string.argtypes, lib.fi_error_string.restype = [_int], ctypes.c_char_p
    except (OSError, AttributeError) as e:
        return {}, f"absent: {path} did not load ({e})"
    about = path.with_name(ABOUT)
    what = about.read_text().strip() if about.is_file() else f"{path} (how built: unknown)"
    try:
        return _functions(lib), what
    except ImportError as e:
        return {}, f"absent: PyTorch is not importable ({e})"


def _functions(lib: Any) -> dict[str, Callable]:
    import torch

    codes = {torch.bfloat16: 0, torch.float16: 1}
    pdl_by_device: dict[int, int] = {}

    def dtype_code(x) -> int:
        if x.dtype not in codes:
            raise ValueError(f"FlashInfer's norm kernels take bf16 or f16 x, not {x.dtype}")
        return codes[x.dtype]

    def pdl(x) -> int:
        # flashinfer.utils.device_support_pdl: compute capability 9.0 and up.
        d = x.device.index if x.device.index is not None else torch.cuda.current_device()
        if d not in pdl_by_device:
            pdl_by_device[d] = int(torch.cuda.get_device_capability(d)[0] >= 9)
        return pdl_by_device[d]

    def stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def check(name: str, status: int) -> None:
        if status:
            raise RuntimeError(f"FlashInfer {name}: {lib.fi_error_string(status).decode()}")

    def rows_of(x) -> tuple[int, int, int]:
        if x.dim() != 2 or x.stride(1) != 1:
            raise ValueError(f"FlashInfer's row kernels take 2-D x with its last dim "
                             f"contiguous, not shape {tuple(x.shape)} strides {x.stride()}")
        return x.shape[0], x.shape[1], x.stride(0)

    def rmsnorm(x, w, eps: float):
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.dim() == 3:
            if x.stride(2) != 1:
                raise ValueError("FlashInfer's per-head kernel takes x with its last dim "
                                 "contiguous")
            b, h, d = x.shape
            check("rmsnorm (3-D)", lib.fi_qk_rmsnorm(
                dtype_code(x), x.data_ptr(), w.data_ptr(), y.data_ptr(), b, h, d, x.stride(0),
                x.stride(1), y.stride(0), y.stride(1), eps, pdl(x), stream()))
            return y
        rows, d, sx = rows_of(x)
        check("rmsnorm", lib.fi_rmsnorm(dtype_code(x), x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                        rows, d, sx, y.stride(0), eps, pdl(x), stream()))
        return y

    def gemma_rmsnorm(x, w, eps: float):
        rows, d, sx = rows_of(x)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        check("gemma_rmsnorm", lib.fi_gemma_rmsnorm(
            dtype_code(x), x.data_ptr(), w.data_ptr(), y.data_ptr(), rows, d, sx, y.stride(0),
            eps, pdl(x), stream()))
        return y

    def fused_add_rmsnorm(x, r, w, eps: float) -> None:
        rows, d, sx = rows_of(x)
        _, _, sr = rows_of(r)
        check("fused_add_rmsnorm", lib.fi_fused_add_rmsnorm(
            dtype_code(x), x.data_ptr(), r.data_ptr(), w.data_ptr(), rows, d, sx, sr, eps,
            pdl(x), stream()))

    def rmsnorm_quant(x, w, scale, eps: float):
        rows, d, sx = rows_of(x)
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise ValueError("FlashInfer's rmsnorm_quant takes a scale of one f32")
        y = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        check("rmsnorm_quant", lib.fi_rmsnorm_quant_e4m3(
            dtype_code(x), x.data_ptr(), w.data_ptr(), y.data_ptr(), rows, d, sx, y.stride(0),
            scale.data_ptr(), eps, pdl(x), stream()))
        return y

    return {"rmsnorm": rmsnorm, "gemma_rmsnorm": gemma_rmsnorm,
            "fused_add_rmsnorm": fused_add_rmsnorm, "rmsnorm_quant": rmsnorm_quant}


def smoke(build: Optional[Path]) -> int:
    """On a GPU: each function once on small bf16 inputs against float64 (the peer loads and
    computes what its name says); prints one line per function. 0 all close, 1 not, 2 absent."""
    fns, what = load(build)
    print(f"FlashInfer peer: {what}")
    if not fns:
        return 2
    import torch

    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    wide = (torch.randn(37, 4096 + 512, device=dev) * 2 + 1).to(bf16)
    x = wide[:, :4096]  # strided rows: a slice of a wider tensor
    r = torch.randn(37, 4096, device=dev, dtype=bf16)
    w = torch.randn(4096, device=dev, dtype=bf16) * 0.5 + 1
    qkv = torch.randn(5, 6144, device=dev, dtype=bf16)
    q = qkv[:, :4096].view(5, 32, 128)
    wq = torch.randn(128, device=dev, dtype=bf16)

    def ref(v, weight, offset=0.0):
        vd = v.double()
        return vd * torch.rsqrt(vd.pow(2).mean(-1, keepdim=True) + 1e-6) * (weight.double()
                                                                            + offset)

    scale = torch.full((1,), 1 / 128, device=dev)
    h = (x + r).to(bf16)
    xi, ri = x.contiguous(), r.clone()
    fns["fused_add_rmsnorm"](xi, ri, w, 1e-6)
    results = {
        "rmsnorm": (fns["rmsnorm"](x, w, 1e-6), ref(x, w)),
        "rmsnorm (3-D)": (fns["rmsnorm"](q, wq, 1e-6), ref(q, wq)),
        "gemma_rmsnorm": (fns["gemma_rmsnorm"](x, w, 1e-6), ref(x, w, 1.0)),
        "fused_add_rmsnorm": (xi, ref(h, w)),
        "rmsnorm_quant": (fns["rmsnorm_quant"](x, w, scale, 1e-6),
                          (ref(x, w) * 128).clamp(-448, 448)),
    }
    torch.cuda.synchronize()
    status = 0 if torch.equal(ri, h) else 1
    print(f"  fused_add_rmsnorm h: {'bit-equal to x + r' if status == 0 else 'OFF'}")
    for name, (y, expected) in results.items():
        tol = 0.07 if name == "rmsnorm_quant" else 1e-2  # e4m3: 3 mantissa bits
        err = ((y.double() - expected).norm() / expected.norm()).item()
        ok = err < tol and bool(torch.isfinite(y.double()).all())
        status |= 0 if ok else 1
        print(f"  {name}: rel. err {err:.1e} {'ok' if ok else 'FAIL'}")
    return status


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Load the FlashInfer peer and check each of its "
                                 "functions once on the GPU against float64.")
    ap.add_argument("--build", default="build", help="the build folder holding peers/ (build)")
    raise SystemExit(smoke(Path(ap.parse_args().build)))
