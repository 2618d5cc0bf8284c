"""normjit's kernels as PyTorch functions and torch.library custom ops.

An eager call costs one dict lookup before its launch: the decision for a call (launch this
prepared kernel, or fall back for this reason) is cached under a key of everything the
argument checks and the fallback reasons read (op, normalized_shape or groups, eps, grad mode,
and each tensor's class, shape, dtype, device, contiguity and requires_grad), so the checks
run once per kind of call and what follows a hit is torch.empty_like and one call of
normjit_launch on the current stream (through the extension module normjit._launch, or ctypes
where it is missing: normjit._capi.launch_function). The data pointers' alignment is checked
every call.
Kernels are prepared once per shape class (everything but the batch). Under torch.compile the
same functions call the custom ops torch.ops.normjit.*, whose fake implementations give the
output's shape, so that a model traces without graph breaks.

A call normjit cannot serve runs PyTorch's own implementation, with one warning per reason
(NormjitFallbackWarning): a CPU tensor, a dtype other than float32/float16/bfloat16, a
non-contiguous input, an input that requires grad while grad mode is on (no backward yet),
weight/bias of another dtype than the input, an empty input, an eps that is no positive
float32, a view not 16-byte aligned, a problem the library does not take. The warning comes
first; where PyTorch's implementation then raises (e.g. F.layer_norm on CUDA with a bf16
input and a float32 weight), its exception propagates unchanged, as with PyTorch alone.
Arguments that are wrong for PyTorch too (a weight of the wrong shape or on another device,
groups that do not divide the channels, a normalized_shape that is not the input's trailing
shape) raise ValueError naming the argument and its value; group_norm raises PyTorch's own
ValueError where a group has one value (F.group_norm's check).
"""
import threading
import warnings
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

import normjit
from normjit._capi import InvalidArgumentError, UnsupportedError

__all__ = ["rms_norm", "rms_norm_channels", "layer_norm", "group_norm", "warmup",
           "NormjitFallbackWarning"]


class NormjitFallbackWarning(UserWarning):
    """A normjit.torch call ran PyTorch's implementation instead; the message says why."""


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_AFFINE = {(False, False): "none", (True, False): "weight", (True, True): "both"}

# (library op, shape class, dtype, weight?, bias?, device index) -> (normjit_kernel*, elements
# per batch item); or (None, message) when normjit does not take that problem.
_kernels: dict = {}
_prepare_lock = threading.Lock()
_launch = None  # normjit_launch (_capi.launch_function()), bound on first use

# Eager calls: _call_key(...) -> a launch (kernel, batch, eps, device index) or why the call
# falls back. Cleared when full: a key per input shape (the batch is in it), and prefill
# lengths vary.
_calls: dict = {}
_CALLS_MAX = 4096

_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while tracing
_grad_enabled = torch.is_grad_enabled
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
if _raw_stream is None:  # older PyTorch
    def _raw_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream

_FLOAT32_MAX = 3.4028234663852886e38
_FLOAT32_ROUNDS_TO_ZERO = 2.0 ** -150  # half the smallest subnormal: float(eps) would be 0


# ---------------------------------------------------------------------------------------
# Fallback
# ---------------------------------------------------------------------------------------

_warned: set = set()


def _reason_text(code: str, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                 eps: float) -> str:
    if code == "device":
        return f"input on {x.device} (normjit runs on CUDA devices)"
    if code == "dtype":
        return f"input dtype {x.dtype} (normjit takes float32, float16, bfloat16)"
    if code == "layout":
        return (f"non-contiguous input (shape {list(x.shape)}, strides {list(x.stride())}; "
                "normjit takes contiguous row-major tensors)")
    if code == "grad":
        return ("an input requires grad and normjit has no backward yet (run inference under "
                "torch.no_grad() or torch.inference_mode())")
    if code == "param_dtype":
        p = weight if weight is not None and weight.dtype != x.dtype else bias
        return f"weight/bias dtype {p.dtype} differs from the input's {x.dtype}"
    if code == "param_layout":
        return "non-contiguous weight or bias"
    if code == "bias_only":
        return "a bias without a weight (normjit's affine is none, weight or both)"
    if code == "empty":
        return f"empty input (shape {list(x.shape)})"
    if code == "eps":
        return f"eps {eps!r} (normjit computes in float32 and needs a finite eps > 0 there)"
    if code == "align":
        return "a data pointer not 16-byte aligned (a view with a storage offset)"
    return code  # normjit's own message (a problem the library does not take)


