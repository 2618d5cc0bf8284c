"""normjit: CUDA normalization kernels generated, compiled (NVRTC) and cached at run time.

    import normjit
    normjit.precompile("op=rmsnorm shape=8,64,32,32 dtype=f32", arch="sm_90")  # no GPU needed

    import normjit.torch as njt       # PyTorch: custom ops, modules, patch(model)
    njt.patch(model)

This module needs neither PyTorch nor a GPU. The spec syntax is the canonical text form of
the C++ library and the `normjit` command ("op=groupnorm shape=112,64,512,512 dtype=f32
groups=8 affine=both eps=1e-05"). Failures raise NormjitError (or a subclass per status)
carrying normjit's message and status.
"""
from __future__ import annotations

import ctypes
import threading
from typing import NamedTuple, Optional

from ._capi import (CacheMissError, CompileError, DriverError, Dtype, InvalidArgumentError,
                    NoDeviceError, NormjitError, Status, UnsupportedError, library,
                    library_path)
from ._capi import EngineOptions as _EngineOptions

__version__ = "0.1.0"

__all__ = [
    "Engine", "Counters", "engine", "precompile", "library_path", "Status", "Dtype",
    "NormjitError", "InvalidArgumentError", "UnsupportedError", "CompileError", "DriverError",
    "NoDeviceError", "CacheMissError",
]


class Counters(NamedTuple):
    nvrtc_compiles: int  # NVRTC invocations
    memory_hits: int
    disk_hits: int


class Engine:
    """A normjit engine (C: normjit_engine): the cache layers, the JIT and the kernels loaded
    per CUDA context. The arguments left out come from the environment (NORMJIT_CACHE_DIR,
    NORMJIT_CACHE_READONLY, NORMJIT_CACHE_MAX_BYTES, NORMJIT_JIT). Works without a GPU;
    launching then fails. Most programs use the process's engine, `normjit.engine()`."""

    def __init__(self, cache_dir: Optional[str] = None, readonly_dirs: Optional[str] = None,
                 cache_max_bytes: int = 0, memory_only: bool = False, jit_disabled: bool = False,
                 device: int = 0):
        lib = library()
        self._lib = lib
        opts = _EngineOptions()
        lib.normjit_engine_options_init(ctypes.byref(opts))
        # The C strings must outlive the create call only; keep them with the options anyway.
        self._strings = [s.encode() if s is not None else None for s in (cache_dir, readonly_dirs)]
        opts.device = device
        opts.cache_dir = self._strings[0]
        opts.readonly_dirs = self._strings[1]
        opts.cache_max_bytes = cache_max_bytes
        opts.memory_only = int(memory_only)
        opts.jit_disabled = int(jit_disabled)
        handle = ctypes.c_void_p()
        lib.check(lib.normjit_engine_create(ctypes.byref(opts), ctypes.byref(handle)))
        self.handle: Optional[int] = handle.value

    def _live(self) -> int:
        if self.handle is None:
            raise ValueError("normjit.Engine: used after close()")
        return self.handle

    def precompile(self, spec: str, arch: str = "sm_90") -> bool:
        """Compiles the kernel of `spec` for `arch` ("sm_90", or "sm_90:114" for a part with 114
        SMs) into the cache, no GPU needed. Returns True when NVRTC ran, False when the kernel
        was already cached."""
        compiled = ctypes.c_int(0)
        self._lib.check(self._lib.normjit_precompile(self._live(), _text(spec, "spec"),
                                                     _text(arch, "arch"), ctypes.byref(compiled)))
        return bool(compiled.value)

    def prepare(self, spec: str) -> int:
        """The kernel of `spec` for the current CUDA context, compiled or loaded once: an opaque
        handle (normjit_kernel*) owned by the engine, the same for the same spec."""
        kernel = ctypes.c_void_p()
        self._lib.check(self._lib.normjit_prepare(self._live(), _text(spec, "spec"),
                                                  ctypes.byref(kernel)))
        return kernel.value

    def counters(self) -> Counters:
        c = [ctypes.c_uint64() for _ in range(3)]
        self._lib.check(self._lib.normjit_engine_counters(self._live(),
                                                          *(ctypes.byref(v) for v in c)))
        return Counters(*(v.value for v in c))

    def close(self) -> None:
        """Destroys the engine; the kernels it prepared become invalid."""
        if self.handle is not None:
            self._lib.normjit_engine_destroy(self.handle)
            self.handle = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _text(value: str, argument: str) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"normjit: {argument} must be a str, not {type(value).__name__} "
                        f"({value!r})")
    return value.encode()


_engine: Optional[Engine] = None
_engine_lock = threading.Lock()


def engine() -> Engine:
    """The process's engine (settings from the environment), created on first use. Its kernels
    live as long as the process."""
    global _engine
    if _engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = Engine()
    return _engine


def precompile(spec: str, arch: str = "sm_90") -> bool:
    """Compiles the kernel of `spec` for `arch` into the cache of the process's engine, no GPU
    needed; returns whether NVRTC ran (False: already cached). Raises NormjitError (e.g.
    InvalidArgumentError naming the bad field of the spec)."""
    return engine().precompile(spec, arch)
