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
import operator
import os
import threading
from typing import NamedTuple, Optional, Sequence, Union

from ._capi import (CacheMissError, CompileError, DriverError, Dtype, InvalidArgumentError,
                    NoDeviceError, NormjitError, Status, UnsupportedError, library,
                    library_path)
from ._capi import EngineConfig as _EngineConfig
from ._capi import EngineStats as _EngineStats

__version__ = "0.1.0"

__all__ = [
    "Engine", "Counters", "engine", "precompile", "library_path", "library_version", "Status",
    "Dtype", "NormjitError", "InvalidArgumentError", "UnsupportedError", "CompileError",
    "DriverError", "NoDeviceError", "CacheMissError",
]


class Counters(NamedTuple):
    nvrtc_compiles: int  # NVRTC invocations
    memory_hits: int
    disk_hits: int
    bad_entries: int  # disk entries rejected: corrupt, or a cubin the driver refused


class Engine:
    """A normjit engine (C: normjit_engine): the cache layers, the JIT and the kernels loaded
    per CUDA context. The arguments left out come from the environment (NORMJIT_CACHE_DIR,
    NORMJIT_CACHE_READONLY, NORMJIT_CACHE_MAX_BYTES, NORMJIT_JIT, NORMJIT_DRAM_GBPS). Works
    without a GPU; launching then fails. Most programs use the process's engine,
    `normjit.engine()`."""

    def __init__(self, cache_dir: Optional[_PathLike] = None,
                 readonly_dirs: Union[None, _PathLike, Sequence[_PathLike]] = None,
                 cache_max_bytes: int = 0, memory_only: bool = False, jit_disabled: bool = False,
                 device: int = 0, dram_gbps: int = 0, prewarm: bool = False):
        """cache_dir: a str or os.PathLike; readonly_dirs: one, a colon-separated str, or a
        sequence of them, an empty one for none (NORMJIT_CACHE_READONLY is then not read);
        cache_max_bytes: 0 (the environment's or the default) or more;
        device: a CUDA device index; dram_gbps: plan for this peak DRAM bandwidth in GB/s
        instead of the GPU's (0, the default: NORMJIT_DRAM_GBPS, else the GPU's), e.g. 4814 to
        run the kernels a cache was prewarmed for with `normjit prewarm --arch sm_90:132:4814`
        (an H200) on another part; prewarm: the engine of a prewarm, as `normjit prewarm`'s,
        filling cache_dir (or NORMJIT_CACHE_DIR's) to be shipped: that directory alone
        (NORMJIT_CACHE_READONLY is not read), uncapped, the JIT on whatever NORMJIT_JIT says;
        it raises where the directory cannot be created or written, and precompile raises
        where its kernel could not be written there (readonly_dirs, cache_max_bytes,
        memory_only and jit_disabled left unset). (C: normjit_engine_config,
        normjit_engine_create_ex.)"""
        # The arguments are checked before the library is loaded, so that a wrong one is
        # named whatever the machine has.
        strings = [_path_text(cache_dir, "cache_dir"), _dirs_text(readonly_dirs)]
        # Bounded by the C fields they go into (uint64_t, int), which would wrap a larger value;
        # the library checks dram_gbps's own upper bound.
        cache_max_bytes = _count(cache_max_bytes, "cache_max_bytes", 2**64 - 1)
        device = _count(device, "device", 2**31 - 1)
        dram_gbps = _count(dram_gbps, "dram_gbps", 2**31 - 1)
        lib = library()
        self._lib = lib
        config = _EngineConfig()
        lib.normjit_engine_config_init_sized(ctypes.byref(config), ctypes.sizeof(config))
        config.dram_gbps = dram_gbps
        config.prewarm = int(bool(prewarm))
        config.no_readonly_dirs = int(isinstance(readonly_dirs, (list, tuple))
                                      and not readonly_dirs)
        opts = config.options
        # The C strings must outlive the create call only; keep them with the options anyway.
        self._strings = strings
        opts.device = device
        opts.cache_dir = self._strings[0]
        opts.readonly_dirs = self._strings[1]
        opts.cache_max_bytes = cache_max_bytes
        opts.memory_only = int(memory_only)
        opts.jit_disabled = int(jit_disabled)
        handle = ctypes.c_void_p()
        lib.check(lib.normjit_engine_create_ex(ctypes.byref(config), ctypes.byref(handle)))
        self.handle: Optional[int] = handle.value
        # close() may come from any thread, while others are inside a call (ctypes lets go of
        # the GIL there): the engine is destroyed once, by the last call out.
        self._lock = threading.Lock()
        self._calls = 0  # calls in the library now
        self._closing = False
        self._process = False  # normjit.engine()'s, which lives as long as the process

    def _call(self, function, *args) -> None:
        """function(handle, *args), checked, the engine kept alive until it returns."""
        with self._lock:
            if self.handle is None or self._closing:
                raise ValueError("normjit.Engine: used after close()")
            self._calls += 1
            handle = self.handle
        try:
            self._lib.check(function(handle, *args))
        finally:
            with self._lock:
                self._calls -= 1
                last = self._closing and self._calls == 0 and self.handle is not None
                if last:
                    self.handle = None
            if last:
                self._lib.normjit_engine_destroy(handle)

    def precompile(self, spec: str, arch: str = "sm_90") -> bool:
        """Compiles the kernel of `spec` for `arch` ("sm_90", "sm_90:114" for a part with 114
        SMs, "sm_90:132:4814" for 132 SMs and 4814 GB/s of DRAM: an H200) into the cache, no
        GPU needed. Returns True when this call ran NVRTC, False when the kernel was already
        cached (or another thread's call compiled it while this one waited)."""
        compiled = ctypes.c_int(0)
        self._call(self._lib.normjit_precompile, _text(spec, "spec"), _text(arch, "arch"),
                   ctypes.byref(compiled))
        return bool(compiled.value)

    def prepare(self, spec: str) -> int:
        """The kernel of `spec` for the current CUDA context, compiled or loaded once: an opaque
        handle (normjit_kernel*) owned by the engine, the same for the same spec."""
        kernel = ctypes.c_void_p()
        self._call(self._lib.normjit_prepare, _text(spec, "spec"), ctypes.byref(kernel))
        return kernel.value

    def counters(self) -> Counters:
        """What the engine counted so far (C: normjit_engine_counters_ex)."""
        stats = _EngineStats()
        self._lib.normjit_engine_stats_init_sized(ctypes.byref(stats), ctypes.sizeof(stats))
        self._call(self._lib.normjit_engine_counters_ex, ctypes.byref(stats))
        return Counters(stats.nvrtc_compiles, stats.memory_hits, stats.disk_hits,
                        stats.bad_entries)

    def close(self) -> None:
        """Destroys the engine (once every call in flight in other threads has returned); the
        kernels it prepared become invalid. The process's engine, normjit.engine(), cannot be
        closed: normjit.torch keeps the kernels it prepared."""
        if self._process:
            raise ValueError("normjit.Engine: the process's engine (normjit.engine()) lives as "
                             "long as the process, and normjit.torch keeps its kernels; make an "
                             "Engine of your own to close")
        with self._lock:
            if self.handle is None or self._closing:
                return
            self._closing = True
            handle = self.handle if self._calls == 0 else None
            if handle is not None:
                self.handle = None
        if handle is not None:
            self._lib.normjit_engine_destroy(handle)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_PathLike = Union[str, "os.PathLike[str]"]