def _fallback_warn(op: str, code: str, x: Tensor, weight: Optional[Tensor],
                   bias: Optional[Tensor], eps: float) -> None:
    if _is_compiling():
        return
    key = (op, code)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"normjit.torch.{op}: {_reason_text(code, x, weight, bias, eps)}; "
                  "running PyTorch's implementation", NormjitFallbackWarning, stacklevel=5)


def _why_not(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
             eps: float) -> Optional[str]:
    """None when normjit can serve the call, else a reason code. Traceable by dynamo. The
    alignment of the data pointers is checked at each launch instead."""
    if not x.is_cuda:
        return "device"
    if x.dtype not in _DTYPES:
        return "dtype"
    if not x.is_contiguous():
        return "layout"
    if torch.is_grad_enabled() and (x.requires_grad
                                    or (weight is not None and weight.requires_grad)
                                    or (bias is not None and bias.requires_grad)):
        return "grad"
    if weight is not None:
        if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
            return "param_dtype"
        if not weight.is_contiguous() or (bias is not None and not bias.is_contiguous()):
            return "param_layout"
    elif bias is not None:
        return "bias_only"
    if x.numel() == 0:
        return "empty"
    if not _FLOAT32_ROUNDS_TO_ZERO < eps <= _FLOAT32_MAX:  # what normjit_launch takes
        return "eps"
    return None


# ---------------------------------------------------------------------------------------
# Argument checks (the errors PyTorch would raise too, but naming argument and value)
# ---------------------------------------------------------------------------------------

def _as_shape(op: str, normalized_shape: Union[int, Sequence[int]]) -> Tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    if isinstance(normalized_shape, tuple):
        return normalized_shape
    try:
        return tuple(int(s) for s in normalized_shape)
    except TypeError:
        raise TypeError(f"normjit.torch.{op}: normalized_shape must be an int or a sequence of "
                        f"ints, not {normalized_shape!r}") from None


def _check_tensor(op: str, name: str, t, x: Optional[Tensor] = None) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"normjit.torch.{op}: {name} must be a torch.Tensor, not "
                        f"{type(t).__name__}")
    if x is not None and t.device != x.device:
        raise ValueError(f"normjit.torch.{op}: {name} is on {t.device}, the input on {x.device}")


def _check_param(op: str, name: str, p: Optional[Tensor], x: Tensor, expected: Tuple[int, ...],
                 what: str) -> None:
    if p is None:
        return
    _check_tensor(op, name, p, x)
    if p.shape != expected:
        raise ValueError(f"normjit.torch.{op}: {name} has shape {list(p.shape)}; expected "
                         f"{list(expected)} ({what})")


def _check_rows(op: str, x: Tensor, shape: Tuple[int, ...], weight: Optional[Tensor],
                bias: Optional[Tensor]) -> None:
    _check_tensor(op, "input", x)
    n = len(shape)
    if n == 0 or n > x.dim() or x.shape[x.dim() - n:] != shape:
        raise ValueError(f"normjit.torch.{op}: normalized_shape {list(shape)} is not the "
                         f"trailing shape of the input, {list(x.shape)}")
    _check_param(op, "weight", weight, x, shape, "normalized_shape")
    _check_param(op, "bias", bias, x, shape, "normalized_shape")


