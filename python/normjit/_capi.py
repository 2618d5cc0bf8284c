"""The binding of the C API (runtime/include/normjit/normjit.h) by ctypes: the one copy.

Everything of the header that Python uses is declared here once: the enums, the structs
(engine options, launch arguments, engine counters) and every function's prototype (ctypes
would otherwise pass Python ints as C int and truncate pointers and int64 values).
tests/python/test_binding.py parses the header and compares it with these declarations, so the
two cannot drift apart.

Three functions have a second way in: launch_function() gives normjit_launch,
launch_ex_function() normjit_launch_ex and launch_backward_function() normjit_launch_backward,
through the small extension module normjit._launch
(python/normjit/_launch.c, compiled against the header's prototypes) where it is installed,
calling the same loaded library as ctypes without ctypes' argument conversion (about 1.3 us of
its 1.7 us per call); through ctypes otherwise.
"""
from __future__ import annotations

import ctypes
import enum
import os
from pathlib import Path
from typing import Optional


class Status(enum.IntEnum):
    """enum normjit_status"""
    OK = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_UNSUPPORTED = 2
    ERROR_COMPILE = 3
    ERROR_DRIVER = 4
    ERROR_NO_DEVICE = 5
    ERROR_CACHE_MISS = 6
    ERROR_INTERNAL = 7


class Dtype(enum.IntEnum):
    """enum normjit_dtype"""
    F32 = 0
    F16 = 1
    BF16 = 2
    E4M3 = 3  # output only (out_dtype)
    E5M2 = 4  # output only (out_dtype)


# C enum name -> (Python enum, prefix of its enumerators in C).
ENUMS = {
    "normjit_status": (Status, "NORMJIT_"),
    "normjit_dtype": (Dtype, "NORMJIT_"),
}