def _path_text(value, argument: str) -> Optional[bytes]:
    """A path argument as the C API takes it: None, or the path's bytes."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, os.PathLike)):
        # The file system's encoding, as open() takes a path: a name os.listdir gave (bytes, or
        # a str with surrogate escapes of bytes that are not UTF-8) reaches the same file.
        path = os.fsencode(value)
        if not path:
            raise ValueError(f"normjit.Engine: {argument} is empty (None for the "
                             "environment's or the default)")
        if b"\0" in path:
            raise ValueError(f"normjit.Engine: {argument} {os.fsdecode(path)!r} contains a NUL "
                             "character")
        return path
    raise TypeError(f"normjit.Engine: {argument} must be a str, bytes or os.PathLike, not "
                    f"{type(value).__name__} ({value!r})")


def _dirs_text(value) -> Optional[bytes]:
    """readonly_dirs: None, one path (a str may list several, colon-separated) or a sequence."""
    if value is None or isinstance(value, (str, bytes, os.PathLike)):
        return _path_text(value, "readonly_dirs")
    if isinstance(value, (list, tuple)):
        paths = [_path_text(v, f"readonly_dirs[{i}]") for i, v in enumerate(value)]
        for i, path in enumerate(paths):
            if b":" in path:  # the C API's list is colon-separated: it would split the path
                raise ValueError(f"normjit.Engine: readonly_dirs[{i}] {os.fsdecode(path)!r} "
                                 "contains ':', which separates the layers of the list normjit "
                                 "takes")
        return b":".join(paths) if paths else None  # none: the config's no_readonly_dirs
    raise TypeError(f"normjit.Engine: readonly_dirs must be a str, bytes, an os.PathLike or a "
                    f"list of them, not {type(value).__name__} ({value!r})")


def _index(value) -> int:
    """An integer-like value (operator.index: an int, a NumPy integer, a 0-dim integer tensor)
    that is not a bool; TypeError otherwise. normjit.torch checks its integer arguments so too."""
    if isinstance(value, bool):
        raise TypeError(f"{value!r} is a bool")
    return operator.index(value)


def _count(value, argument: str, most: int) -> int:
    """An int argument from 0 to most (an integer-like value, not a bool)."""
    try:
        number = _index(value)
    except TypeError:
        raise TypeError(f"normjit.Engine: {argument} must be an int, not "
                        f"{type(value).__name__} ({value!r})") from None
    if number < 0:
        raise ValueError(f"normjit.Engine: {argument} must be 0 or more, not {number}")
    if number > most:
        raise ValueError(f"normjit.Engine: {argument} must be at most {most}, not {number}")
    return number


def _text(value: str, argument: str) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"normjit: {argument} must be a str, not {type(value).__name__} "
                        f"({value!r})")
    if "\0" in value:  # the C string would end there
        raise ValueError(f"normjit: {argument} {value!r} contains a NUL character")
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
                made = Engine()
                made._process = True
                _engine = made
    return _engine


def library_version() -> str:
    """The version libnormjit.so was built as, "MAJOR.MINOR.PATCH" (C: normjit_version()); the
    package's own is __version__, and the two are the same for an installed package."""
    return library().normjit_version().decode()


def precompile(spec: str, arch: str = "sm_90") -> bool:
    """Compiles the kernel of `spec` for `arch` into the cache of the process's engine, no GPU
    needed; returns whether NVRTC ran (False: already cached). Raises NormjitError (e.g.
    InvalidArgumentError naming the bad field of the spec)."""
    return engine().precompile(spec, arch)