def _check_channels(op: str, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                    groups: int = 0) -> None:
    _check_tensor(op, "input", x)
    if x.dim() < 2:
        raise ValueError(f"normjit.torch.{op}: input of shape {list(x.shape)}; expected "
                         "[N, C, *spatial] (at least 2 dims)")
    channels = x.shape[1]
    if groups:
        if not isinstance(groups, int) or groups < 1 or channels % groups != 0:
            raise ValueError(f"normjit.torch.{op}: num_groups {groups!r} does not divide the "
                             f"input's {channels} channels (input {list(x.shape)})")
        # F.group_norm's own check (ValueError "Expected more than 1 value per channel when
        # training"), which it makes in eval too: a group of one value.
        F._verify_batch_size([x.shape[0] * channels // groups, groups] + list(x.shape[2:]))
    _check_param(op, "weight", weight, x, (channels,), "the input's channels")
    _check_param(op, "bias", bias, x, (channels,), "the input's channels")


# ---------------------------------------------------------------------------------------
# Prepare
# ---------------------------------------------------------------------------------------

def _rows_spec(op: str, shape: Tuple[int, ...], normalized_dims: int, dtype: torch.dtype,
               has_weight: bool, has_bias: bool, eps: float) -> str:
    """The canonical spec text of a trailing-dims problem (rmsnorm, layernorm)."""
    return (f"op={op} shape={','.join(map(str, shape))} dtype={_DTYPES[dtype]} "
            f"normalized_dims={normalized_dims} affine={_AFFINE[has_weight, has_bias]} "
            f"eps={float(eps)!r}")


def _channels_spec(op: str, shape: Tuple[int, ...], groups: int, dtype: torch.dtype,
                   has_weight: bool, has_bias: bool, eps: float) -> str:
    """The canonical spec text of x [N, C, *spatial]: rmsnorm's channel form or groupnorm."""
    return (f"op={op} shape={','.join(map(str, shape))} dtype={_DTYPES[dtype]}"
            + (f" groups={groups}" if op == "groupnorm" else " normalized_dims=0")
            + f" affine={_AFFINE[has_weight, has_bias]} eps={float(eps)!r}")


def _prepare(key: tuple, spec: str, per_item: int) -> tuple:
    global _launch
    with _prepare_lock:
        entry = _kernels.get(key)
        if entry is not None:
            return entry
        device = key[-1]
        try:
            with torch.cuda.device(device):
                kernel = normjit.engine().prepare(spec)
            entry = (kernel, per_item)
        except (UnsupportedError, InvalidArgumentError) as e:
            # Arguments were checked above: what the library refuses here is a problem it
            # does not take (too many elements in a row, ...), which PyTorch still computes.
            entry = (None, e.message)
        if _launch is None:
            _launch = normjit._capi.launch_function()
        _kernels[key] = entry
        return entry


_multi_device = False
try:
    _multi_device = torch.cuda.is_available() and torch.cuda.device_count() > 1
except Exception:  # noqa: BLE001 - no driver: single device or none
    pass


# ---------------------------------------------------------------------------------------
# Eager calls: the cached decision, then the launch
# ---------------------------------------------------------------------------------------
# `op` is the public name; `arg` its non-tensor argument: normalized_shape (a tuple) for
# rms_norm and layer_norm, num_groups for group_norm, 0 for rms_norm_channels.

def _check(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor]) -> None:
    if op == "rms_norm" or op == "layer_norm":
        _check_rows(op, x, arg, weight, bias)
    else:
        _check_channels(op, x, weight, bias, arg)


def _eps(x: Tensor, eps: Optional[float]) -> float:
    """eps None (rms_norm's default) is torch.finfo(dtype).eps, as in PyTorch."""
    if eps is not None:
        return eps
    return torch.finfo(x.dtype).eps if x.is_floating_point() else 1e-6


def _decide(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
            eps: Optional[float]) -> Union[tuple, str]:
    """Checks the arguments (raising what the checks raise), then: a launch (kernel, batch,
    eps, device index), or why normjit cannot serve the call (a reason code, or the library's
    message for a problem it does not take)."""
    _check(op, arg, x, weight, bias)
    eps = _eps(x, eps)
    why = _why_not(x, weight, bias, eps)
    if why:
        return why
    device = x.device.index
    has_weight, has_bias = weight is not None, bias is not None
    if op == "rms_norm" or op == "layer_norm":
        library_op = "rmsnorm" if op == "rms_norm" else "layernorm"
        per_item = 1
        for s in arg:
            per_item *= s
        key = (library_op, arg, x.dtype, has_weight, has_bias, device)
        spec = _rows_spec(library_op, (x.numel() // per_item,) + arg, len(arg), x.dtype,
                          has_weight, has_bias, eps)
    else:
        library_op = "groupnorm" if op == "group_norm" else "rmsnorm"
        per_item = x.numel() // x.shape[0]
        key = (library_op, tuple(x.shape[1:]), arg, x.dtype, has_weight, has_bias, device)
        spec = _channels_spec(library_op, tuple(x.shape), arg, x.dtype, has_weight, has_bias,
                              eps)
    kernel, per_item = _prepare(key, spec, per_item)
    if kernel is None:
        return per_item  # the library's message
    return (kernel, x.numel() // per_item, float(eps), device)


def _tensor_key(t: Tensor) -> tuple:
    """What the argument checks and _why_not read of a tensor (all but its data pointer)."""
    return (t.__class__, t.shape, t.dtype, t.device, t.is_contiguous(), t.requires_grad)


_NO_TENSOR = (None,)


def _decision(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
              eps: Optional[float]) -> Union[tuple, str]:
    """_decide's answer, cached for calls of the same key."""
    key = None
    if eps is None or eps.__class__ is float:
        try:
            # One flat tuple (nested ones are hashed and compared one level deeper); a tensor
            # key starts with a class, so None marks an absent weight or bias unambiguously.
            # x's fields are spelled out (the common call's tuple built in one go); weight
            # and bias take _tensor_key's, which reads the same fields.
            key = (op, arg, eps, _grad_enabled(), x.__class__, x.shape, x.dtype, x.device,
                   x.is_contiguous(), x.requires_grad,
                   *(_NO_TENSOR if weight is None else _tensor_key(weight)),
                   *(_NO_TENSOR if bias is None else _tensor_key(bias)))
            return _calls[key]
        except KeyError:
            pass
        except (AttributeError, TypeError):  # an argument that is no tensor, or unhashable
            key = None
    decision = _decide(op, arg, x, weight, bias, eps)
    if key is not None:
        if len(_calls) >= _CALLS_MAX:
            _calls.clear()
        _calls[key] = decision
    return decision


def _eager(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
           eps: Optional[float]) -> Optional[Tensor]:
    """normjit's y; or None, after the fallback warning, when PyTorch's implementation must
    compute this call."""
    decision = _decision(op, arg, x, weight, bias, eps)
    if decision.__class__ is tuple:
        kernel, batch, eps_f, device = decision
        xp = x.data_ptr()
        wp = weight.data_ptr() if weight is not None else None
        bp = bias.data_ptr() if bias is not None else None
        if not (xp | (wp or 0) | (bp or 0)) & 15:
            y = torch.empty_like(x)
            if _multi_device and torch.cuda.current_device() != device:
                with torch.cuda.device(device):
                    status = _launch(kernel, xp, y.data_ptr(), wp, bp, batch, eps_f,
                                     _raw_stream(device))
            else:
                status = _launch(kernel, xp, y.data_ptr(), wp, bp, batch, eps_f,
                                 _raw_stream(device))
            if status:
                raise normjit._capi.library().error(status)
            return y
        decision = "align"
    _fallback_warn(op, decision, x, weight, bias, eps)
    return None


def _traced_why_not(op: str, arg, x: Tensor, weight: Optional[Tensor],
                    bias: Optional[Tensor], eps: float) -> Optional[str]:
    """Under torch.compile: the checks and the fallback reason, traced by dynamo."""
    _check(op, arg, x, weight, bias)
    return _why_not(x, weight, bias, eps)


# ---------------------------------------------------------------------------------------
# PyTorch's implementations (the fallback)
# ---------------------------------------------------------------------------------------

def _torch_rms_norm_channels(x: Tensor, weight: Optional[Tensor], eps: float) -> Tensor:
    """x / sqrt(mean(x^2, dim=1) + eps) * weight, with statistics in float32 (or wider)."""
    acc = torch.promote_types(x.dtype, torch.float32) if x.is_floating_point() else x.dtype
    xf = x.to(acc)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(acc).view(1, -1, *([1] * (x.dim() - 2)))
    return y.to(x.dtype)


# ---------------------------------------------------------------------------------------
# Custom ops (what torch.compile sees) and their fake implementations
# ---------------------------------------------------------------------------------------

def _fresh(y: Tensor, x: Tensor) -> Tensor:
    """The fake implementation promised a fresh contiguous tensor of the input's dtype."""
    return y.to(x.dtype).contiguous()


@torch.library.custom_op("normjit::rms_norm", mutates_args=())
def _rms_norm_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                 eps: float) -> Tensor:
    shape = tuple(normalized_shape)
    y = _eager("rms_norm", shape, input, weight, None, eps)
    return y if y is not None else _fresh(F.rms_norm(input, shape, weight, eps), input)


@torch.library.custom_op("normjit::rms_norm_channels", mutates_args=())
def _rms_norm_channels_op(input: Tensor, weight: Optional[Tensor], eps: float) -> Tensor:
    y = _eager("rms_norm_channels", 0, input, weight, None, eps)
    return y if y is not None else _fresh(_torch_rms_norm_channels(input, weight, eps), input)


@torch.library.custom_op("normjit::layer_norm", mutates_args=())
def _layer_norm_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                   bias: Optional[Tensor], eps: float) -> Tensor:
    shape = tuple(normalized_shape)
    y = _eager("layer_norm", shape, input, weight, bias, eps)
    return y if y is not None else _fresh(F.layer_norm(input, shape, weight, bias, eps), input)


@torch.library.custom_op("normjit::group_norm", mutates_args=())
def _group_norm_op(input: Tensor, num_groups: int, weight: Optional[Tensor],
                   bias: Optional[Tensor], eps: float) -> Tensor:
    y = _eager("group_norm", num_groups, input, weight, bias, eps)
    return y if y is not None else _fresh(F.group_norm(input, num_groups, weight, bias, eps),
                                          input)


def _fake(input: Tensor, *args) -> Tensor:
    return input.new_empty(input.shape)


for _op in (_rms_norm_op, _rms_norm_channels_op, _layer_norm_op, _group_norm_op):
    _op.register_fake(_fake)


# ---------------------------------------------------------------------------------------
# The public functions: torch.nn.functional's signatures
# ---------------------------------------------------------------------------------------
# Each runs PyTorch's implementation when normjit cannot serve the call; a patched layer
# passes its class's own forward and itself (fallback(module, x)) to run instead.

def _rms_norm(x: Tensor, shape: Union[int, Sequence[int]], weight: Optional[Tensor],
              eps: Optional[float], fallback: Optional[Callable] = None,
              module: Optional[torch.nn.Module] = None) -> Tensor:
    if shape.__class__ is not tuple:
        shape = _as_shape("rms_norm", shape)
    if _is_compiling():
        eps_f = _eps(x, eps)
        if _traced_why_not("rms_norm", shape, x, weight, None, eps_f) is None:
            return torch.ops.normjit.rms_norm(x, list(shape), weight, eps_f)
    else:
        y = _eager("rms_norm", shape, x, weight, None, eps)
        if y is not None:
            return y
    return fallback(module, x) if fallback else F.rms_norm(x, shape, weight, eps)


def _rms_norm_channels(x: Tensor, weight: Optional[Tensor], eps: float,
                       fallback: Optional[Callable] = None,
                       module: Optional[torch.nn.Module] = None) -> Tensor:
    if _is_compiling():
        if _traced_why_not("rms_norm_channels", 0, x, weight, None, eps) is None:
            return torch.ops.normjit.rms_norm_channels(x, weight, eps)
    else:
        y = _eager("rms_norm_channels", 0, x, weight, None, eps)
        if y is not None:
            return y
    return fallback(module, x) if fallback else _torch_rms_norm_channels(x, weight, eps)


def _layer_norm(x: Tensor, shape: Union[int, Sequence[int]], weight: Optional[Tensor],
                bias: Optional[Tensor], eps: float, fallback: Optional[Callable] = None,
                module: Optional[torch.nn.Module] = None) -> Tensor:
    if shape.__class__ is not tuple:
        shape = _as_shape("layer_norm", shape)
    if _is_compiling():
        if _traced_why_not("layer_norm", shape, x, weight, bias, eps) is None:
            return torch.ops.normjit.layer_norm(x, list(shape), weight, bias, eps)
    else:
        y = _eager("layer_norm", shape, x, weight, bias, eps)
        if y is not None:
            return y
    return fallback(module, x) if fallback else F.layer_norm(x, shape, weight, bias, eps)


def _group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor], bias: Optional[Tensor],
                eps: float, fallback: Optional[Callable] = None,
                module: Optional[torch.nn.Module] = None) -> Tensor:
    if _is_compiling():
        if _traced_why_not("group_norm", num_groups, x, weight, bias, eps) is None:
            return torch.ops.normjit.group_norm(x, num_groups, weight, bias, eps)
    else:
        y = _eager("group_norm", num_groups, x, weight, bias, eps)
        if y is not None:
            return y
    return fallback(module, x) if fallback else F.group_norm(x, num_groups, weight, bias, eps)