class EngineOptions(ctypes.Structure):
    """struct normjit_engine_options"""
    _fields_ = [
        ("device", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("readonly_dirs", ctypes.c_char_p),
        ("cache_max_bytes", ctypes.c_uint64),
        ("memory_only", ctypes.c_int),
        ("jit_disabled", ctypes.c_int),
    ]


class EngineConfig(ctypes.Structure):
    """struct normjit_engine_config: fill it with normjit_engine_config_init (which sets
    `size`), then set what differs from the defaults."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("options", EngineOptions),
        ("dram_gbps", ctypes.c_int),
        ("prewarm", ctypes.c_int),
        ("no_readonly_dirs", ctypes.c_int),
    ]


class LaunchArgs(ctypes.Structure):
    """struct normjit_launch_args: fill it with normjit_launch_args_init (which sets `size`),
    then set what the kernel's spec asks for. Device pointers, `const float*` included, are
    void pointers (Python ints); each strides field is [outer, inner] in elements."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("x", ctypes.c_void_p),
        ("y", ctypes.c_void_p),
        ("weight", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("batch", ctypes.c_int64),
        ("eps", ctypes.c_double),
        ("residual", ctypes.c_void_p),
        ("residual_out", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("mean", ctypes.c_void_p),
        ("rstd", ctypes.c_void_p),
        ("inner_rows", ctypes.c_int64),
        ("x_strides", ctypes.c_int64 * 2),
        ("y_strides", ctypes.c_int64 * 2),
        ("residual_strides", ctypes.c_int64 * 2),
        ("residual_out_strides", ctypes.c_int64 * 2),
    ]


class BackwardArgs(ctypes.Structure):
    """struct normjit_backward_args: fill it with normjit_backward_args_init (which sets
    `size`), then set what the backward kernel's spec asks for. Device pointers are void
    pointers (Python ints)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("x", ctypes.c_void_p),
        ("dy", ctypes.c_void_p),
        ("mean", ctypes.c_void_p),
        ("rstd", ctypes.c_void_p),
        ("weight", ctypes.c_void_p),
        ("dx", ctypes.c_void_p),
        ("dweight", ctypes.c_void_p),
        ("dbias", ctypes.c_void_p),
        ("batch", ctypes.c_int64),
        ("dresidual_out", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
    ]


class EngineStats(ctypes.Structure):
    """struct normjit_engine_stats: fill it with normjit_engine_stats_init (which sets `size`),
    then pass it to normjit_engine_counters_ex."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("nvrtc_compiles", ctypes.c_uint64),
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("bad_entries", ctypes.c_uint64),
    ]


# C struct name -> its ctypes Structure.
STRUCTS = {
    "normjit_engine_options": EngineOptions,
    "normjit_engine_config": EngineConfig,
    "normjit_launch_args": LaunchArgs,
    "normjit_backward_args": BackwardArgs,
    "normjit_engine_stats": EngineStats,
}

_vp = ctypes.c_void_p
_int = ctypes.c_int
_i64 = ctypes.c_int64
_f64 = ctypes.c_double
_str = ctypes.c_char_p
_p_vp = ctypes.POINTER(ctypes.c_void_p)  # normjit_engine**, normjit_kernel**
_p_int = ctypes.POINTER(ctypes.c_int)
_p_i64 = ctypes.POINTER(ctypes.c_int64)
_p_u64 = ctypes.POINTER(ctypes.c_uint64)
_p_opts = ctypes.POINTER(EngineOptions)
_p_config = ctypes.POINTER(EngineConfig)
_p_args = ctypes.POINTER(LaunchArgs)
_p_bwd = ctypes.POINTER(BackwardArgs)
_p_stats = ctypes.POINTER(EngineStats)

# Every function of normjit.h: name -> (restype, argtypes). Opaque handles (normjit_engine*,
# normjit_kernel*, CUstream) are void pointers; enums are C ints.
PROTOTYPES = {
    "normjit_engine_options_init": (None, [_p_opts]),
    "normjit_engine_create": (_int, [_p_opts, _p_vp]),
    "normjit_engine_destroy": (None, [_vp]),
    "normjit_engine_config_init": (None, [_p_config]),
    # config, size: the struct's sizeof where the caller was built (here ctypes')
    "normjit_engine_config_init_sized": (None, [_p_config, ctypes.c_size_t]),
    "normjit_engine_create_ex": (_int, [_p_config, _p_vp]),
    "normjit_last_error": (_str, []),
    "normjit_status_name": (_str, [_int]),
    "normjit_version": (_str, []),
    # engine, x, y, weight, shape, ndim, normalized_dims, dtype, eps, stream
    "normjit_rmsnorm": (_int, [_vp, _vp, _vp, _vp, _p_i64, _int, _int, _int, _f64, _vp]),
    # engine, x, y, weight, bias, shape, ndim, normalized_dims, dtype, eps, stream
    "normjit_layernorm": (_int, [_vp, _vp, _vp, _vp, _vp, _p_i64, _int, _int, _int, _f64, _vp]),
    # engine, x, y, weight, bias, shape, ndim, groups, dtype, eps, stream
    "normjit_groupnorm": (_int, [_vp, _vp, _vp, _vp, _vp, _p_i64, _int, _i64, _int, _f64, _vp]),
    # engine, spec, out
    "normjit_prepare": (_int, [_vp, _str, _p_vp]),
    # kernel, x, y, weight, bias, batch, eps, stream
    "normjit_launch": (_int, [_vp, _vp, _vp, _vp, _vp, _i64, _f64, _vp]),
    "normjit_launch_args_init": (None, [_p_args]),
    "normjit_launch_args_init_sized": (None, [_p_args, ctypes.c_size_t]),
    # kernel, args, stream
    "normjit_launch_ex": (_int, [_vp, _p_args, _vp]),
    "normjit_backward_args_init": (None, [_p_bwd]),
    "normjit_backward_args_init_sized": (None, [_p_bwd, ctypes.c_size_t]),
    # kernel, args, stream
    "normjit_launch_backward": (_int, [_vp, _p_bwd, _vp]),
    # engine, spec, arch, compiled
    "normjit_precompile": (_int, [_vp, _str, _str, _p_int]),
    # engine, nvrtc_compiles, memory_hits, disk_hits
    "normjit_engine_counters": (_int, [_vp, _p_u64, _p_u64, _p_u64]),
    "normjit_engine_stats_init": (None, [_p_stats]),
    "normjit_engine_stats_init_sized": (None, [_p_stats, ctypes.c_size_t]),
    # engine, stats
    "normjit_engine_counters_ex": (_int, [_vp, _p_stats]),
}


class NormjitError(RuntimeError):
    """A failed normjit call: `status` (a Status), `status_name` (as the C API names it) and
    `message` (normjit's own, e.g. "invalid argument 'groups' = 3: must divide ...")."""

    def __init__(self, status: int, status_name: str, message: str):
        super().__init__(f"{message} [{status_name}]" if message else status_name)
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.status_name = status_name
        self.message = message


class InvalidArgumentError(NormjitError, ValueError):
    """NORMJIT_ERROR_INVALID_ARGUMENT: the message names the argument and its value."""


class UnsupportedError(NormjitError):
    """NORMJIT_ERROR_UNSUPPORTED"""


class CompileError(NormjitError):
    """NORMJIT_ERROR_COMPILE: the message carries the NVRTC log, options and source."""


class DriverError(NormjitError):
    """NORMJIT_ERROR_DRIVER"""


class NoDeviceError(NormjitError):
    """NORMJIT_ERROR_NO_DEVICE"""


class CacheMissError(NormjitError):
    """NORMJIT_ERROR_CACHE_MISS (NORMJIT_JIT=off and the kernel is in no cache layer)"""


ERRORS = {
    Status.ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    Status.ERROR_UNSUPPORTED: UnsupportedError,
    Status.ERROR_COMPILE: CompileError,
    Status.ERROR_DRIVER: DriverError,
    Status.ERROR_NO_DEVICE: NoDeviceError,
    Status.ERROR_CACHE_MISS: CacheMissError,
}


def library_path() -> Path:
    """libnormjit.so: $NORMJIT_LIBRARY when set (a build tree's, for development), else the
    one installed inside this package."""
    override = os.environ.get("NORMJIT_LIBRARY")
    return Path(override) if override else Path(__file__).resolve().parent / "libnormjit.so"


class Library:
    """libnormjit.so with every prototype of PROTOTYPES declared."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise ImportError(f"normjit: cannot load {path}: {e}") from e
        for name, (restype, argtypes) in PROTOTYPES.items():
            fn = getattr(self.lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def error(self, status: int) -> NormjitError:
        """The exception of a failed call (status != OK), with the calling thread's message."""
        name = (self.normjit_status_name(status) or b"?").decode()
        message = (self.normjit_last_error() or b"").decode(errors="replace")
        return ERRORS.get(status, NormjitError)(status, name, message)

    def check(self, status: int) -> None:
        if status != Status.OK:
            raise self.error(status)


_library: Optional[Library] = None


def library() -> Library:
    """The process's libnormjit.so, loaded on first use."""
    global _library
    if _library is None:
        _library = Library(library_path())
    return _library


def launch_function():
    """normjit_launch of library() as a Python callable (kernel, x, y, weight, bias, batch,
    eps, stream) -> status (an int; 0 is OK, otherwise library().error(status) is the
    exception): the extension module normjit._launch's where it is installed, bound to the
    address of that library's function (so that NORMJIT_LIBRARY is honoured and one copy of
    the library is loaded), else the ctypes function."""
    lib = library()
    try:
        from normjit import _launch
    except ImportError:
        return lib.normjit_launch
    _launch.bind(ctypes.cast(lib.normjit_launch, ctypes.c_void_p).value)
    return _launch.launch


def launch_ex_function():
    """normjit_launch_ex of library() as a Python callable (kernel, x, y, weight, bias, batch,
    eps, residual, residual_out, scale, mean, rstd, stream, rows) -> status, the fields of
    normjit_launch_args flattened: pointers are ints or None (x, y and kernel ints), rows None
    (every tensor's rows contiguous) or (inner_rows, x_strides[0], x_strides[1], y_strides[0],
    y_strides[1], residual_strides[0], residual_strides[1], residual_out_strides[0],
    residual_out_strides[1]). The extension module normjit._launch's where it is installed
    (bound to this library's normjit_launch_ex and normjit_launch_args_init_sized), else a
    function that fills a LaunchArgs with normjit_launch_args_init_sized and calls the ctypes
    function."""
    lib = library()
    try:
        from normjit import _launch
        bind_ex = _launch.bind_ex
    except (ImportError, AttributeError):  # not installed, or built before launch_ex existed
        return _ctypes_launch_ex(lib)
    address = ctypes.cast(lib.normjit_launch_ex, ctypes.c_void_p).value
    bind_ex(address, ctypes.cast(lib.normjit_launch_args_init_sized, ctypes.c_void_p).value)
    return _launch.launch_ex


def _ctypes_launch_ex(lib: Library):
    # The sized init with ctypes' sizeof: the plain one fills the first published struct alone
    # (for programs built before the header's macro), whose size hides the later fields.
    init, launch_ex = lib.normjit_launch_args_init_sized, lib.normjit_launch_ex

    def launch(kernel, x, y, weight, bias, batch, eps, residual, residual_out, scale, mean,
               rstd, stream, rows):
        args = LaunchArgs()
        init(ctypes.byref(args), ctypes.sizeof(args))
        args.x, args.y, args.weight, args.bias = x, y, weight, bias
        args.batch, args.eps = batch, eps
        args.residual, args.residual_out, args.scale = residual, residual_out, scale
        args.mean, args.rstd = mean, rstd
        if rows is not None:
            (args.inner_rows, args.x_strides[0], args.x_strides[1], args.y_strides[0],
             args.y_strides[1], args.residual_strides[0], args.residual_strides[1],
             args.residual_out_strides[0], args.residual_out_strides[1]) = rows
        return launch_ex(kernel, ctypes.byref(args), stream)
    return launch


def launch_backward_function():
    """normjit_launch_backward of library() as a Python callable (kernel, x, dy, mean, rstd,
    weight, dx, dweight, dbias, batch, stream[, dresidual_out[, bias]]) -> status, the fields of
    normjit_backward_args flattened: pointers are ints or None (kernel, x, dy, rstd and dx ints;
    mean None for rmsnorm, weight/dweight/dbias None where the spec has no such parameter,
    dresidual_out None unless the spec has a residual, bias None unless the spec has an
    activation and affine both). The extension
    module normjit._launch's where it is installed (bound to this library's
    normjit_launch_backward and normjit_backward_args_init_sized), else a function that fills a
    BackwardArgs with normjit_backward_args_init_sized and calls the ctypes function."""
    lib = library()
    try:
        from normjit import _launch
        bind_backward = _launch.bind_backward
    except (ImportError, AttributeError):  # not installed, or built before launch_backward
        return _ctypes_launch_backward(lib)
    bind_backward(ctypes.cast(lib.normjit_launch_backward, ctypes.c_void_p).value,
                  ctypes.cast(lib.normjit_backward_args_init_sized, ctypes.c_void_p).value)
    return _launch.launch_backward


def _ctypes_launch_backward(lib: Library):
    # The sized init, as _ctypes_launch_ex's: the plain one's size would drop dresidual_out
    # and bias, which came after the first published struct.
    init, launch_backward = lib.normjit_backward_args_init_sized, lib.normjit_launch_backward

    def launch(kernel, x, dy, mean, rstd, weight, dx, dweight, dbias, batch, stream,
               dresidual_out=None, bias=None):
        args = BackwardArgs()
        init(ctypes.byref(args), ctypes.sizeof(args))
        args.x, args.dy, args.mean, args.rstd, args.weight = x, dy, mean, rstd, weight
        args.dx, args.dweight, args.dbias, args.batch = dx, dweight, dbias, batch
        args.dresidual_out, args.bias = dresidual_out, bias
        return launch_backward(kernel, ctypes.byref(args), stream)
    return launch