def rms_norm(input: Tensor, normalized_shape: Union[int, Sequence[int]],
             weight: Optional[Tensor] = None, eps: Optional[float] = None) -> Tensor:
    """torch.nn.functional.rms_norm: RMSNorm over the trailing `normalized_shape` of input,
    statistics in float32; eps None means torch.finfo(input.dtype).eps, as in PyTorch."""
    return _rms_norm(input, normalized_shape, weight, eps)


def rms_norm_channels(input: Tensor, weight: Optional[Tensor] = None,
                      eps: float = 1e-5) -> Tensor:
    """RMSNorm's channel form: input [N, C, *spatial] reduced over dim 1,
    x / sqrt(mean(x^2, dim=1, keepdim=True) + eps), times weight [C] when given."""
    return _rms_norm_channels(input, weight, eps)


def layer_norm(input: Tensor, normalized_shape: Union[int, Sequence[int]],
               weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm: over the trailing `normalized_shape`, biased variance,
    statistics in float32."""
    return _layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input: Tensor, num_groups: int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.group_norm: input [N, C, *spatial], num_groups dividing C, weight
    and bias [C]."""
    return _group_norm(input, num_groups, weight, bias, eps)


def _param(module: torch.nn.Module, name: str) -> Optional[Tensor]:
    """module.<name>, without nn.Module.__getattr__ (reached only after a failed attribute
    lookup: about a microsecond) when it is a registered parameter (or None); any other
    attribute (a parametrization's property, a buffer) through getattr."""
    params = module._parameters
    return params[name] if name in params else getattr(module, name)


# ---------------------------------------------------------------------------------------
# Before a CUDA-graph capture
# ---------------------------------------------------------------------------------------

def prepared_kernels() -> int:
    """How many kernels (shape classes) this process has prepared."""
    return sum(1 for kernel, _ in _kernels.values() if kernel is not None)


def warmup(fn: Callable, *args, stream: Optional["torch.cuda.Stream"] = None, **kwargs) -> int:
    """Runs fn(*args, **kwargs) once under torch.no_grad() on `stream` (default: a new side
    stream) and waits for it, so that every normjit kernel of those shapes is prepared
    (compiled or loaded from the cache) before torch.cuda.graph captures fn: preparing is
    not something a capture can record. Pass the stream the capture will use, if known.
    Returns how many kernels were newly prepared."""
    before = prepared_kernels()
    stream = stream if stream is not None else torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        fn(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    stream.synchronize()
    return prepared_kernels() - before
