"""normjit's kernels as PyTorch functions and torch.library custom ops.

An eager call costs one dict lookup before its launch (and one C call reading whether
torch.autocast is on): the decision for a call (launch this
prepared kernel, or fall back for this reason) is cached under a key of everything the
argument checks and the fallback reasons read (op, normalized_shape or groups, eps, the variant
arguments, grad mode, and each tensor's class, shape, dtype, device, contiguity (its strides
where it is not contiguous) and requires_grad), so the checks run once per kind of call
and what follows a hit is the outputs' torch.empty and one call of normjit_launch on the current
stream (through the extension module normjit._launch, or ctypes where it is missing:
normjit._capi.launch_function). Calls that need the variant axes (weight_offset, out_dtype and
scale, return_stats, the residual of add_rms_norm and add_layer_norm, weight/bias of another dtype
than the input, strided rows) launch through normjit_launch_ex the same way
(normjit._capi.launch_ex_function); an input with strided rows adds one dict lookup keyed by its
strides. The data pointers' alignment is checked every call.
Kernels are prepared once per shape class (everything but the batch). Under torch.compile the
same functions call the custom ops torch.ops.normjit.*, whose fake implementations give the
outputs' shapes and dtypes, so that a model traces without graph breaks.

rms_norm and layer_norm take weight/bias of another dtype than the input where PyTorch computes
that case on CUDA, with PyTorch's result dtype: rms_norm a weight of any of float32, float16,
bfloat16 (F.rms_norm returns the input's dtype); layer_norm none (F.layer_norm on CUDA raises
for every mix: such calls fall back and raise PyTorch's exception). They read inputs whose
normalized dims are contiguous and whose leading dims collapse into at most two levels of row
strides (a slice of a wider tensor, per-head [tokens, heads, dim] views of a qkv projection)
without a copy, and return a contiguous result. rms_norm_channels and group_norm (and the
modules that call them) read a channels-last input (torch.channels_last, channels_last_3d, and
[N, L, C] memory for [N, C, L]) in place through normjit's layout=nhwc kernels, and return a
result in the input's memory format: channels last stays channels last, contiguous stays
contiguous.

A call normjit cannot serve runs PyTorch's implementation (for the variant arguments and the
add_* functions, the PyTorch expression each docstring gives), with one warning per reason
(NormjitFallbackWarning): a CPU tensor; a dtype other than float32/float16/bfloat16; a
non-contiguous input normjit cannot address (rms_norm, layer_norm, add_*: normalized dims not
contiguous, leading dims that do not collapse into two levels of row strides, a broadcast
(stride 0) leading dim, or a row stride that is no multiple of the kernel's vector width, which
the library's message names; rms_norm_channels, layer_norm_channels and group_norm: a
non-contiguous input that is not channels last); an input (or residual) that requires grad while
grad mode is on, in a call that is forward-only in normjit (rms_norm, layer_norm and the add_*
functions with keyword variants other than weight_offset and activation, the add_* functions in
place); weight/bias of a
dtype PyTorch refuses for that op (layer_norm, rms_norm_channels,
layer_norm_channels, group_norm: any other than the input's; the add_* functions take any one
of float32, float16, bfloat16), weight and bias of two dtypes, or non-contiguous weight/bias;
a bias without a weight; an empty input; an eps that is no positive float32; a view not 16-byte
aligned (or a residual or row the kernel's vector width
finds misaligned, which the library's message names); fp8 output on a GPU before sm_89 (the
library's message); a problem the library does not take; under torch.autocast, a call of
layer_norm or rms_norm without keyword variants, or of layer_norm_channels or group_norm (and
the modules), with an input of float16 or bfloat16, whose PyTorch counterpart autocast runs in
float32 (CUDA's float32 list as the installed PyTorch registers it: the result is then float32,
as PyTorch's). The warning comes
first; where PyTorch's implementation then raises (e.g. F.layer_norm on CUDA with a bfloat16
input and a float32 weight), its exception propagates unchanged, as with PyTorch alone (on CPU
tensors PyTorch's mixed-dtype kernels compute some of those cases, and so does the fallback).
Arguments that are wrong for PyTorch too (a weight of the wrong shape or on another device,
groups that do not divide the channels, a normalized_shape that is not the input's trailing
shape) and wrong variant arguments (a residual of another shape or dtype, an fp8 out_dtype
without scale or a scale without one, weight_offset without a weight) raise ValueError naming
the argument and its value; group_norm raises PyTorch's own ValueError where a group has one
value (F.group_norm's check).

The activation keyword (activation=None, 'silu' or 'gelu'; rms_norm, rms_norm_channels,
layer_norm, group_norm, add_rms_norm, add_layer_norm, and the modules) applies F.silu or F.gelu
(approximate='none') to y after the affine step (and the weight offset), before the output
dtype's conversion (fp8: before the scale), in the same kernel; h and the statistics are the
norm's. Calls with an activation train as those without (below): the backward kernel of the
spec with the activation takes dy through its derivative at the forward's xhat * w + b (the
bias passed to it).

Training (the section "Training" below): rms_norm and layer_norm without their keyword variants or
with weight_offset and/or an activation alone (Gemma's RMSNorm: its weight's gradient is that of
the weight used, weight_offset + weight), add_rms_norm and add_layer_norm likewise (not in place:
the norm's backward kernel on the saved h, plus h's own gradient, is the gradient of x and of
residual), rms_norm_channels, layer_norm_channels and group_norm (with or without an activation)
have autograd through
the custom ops <function>_train (forward with saved statistics: rms_norm_train, layer_norm_train,
add_rms_norm_train, add_layer_norm_train, rms_norm_channels_train, layer_norm_channels_train,
group_norm_train) and the norms' <function>_backward ops (normjit's backward kernel through
normjit_launch_backward, x and the gradient copied contiguous where they are not; or PyTorch's
gradient, with a warning per reason, where it cannot serve: a gradient of another dtype, a problem
the library has no backward kernel for (its message: rows or groups whose partials outgrow the
backward workspace), a double backward).
"""
import math
import threading
import warnings
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

import normjit
from normjit._capi import InvalidArgumentError, UnsupportedError

__all__ = ["rms_norm", "rms_norm_channels", "layer_norm", "layer_norm_channels", "group_norm",
           "add_rms_norm", "add_layer_norm", "warmup", "NormjitFallbackWarning"]


class NormjitFallbackWarning(UserWarning):
    """A normjit.torch call ran PyTorch's implementation instead; the message says why."""


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_OUT_DTYPES = {**_DTYPES, torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
_FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}  # saturation bounds
_AFFINE = {(False, False): "none", (True, False): "weight", (True, True): "both"}
# The activation keyword: None, or the spec's name of it (the custom ops' schemas take "none").
_ACTIVATIONS = {None: None, "none": None, "silu": "silu", "gelu": "gelu"}

# The trailing forms, by public name: the library op. They take the variant axes and strided
# rows; the channel forms (rms_norm_channels, layer_norm_channels, group_norm) neither.
_ROW_OPS = {"rms_norm": "rmsnorm", "layer_norm": "layernorm", "add_rms_norm": "rmsnorm",
            "add_layer_norm": "layernorm"}
# The channel forms (x [N, C, *spatial], parameters [C]), by public name: the library op.
_CHANNEL_OPS = {"rms_norm_channels": "rmsnorm", "layer_norm_channels": "layernorm",
                "group_norm": "groupnorm"}
# (input dtype, weight/bias dtype) pairs of two dtypes that F.layer_norm computes on CUDA, the
# device normjit serves: none (its CUDA kernel reads weight and bias in the input's dtype and
# raises otherwise; CPU's mixed-type kernel takes float32 parameters with a float16/bfloat16
# input, and CPU tensors fall back to it). tests/python/test_variants_gpu.py checks this
# against PyTorch on the GPU machine.
_LAYER_NORM_MIXED: set = set()
# The functions whose PyTorch counterpart torch.autocast runs in float32, by device type: those
# whose aten op (F.layer_norm's for layer_norm_channels too: timm's LayerNorm2d calls it) the
# installed PyTorch gives an autocast kernel, its float32 cast policy for the norms (CUDA:
# layer_norm, group_norm, and rms_norm in recent releases; CPU: none). Under autocast such a call
# is PyTorch's implementation, whose result is float32 (normjit's kernels return the input's
# dtype); rms_norm_channels, the keyword variants and the add_* functions, which are no PyTorch
# function, keep the dtypes their docstrings give.
_AUTOCAST_ATEN = {"rms_norm": "rms_norm", "layer_norm": "layer_norm",
                  "layer_norm_channels": "layer_norm", "group_norm": "group_norm"}


def _autocast_f32_ops(key: str) -> frozenset:
    """The functions whose aten op has a kernel of its own for dispatch key `key` (autocast's
    cast for that device type); none where this PyTorch cannot say (a private query)."""
    try:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        return frozenset(op for op, aten in _AUTOCAST_ATEN.items() if has("aten::" + aten, key))
    except (AttributeError, RuntimeError):
        return frozenset()


_AUTOCAST_F32 = {"cuda": _autocast_f32_ops("AutocastCUDA"), "cpu": _autocast_f32_ops("AutocastCPU")}

# (library op, shape class, dtype, weight?, bias?[, variant axes], device index) ->
# (normjit_kernel*, elements per batch item); or (None, message) when normjit does not take that
# problem. The variant axes, where a call has any: (param dtype, out dtype, residual dtype, each
# None where the input's or absent; weight offset; save_stats).
_kernels: dict = {}
_kernel_specs: dict = {}  # the same keys: the spec text each kernel was prepared from
_prepare_lock = threading.Lock()
_launch = None  # normjit_launch (_capi.launch_function()), bound on first use
_launch_ex = None  # normjit_launch_ex (_capi.launch_ex_function()), bound with it
_launch_backward = None  # normjit_launch_backward (_capi.launch_backward_function()), with it

# Eager calls: _call_key(...) -> a launch (kernel, batch, eps, device index), an _Ex (a launch
# through normjit_launch_ex), or why the call falls back. Cleared when full: a key per input
# shape (the batch is in it), and prefill lengths vary.
_calls: dict = {}
_CALLS_MAX = 4096

_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while tracing
_increment_version = torch.autograd.graph.increment_version  # one tensor (PyTorch 2.4's form)
# One C call, which dynamo folds; a PyTorch without it asks per device type.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None) or (
    lambda: torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu"))
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
                "normjit takes contiguous row-major tensors, and channels-last ones for "
                "rms_norm_channels and group_norm)")
    if code == "grad":
        return ("an input requires grad and this function is forward-only in normjit (normjit "
                "trains rms_norm, layer_norm, add_rms_norm and add_layer_norm called without "
                "the keyword variants or with weight_offset and activation alone, "
                "rms_norm_channels, layer_norm_channels and group_norm; the variants out_dtype, "
                "scale, return_stats and inplace have no normjit backward yet: PyTorch's "
                "autograd trains them)")
    if code == "param_dtype":
        dtypes = ", ".join(dict.fromkeys(str(p.dtype) for p in (weight, bias) if p is not None))
        return (f"weight/bias dtype {dtypes} differs from the input's {x.dtype} (normjit takes "
                "one parameter dtype of float32, float16, bfloat16 where PyTorch computes the "
                "case on CUDA: rms_norm and the add_* functions; not layer_norm)")
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
    if code == "autocast":
        return (f"torch.autocast is enabled for {x.device.type} and runs this function's "
                f"PyTorch counterpart in float32 (normjit's kernel returns the input's dtype, "
                f"{x.dtype})")
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


def _params_ok(op: str, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether normjit serves weight/bias of another dtype than x for op: one parameter dtype
    of its own, where PyTorch computes the case (the result then has x's dtype)."""
    if weight.dtype not in _DTYPES or (bias is not None and bias.dtype != weight.dtype):
        return False
    if op == "layer_norm":
        return (x.dtype, weight.dtype) in _LAYER_NORM_MIXED
    return op in _ROW_OPS  # rms_norm (F.rms_norm: x's dtype out), the add_* functions


def _on_device(x: Tensor) -> bool:
    """Whether normjit runs on x's device (CUDA). tests/python/test_autograd_cpu.py replaces it
    so that CPU tensors take the launch path into an emulated library, every other check
    unchanged."""
    return x.is_cuda


def _autocast_f32(op: str, x: Tensor) -> bool:
    """Whether torch.autocast is enabled for x's device type and runs op's PyTorch counterpart in
    float32 there (_AUTOCAST_F32) where x is not float32 (a float32 x is computed in float32
    either way): the call is then PyTorch's, as autocast computes it. One C call where no
    autocast is enabled; traceable by dynamo (it folds the autocast state, which its guards
    hold)."""
    if not _any_autocast() or not isinstance(x, Tensor) or x.dtype == torch.float32:
        return False
    device = x.device.type
    return op in _AUTOCAST_F32.get(device, ()) and torch.is_autocast_enabled(device)


def _channels_last(x: Tensor) -> bool:
    """Whether x [N, C, *spatial] lies densely with its channels innermost: torch's
    channels_last (4-D) and channels_last_3d (5-D) strides, and their analogue for any rank
    ([N, L, C] in memory for [N, C, L]). Strides of dims of size 1 do not matter, as in
    Tensor.is_contiguous."""
    if x.dim() < 3:
        return False
    shape, stride = x.shape, x.stride()
    expected = 1
    for d in (1, *range(x.dim() - 1, 1, -1), 0):
        if shape[d] != 1 and stride[d] != expected:
            return False
        expected *= shape[d]
    return True


def _empty_like_layout(x: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
    """A fresh tensor of x's shape in the memory format the channel ops return: channels last
    where x is channels last (and not also contiguous), contiguous otherwise."""
    dtype = x.dtype if dtype is None else dtype
    if not x.is_contiguous() and _channels_last(x):
        return x.new_empty((x.shape[0], *x.shape[2:], x.shape[1]), dtype=dtype).movedim(-1, 1)
    return x.new_empty(x.shape, dtype=dtype)


def _why_not(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
             op: str = "", residual: Optional[Tensor] = None,
             grad: bool = True) -> Optional[str]:
    """None when normjit can serve the call, else a reason code. Traceable by dynamo. The
    alignment of the data pointers, and the strides of a non-contiguous input of a trailing
    form, are checked at each launch instead. grad False: an input that requires grad is no
    reason (the training path of rms_norm and layer_norm asks for the others)."""
    if not _on_device(x):
        return "device"
    if x.dtype not in _DTYPES:
        return "dtype"
    # The channel ops read a channels-last input in place (layout=nhwc); other strides fall
    # back. The row ops' strides are checked at launch.
    if not x.is_contiguous() and op not in _ROW_OPS and not _channels_last(x):
        return "layout"
    if grad and torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        return "grad"
    if weight is not None:
        if ((weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype))
                and not _params_ok(op, x, weight, bias)):
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
    """normalized_shape as F.layer_norm takes it: an int, or a sequence of ints (anything
    integer-like: NumPy integers, 0-dim integer tensors; not floats, bools or strings)."""
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        return (normalized_shape,)
    if isinstance(normalized_shape, tuple):
        return normalized_shape
    try:
        if isinstance(normalized_shape, (str, bytes)):
            raise TypeError
        return tuple(normjit._index(s) for s in normalized_shape)
    except TypeError:
        raise TypeError(f"normjit.torch.{op}: normalized_shape must be an int or a sequence of "
                        f"ints, not {normalized_shape!r}") from None


def _as_groups(op: str, num_groups) -> int:
    """num_groups as F.group_norm takes it: an int or an integer-like value (a NumPy integer, a
    0-dim integer tensor), not a bool or a float; and at least 1."""
    try:
        groups = normjit._index(num_groups)
    except TypeError:
        raise TypeError(f"normjit.torch.{op}: num_groups must be an int, not "
                        f"{type(num_groups).__name__} ({num_groups!r})") from None
    if groups < 1:
        raise ValueError(f"normjit.torch.{op}: num_groups must be at least 1, not {groups}")
    return groups


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


def _check_residual(op: str, residual, x: Tensor) -> None:
    _check_tensor(op, "residual", residual, x)
    if residual.shape != x.shape:
        raise ValueError(f"normjit.torch.{op}: residual has shape {list(residual.shape)}; "
                         f"expected the input's, {list(x.shape)}")
    if residual.dtype != x.dtype and residual.dtype != torch.float32:
        raise ValueError(f"normjit.torch.{op}: residual has dtype {residual.dtype}; expected "
                         f"the input's ({x.dtype}) or torch.float32")


def _as_offset(op: str, weight_offset) -> float:
    if isinstance(weight_offset, (int, float)) and not isinstance(weight_offset, bool):
        return float(weight_offset)
    raise TypeError(f"normjit.torch.{op}: weight_offset must be a float, not "
                    f"{type(weight_offset).__name__} ({weight_offset!r})")


def _as_activation(op: str, activation) -> Optional[str]:
    """The activation keyword as the spec names it: None (also for 'none'), 'silu', 'gelu'."""
    try:
        return _ACTIVATIONS[activation]
    except (KeyError, TypeError):
        pass
    if activation is not None and not isinstance(activation, str):
        raise TypeError(f"normjit.torch.{op}: activation must be None, 'silu' or 'gelu', not "
                        f"{type(activation).__name__} ({activation!r})")
    raise ValueError(f"normjit.torch.{op}: activation {activation!r} is not one of None, "
                     "'silu', 'gelu' (F.silu, F.gelu with approximate='none')")


def _activate(y: Tensor, activation: Optional[str]) -> Tensor:
    """PyTorch's activation of a fallback's y (the kernels apply the same one)."""
    if activation is None:
        return y
    return F.silu(y) if activation == "silu" else F.gelu(y)


def _check_variant(op: str, x: Tensor, weight: Optional[Tensor], variant: tuple,
                   scale) -> None:
    offset, out_dtype, _, inplace, _ = variant
    if not math.isfinite(offset):
        raise ValueError(f"normjit.torch.{op}: weight_offset must be finite, not {offset!r}")
    if offset != 0 and weight is None:
        raise ValueError(f"normjit.torch.{op}: weight_offset {offset!r} needs a weight (the "
                         "weight used is weight_offset + weight)")
    if out_dtype is not None:
        if not isinstance(out_dtype, torch.dtype):
            raise TypeError(f"normjit.torch.{op}: out_dtype must be a torch.dtype or None, not "
                            f"{type(out_dtype).__name__} ({out_dtype!r})")
        if out_dtype not in _OUT_DTYPES:
            raise ValueError(f"normjit.torch.{op}: out_dtype {out_dtype} is not one of "
                             "torch.float32, torch.float16, torch.bfloat16, "
                             "torch.float8_e4m3fn, torch.float8_e5m2")
    if out_dtype in _FP8_MAX:
        if scale is None:
            raise ValueError(f"normjit.torch.{op}: out_dtype {out_dtype} needs scale (a "
                             "one-element float32 tensor on the input's device; y = "
                             "saturate(normalized * scale))")
        _check_tensor(op, "scale", scale, x)
        if scale.dtype != torch.float32:
            raise ValueError(f"normjit.torch.{op}: scale has dtype {scale.dtype}; expected "
                             "torch.float32")
        if scale.numel() != 1:
            raise ValueError(f"normjit.torch.{op}: scale has shape {list(scale.shape)}; "
                             "expected one element")
    elif scale is not None:
        raise ValueError(f"normjit.torch.{op}: scale is for an fp8 out_dtype "
                         f"(torch.float8_e4m3fn, torch.float8_e5m2), and out_dtype is "
                         f"{out_dtype}; pass scale=None")
    if inplace and out_dtype is not None and out_dtype != x.dtype:
        raise ValueError(f"normjit.torch.{op}: inplace=True writes y into x, so out_dtype must "
                         f"be None or the input's dtype ({x.dtype}), not {out_dtype}")


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
               has_weight: bool, has_bias: bool, eps: float,
               param_dtype: Optional[torch.dtype] = None, out_dtype: Optional[torch.dtype] = None,
               residual: Optional[torch.dtype] = None, weight_offset: float = 0.0,
               save_stats: bool = False, backward: bool = False,
               activation: Optional[str] = None) -> str:
    """The canonical spec text of a trailing-dims problem (rmsnorm, layernorm); the variant
    axes follow eps where they are not the default, in the canonical order; backward=True: the
    problem's backward kernel."""
    text = (f"op={op} shape={','.join(map(str, shape))} dtype={_DTYPES[dtype]} "
            f"normalized_dims={normalized_dims} affine={_AFFINE[has_weight, has_bias]} "
            f"eps={float(eps)!r}")
    if param_dtype is not None and param_dtype != dtype:
        text += f" param_dtype={_DTYPES[param_dtype]}"
    if out_dtype is not None and out_dtype != dtype:
        text += f" out_dtype={_OUT_DTYPES[out_dtype]}"
    if residual is not None:
        text += f" residual={_DTYPES[residual]}"
    if weight_offset:
        text += f" weight_offset={float(weight_offset)!r}"
    if activation is not None:
        text += f" activation={activation}"
    if save_stats:
        text += " save_stats=true"
    if backward:
        text += " backward=true"
    return text


def _channels_spec(op: str, shape: Tuple[int, ...], groups: int, dtype: torch.dtype,
                   has_weight: bool, has_bias: bool, eps: float,
                   activation: Optional[str] = None, nhwc: bool = False) -> str:
    """The canonical spec text of x [N, C, *spatial]: a channel form or groupnorm; nhwc: the
    input lies channels last (layout=nhwc)."""
    return (f"op={op} shape={','.join(map(str, shape))} dtype={_DTYPES[dtype]}"
            + (f" groups={groups}" if op == "groupnorm" else " normalized_dims=0")
            + f" affine={_AFFINE[has_weight, has_bias]} eps={float(eps)!r}"
            + (f" activation={activation}" if activation is not None else "")
            + (" layout=nhwc" if nhwc else ""))


def _prepare(key: tuple, spec: str, per_item: int) -> tuple:
    global _launch, _launch_ex, _launch_backward
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
        if _launch_ex is None:
            _launch_ex = normjit._capi.launch_ex_function()
        if _launch_backward is None:
            _launch_backward = normjit._capi.launch_backward_function()
        _kernels[key] = entry
        _kernel_specs[key] = spec
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

def _check(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
           variant: Optional[tuple] = None, residual: Optional[Tensor] = None,
           scale: Optional[Tensor] = None) -> None:
    if op in _ROW_OPS:
        _check_rows(op, x, arg, weight, bias)
        if residual is not None or op.startswith("add_"):
            _check_residual(op, residual, x)
        if variant is not None:
            _check_variant(op, x, weight, variant, scale)
    else:
        _check_channels(op, x, weight, bias, arg)


def _eps(x: Tensor, eps: Optional[float]) -> float:
    """eps None (rms_norm's default) is torch.finfo(dtype).eps, as in PyTorch."""
    if eps is not None:
        return eps
    return torch.finfo(x.dtype).eps if x.is_floating_point() else 1e-6


class _Ex:
    """A decided launch through normjit_launch_ex: the kernel and what each call allocates
    (nhwc: y in x's channels-last layout, for the layout=nhwc kernels)."""
    __slots__ = ("kernel", "batch", "eps", "device", "torch_device", "shape", "k", "y_dtype",
                 "h_dtype", "stats_shape", "mean", "inplace", "strided", "by_strides", "nhwc")


def _stats_shape(shape: Sequence[int], k: int) -> Tuple[int, ...]:
    """The shape of saved statistics, as aten.native_layer_norm's: leading dims, then ones."""
    return tuple(shape[:len(shape) - k]) + (1,) * k


def _decide(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
            eps: Optional[float], variant: Optional[tuple] = None,
            residual: Optional[Tensor] = None,
            scale: Optional[Tensor] = None) -> Union[tuple, _Ex, str]:
    """Checks the arguments (raising what the checks raise), then: a launch (kernel, batch,
    eps, device index) through normjit_launch, an _Ex through normjit_launch_ex, or why normjit
    cannot serve the call (a reason code, or the library's message for a problem it does not
    take)."""
    _check(op, arg, x, weight, bias, variant, residual, scale)
    eps = _eps(x, eps)
    why = _why_not(x, weight, bias, eps, op, residual)
    if why == "grad" and (_trains_variant(op, variant) if variant is not None else op in _TRAINED):
        # Trained through the autograd ops (<function>_train), if nothing else stands in the way.
        return _train_why_not(op, x, weight, bias, eps) or _TRAIN
    if why:
        return why
    device = x.device.index
    has_weight, has_bias = weight is not None, bias is not None
    library_op = _ROW_OPS.get(op)
    if library_op is None:
        library_op = _CHANNEL_OPS[op]
        # The channel forms take one variant: the activation (variant[4]).
        activation = variant[4] if variant is not None else None
        per_item = x.numel() // x.shape[0]
        nhwc = not x.is_contiguous()  # _why_not let it through: channels last
        key = (library_op, tuple(x.shape[1:]), arg, x.dtype, has_weight, has_bias, activation,
               nhwc, device)
        spec = _channels_spec(library_op, tuple(x.shape), arg, x.dtype, has_weight, has_bias,
                              eps, activation, nhwc)
        kernel, per_item = _prepare(key, spec, per_item)
        if kernel is None:
            return per_item  # the library's message
        return (kernel, x.numel() // per_item, float(eps), device)
    per_item = 1
    for s in arg:
        per_item *= s
    batch = x.numel() // per_item
    param_dtype = weight.dtype if has_weight else None
    if (variant is None and residual is None and x.is_contiguous()
            and (param_dtype is None or param_dtype == x.dtype)):
        key = (library_op, arg, x.dtype, has_weight, has_bias, device)
        spec = _rows_spec(library_op, (batch,) + arg, len(arg), x.dtype, has_weight, has_bias,
                          eps)
        kernel, per_item = _prepare(key, spec, per_item)
        if kernel is None:
            return per_item
        return (kernel, x.numel() // per_item, float(eps), device)
    offset, out_dtype, stats, inplace, activation = variant or (0.0, None, False, False, None)
    y_dtype = out_dtype if out_dtype is not None else x.dtype
    h_dtype = residual.dtype if residual is not None else None
    # The spec's variant axes: param_dtype, out_dtype, residual, weight_offset, save_stats,
    # activation.
    axes = (param_dtype if param_dtype != x.dtype else None,
            y_dtype if y_dtype != x.dtype else None, h_dtype, float(offset), bool(stats),
            activation)
    key = (library_op, arg, x.dtype, has_weight, has_bias, axes, device)
    spec = _rows_spec(library_op, (batch,) + arg, len(arg), x.dtype, has_weight, has_bias, eps,
                      *axes[:5], activation=activation)
    kernel, message = _prepare(key, spec, per_item)
    if kernel is None:
        return message
    ex = _Ex()
    ex.kernel, ex.batch, ex.eps = kernel, batch, float(eps)
    ex.device, ex.torch_device = device, x.device
    ex.shape, ex.k, ex.y_dtype, ex.h_dtype = x.shape, len(arg), y_dtype, h_dtype
    ex.stats_shape = _stats_shape(x.shape, len(arg)) if stats else None
    ex.mean = bool(stats) and library_op == "layernorm"
    ex.inplace = bool(inplace)
    ex.strided = not x.is_contiguous() or (residual is not None and not residual.is_contiguous())
    ex.by_strides = {}
    ex.nhwc = False
    return ex


def _tensor_key(t: Tensor) -> tuple:
    """What the argument checks and _why_not read of a tensor (all but its data pointer), its
    strides included where it is not contiguous: channels last or other strides decide a
    channel form's call (the layout=nhwc kernel, or the fallback)."""
    return (t.__class__, t.shape, t.dtype, t.device, t.is_contiguous() or t.stride(),
            t.requires_grad)


_NO_TENSOR = (None,)


def _decision(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
              eps: Optional[float]) -> Union[tuple, str]:
    """_decide's answer, cached for calls of the same key."""
    key = None
    if eps is None or type(eps) is float:
        try:
            # One flat tuple (nested ones are hashed and compared one level deeper); a tensor
            # key starts with a class, so None marks an absent weight or bias unambiguously.
            # x's fields are spelled out (the common call's tuple built in one go); weight
            # and bias take _tensor_key's, which reads the same fields.
            # A non-contiguous x's strides: channels last or not decides the call.
            key = (op, arg, eps, _grad_enabled(), x.__class__, x.shape, x.dtype, x.device,
                   x.is_contiguous() or x.stride(), x.requires_grad,
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


def _row_levels(shape: Sequence[int], k: int,
                tensors: Sequence[Tuple[str, Sequence[int]]]) -> Union[tuple, str]:
    """How normjit addresses the rows of tensors of one shape, each given as (name, strides):
    (inner_rows, ((outer, inner) of each tensor)), row r of a tensor starting at element
    (r // inner_rows) * outer + (r % inner_rows) * inner (one level: inner_rows 1, inner 0);
    or why it cannot (a reason text). The trailing k dims must be contiguous; the leading dims
    (those of size 1 left out) must collapse, in every tensor at the same place, into at most
    two dims of nonzero strides."""
    lead = len(shape) - k
    dims = [d for d in range(lead) if shape[d] != 1]
    breaks = set()
    for name, strides in tensors:
        expect = 1
        for d in range(len(shape) - 1, lead - 1, -1):
            if shape[d] != 1:
                if strides[d] != expect:
                    return (f"non-contiguous {name} whose normalized dims are not contiguous "
                            f"(shape {list(shape)}, strides {list(strides)}; normjit reads "
                            "rows of contiguous elements)")
                expect *= shape[d]
        for d in dims:
            if strides[d] == 0:
                return (f"non-contiguous {name} that broadcasts dim {d} (shape {list(shape)}, "
                        f"strides {list(strides)}; normjit's rows have nonzero strides)")
        for a, b in zip(dims, dims[1:]):
            if strides[a] != strides[b] * shape[b]:
                breaks.add(b)
    if len(breaks) > 1:
        given = "; ".join(f"{name} strides {list(st)}" for name, st in tensors)
        return (f"non-contiguous input whose leading dims do not collapse into two levels of "
                f"row strides (shape {list(shape)}; {given}; normjit addresses row r at "
                "(r // inner_rows) * outer + (r % inner_rows) * inner)")
    if not dims:
        return 1, tuple((0, 0) for _ in tensors)
    if not breaks:
        return 1, tuple((strides[dims[-1]], 0) for _, strides in tensors)
    (first_inner,) = breaks
    inner_rows = 1
    for d in dims:
        if d >= first_inner:
            inner_rows *= shape[d]
    last_outer = max(d for d in dims if d < first_inner)
    return inner_rows, tuple((strides[last_outer], strides[dims[-1]]) for _, strides in tensors)


def _strided_rows(ex: _Ex, x: Tensor, residual: Optional[Tensor]) -> Union[tuple, str]:
    """normjit._launch.launch_ex's rows for a call of ex (y and h contiguous, or x's and
    residual's own in place), or why these strides cannot be served."""
    tensors = [("input", x.stride())]
    if residual is not None:
        tensors.append(("residual", residual.stride()))
    levels = _row_levels(ex.shape, ex.k, tensors)
    if type(levels) is str:
        return levels
    inner_rows, strides = levels
    xs = strides[0]
    rs = strides[1] if residual is not None else (0, 0)
    ys = xs if ex.inplace else (0, 0)
    hs = rs if ex.inplace else (0, 0)
    return (inner_rows, *xs, *ys, *rs, *hs)


def _run(ex: _Ex, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
         residual: Optional[Tensor], scale: Optional[Tensor]) -> Union[tuple, str]:
    """Launches ex: (y, h, mean, rstd) (None where not asked for; x and residual themselves
    as y and h in place), or why normjit cannot serve the call after all (nothing launched)."""
    rows = None
    if ex.strided:
        strides = (x.stride(), None if residual is None else residual.stride())
        rows = ex.by_strides.get(strides)
        if rows is None:
            rows = _strided_rows(ex, x, residual)
            if len(ex.by_strides) >= 64:
                ex.by_strides.clear()
            ex.by_strides[strides] = rows
        if type(rows) is str:
            return rows
    xp = x.data_ptr()
    wp = weight.data_ptr() if weight is not None else None
    bp = bias.data_ptr() if bias is not None else None
    rp = residual.data_ptr() if residual is not None else None
    if (xp | (wp or 0) | (bp or 0) | (rp or 0)) & 15:
        return "align"
    if ex.inplace:
        y, h = x, residual
    elif ex.nhwc:
        y, h = _empty_like_layout(x, ex.y_dtype), None
    else:
        y = torch.empty(ex.shape, dtype=ex.y_dtype, device=ex.torch_device)
        h = (torch.empty(ex.shape, dtype=ex.h_dtype, device=ex.torch_device)
             if ex.h_dtype is not None else None)
    mean = rstd = None
    if ex.stats_shape is not None:
        rstd = torch.empty(ex.stats_shape, dtype=torch.float32, device=ex.torch_device)
        if ex.mean:
            mean = torch.empty(ex.stats_shape, dtype=torch.float32, device=ex.torch_device)
    device = ex.device
    args = (ex.kernel, xp, y.data_ptr(), wp, bp, ex.batch, ex.eps, rp,
            h.data_ptr() if h is not None else None,
            scale.data_ptr() if scale is not None else None,
            mean.data_ptr() if mean is not None else None,
            rstd.data_ptr() if rstd is not None else None)
    if _multi_device and torch.cuda.current_device() != device:
        with torch.cuda.device(device):
            status = _launch_ex(*args, _raw_stream(device), rows)
    else:
        status = _launch_ex(*args, _raw_stream(device), rows)
    if status:
        error = normjit._capi.library().error(status)
        if not isinstance(error, InvalidArgumentError):
            raise error
        # The library checked the arguments before enqueuing anything: a stride that is no
        # multiple of the kernel's vector width, a residual its vector width finds misaligned,
        # in-place buffers that overlap. Strides are remembered; pointers change per call.
        if ex.strided and "_rows." in error.message:
            ex.by_strides[strides] = error.message
        return error.message
    if ex.inplace:
        _wrote_in_place(x, residual)
    return y, h, mean, rstd


def _wrote_in_place(*tensors: Tensor) -> None:
    """Tells autograd that a kernel wrote these tensors in place through their pointers, as
    PyTorch's in-place ops do (their version counters bumped): a tensor saved for a backward and
    overwritten then makes that backward raise instead of giving a wrong gradient. Inference
    tensors have no version counter."""
    for t in tensors:
        if not t.is_inference():
            _increment_version(t)


def _eager(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
           eps: Optional[float], variant: Optional[tuple] = None) -> Optional[Tensor]:
    """normjit's y; or None, after the fallback warning, when PyTorch's implementation must
    compute this call (also under torch.autocast where it runs op's PyTorch counterpart in
    float32). variant: the channel forms' activation (variant[4]), or None."""
    if _any_autocast() and _autocast_f32(op, x):
        decision = "autocast"
    elif variant is None:
        decision = _decision(op, arg, x, weight, bias, eps)
    else:
        decision = _decision_ex(op, arg, x, weight, bias, eps, variant, None, None)
    if type(decision) is tuple:
        kernel, batch, eps_f, device = decision
        xp = x.data_ptr()
        wp = weight.data_ptr() if weight is not None else None
        bp = bias.data_ptr() if bias is not None else None
        if not (xp | (wp or 0) | (bp or 0)) & 15:
            y = torch.empty_like(x)  # x is dense: its strides (a channels-last x's too)
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
    elif type(decision) is _Ex:  # strided rows, or parameters of another dtype
        out = _run(decision, x, weight, bias, None, None)
        if type(out) is tuple:
            return out[0]
        decision = out
    elif decision is _TRAIN:  # an input requires grad: the autograd op
        return _train(op, arg, x, weight, bias, _eps(x, eps), 0.0,
                      None if variant is None else variant[4])
    _fallback_warn(op, decision, x, weight, bias, eps)
    return None


def _decision_ex(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                 eps: Optional[float], variant: tuple, residual: Optional[Tensor],
                 scale: Optional[Tensor]) -> Union[_Ex, str]:
    """_decide's answer for a call with the variant arguments, cached as _decision's."""
    key = None
    if eps is None or type(eps) is float:
        try:
            key = (op, arg, eps, variant, _grad_enabled(), *_tensor_key(x),
                   *(_NO_TENSOR if weight is None else _tensor_key(weight)),
                   *(_NO_TENSOR if bias is None else _tensor_key(bias)),
                   *(_NO_TENSOR if residual is None else _tensor_key(residual)),
                   *(_NO_TENSOR if scale is None else _tensor_key(scale)))
            return _calls[key]
        except KeyError:
            pass
        except (AttributeError, TypeError):
            key = None
    decision = _decide(op, arg, x, weight, bias, eps, variant, residual, scale)
    if key is not None:
        if len(_calls) >= _CALLS_MAX:
            _calls.clear()
        _calls[key] = decision
    return decision


def _eager_variant(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                   eps: Optional[float], variant: tuple, residual: Optional[Tensor],
                   scale: Optional[Tensor]) -> Union[tuple, str]:
    """normjit's (y, h, mean, rstd); or, after the fallback warning, why PyTorch's expression
    must compute this call."""
    decision = _decision_ex(op, arg, x, weight, bias, eps, variant, residual, scale)
    if type(decision) is _Ex:
        out = _run(decision, x, weight, bias, residual, scale)
        if type(out) is tuple:
            return out
        decision = out
    elif decision is _TRAIN:  # weight_offset, an activation; an input requires grad
        if op in _ADD_TRAINED:
            return (*_train_add(op, arg, x, residual, weight, bias, _eps(x, eps), variant[0],
                                variant[4]), None, None)
        return (_train(op, arg, x, weight, bias, _eps(x, eps), variant[0], variant[4]), None,
                None, None)
    _fallback_warn(op, decision, x, weight, bias, eps)
    return decision


def _traced_why_not(op: str, arg, x: Tensor, weight: Optional[Tensor],
                    bias: Optional[Tensor], eps: float, variant: Optional[tuple] = None,
                    residual: Optional[Tensor] = None,
                    scale: Optional[Tensor] = None) -> Optional[str]:
    """Under torch.compile: the checks and the fallback reason, traced by dynamo. Strides
    are left to the custom op, which falls back itself where they cannot be served. A call
    without the keyword variants under torch.autocast that runs its PyTorch counterpart in
    float32: "autocast", as in eager."""
    _check(op, arg, x, weight, bias, variant, residual, scale)
    if variant is None and _autocast_f32(op, x):
        return "autocast"
    return _why_not(x, weight, bias, eps, op, residual)


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


def _torch_layer_norm_channels(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                               eps: float) -> Tensor:
    """LayerNorm over dim 1 of [N, C, *spatial] as timm's LayerNorm2d computes it: channels
    moved last, F.layer_norm over them, moved back (a view with channels-last strides)."""
    return F.layer_norm(x.movedim(1, -1), (x.shape[1],), weight, bias, eps).movedim(-1, 1)


def _torch_norm(library_op: str, x: Tensor, shape: Tuple[int, ...], weight: Optional[Tensor],
                bias: Optional[Tensor], eps: float, offset: float, out_dtype: torch.dtype,
                scale: Optional[Tensor],
                activation: Optional[str] = None) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """(y, mean, rstd) of the variant functions, in float32 (or wider) from x:
    rmsnorm: rstd = rsqrt(mean(x^2) + eps), n = x * rstd;
    layernorm: mean, biased var; rstd = rsqrt(var + eps), n = (x - mean) * rstd;
    then n * (weight_offset + weight) + bias, n = activation(n) (F.silu, F.gelu), and
    y = n.to(out_dtype), or for fp8 (n * scale).clamp(-max, max).to(out_dtype). mean
    (layernorm) and rstd keep the reduced dims (size 1)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    if library_op == "rmsnorm":
        mean = None
        rstd = torch.rsqrt(xf.square().mean(dims, keepdim=True) + eps)
        n = xf * rstd
    else:
        var, mean = torch.var_mean(xf, dims, correction=0, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        n = (xf - mean) * rstd
    if weight is not None:
        n = n * (weight.to(acc) + offset if offset else weight.to(acc))
    if bias is not None:
        n = n + bias.to(acc)
    n = _activate(n, activation)
    fp8_max = _FP8_MAX.get(out_dtype)
    if fp8_max is not None:
        y = (n * scale.reshape(()).to(acc)).clamp(-fp8_max, fp8_max).to(out_dtype)
    else:
        y = n.to(out_dtype)
    return y, mean, rstd


def _torch_plain(op: str, x: Tensor, shape: Tuple[int, ...], weight: Optional[Tensor],
                 bias: Optional[Tensor], eps: Optional[float]) -> Tensor:
    if op == "rms_norm":
        return F.rms_norm(x, shape, weight, eps)
    return F.layer_norm(x, shape, weight, bias, _eps(x, eps))


def _torch_variant(op: str, x: Tensor, residual: Optional[Tensor],
                   shape: Tuple[int, ...], weight: Optional[Tensor], bias: Optional[Tensor],
                   eps: Optional[float], variant: tuple,
                   scale: Optional[Tensor]) -> tuple:
    """The PyTorch expression of a variant call (its function's docstring): (y, h, mean,
    rstd), contiguous, statistics in float32, None where not asked for; in place, written into
    x and residual (returned as y and h). Where PyTorch's own function refuses the parameters'
    dtypes (those normjit does not take, on any device), its exception."""
    offset, out_dtype, stats, inplace, activation = variant
    if ((op == "rms_norm" or op == "layer_norm") and weight is not None
            and (weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype))
            and not _params_ok(op, x, weight, bias)):
        _torch_plain(op, x, shape, weight, bias, eps)  # raises where PyTorch refuses
    eps = _eps(x, eps)
    h = None
    if residual is not None:
        acc = torch.promote_types(torch.promote_types(x.dtype, residual.dtype), torch.float32)
        h = (x.to(acc) + residual.to(acc)).to(residual.dtype)
    y, mean, rstd = _torch_norm(_ROW_OPS[op], h if h is not None else x, shape, weight, bias, eps,
                                offset, out_dtype if out_dtype is not None else x.dtype, scale,
                                activation)
    if inplace:
        residual.copy_(h)
        x.copy_(y)
        return x, residual, None, None
    if not stats:
        return y.contiguous(), None if h is None else h.contiguous(), None, None
    return (y.contiguous(), None if h is None else h.contiguous(),
            None if mean is None else mean.to(torch.float32).contiguous(),
            rstd.to(torch.float32).contiguous())


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


def _fresh_channels(y: Tensor, x: Tensor) -> Tensor:
    """A fallback's y in the layout the channel ops' fake implementation promised."""
    return _empty_like_layout(x).copy_(y)


def _channel_variant(op: str, activation: str) -> Optional[tuple]:
    """The variant of a channel-form call from its op's activation argument ("none": None)."""
    activation = _as_activation(op, activation)
    return None if activation is None else (0.0, None, False, False, activation)


@torch.library.custom_op("normjit::rms_norm_channels", mutates_args=())
def _rms_norm_channels_op(input: Tensor, weight: Optional[Tensor], eps: float,
                          activation: str = "none") -> Tensor:
    variant = _channel_variant("rms_norm_channels", activation)
    y = _eager("rms_norm_channels", 0, input, weight, None, eps, variant)
    return y if y is not None else _fresh_channels(
        _activate(_torch_rms_norm_channels(input, weight, eps), variant and variant[4]), input)


@torch.library.custom_op("normjit::layer_norm", mutates_args=())
def _layer_norm_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                   bias: Optional[Tensor], eps: float) -> Tensor:
    shape = tuple(normalized_shape)
    y = _eager("layer_norm", shape, input, weight, bias, eps)
    return y if y is not None else _fresh(F.layer_norm(input, shape, weight, bias, eps), input)


@torch.library.custom_op("normjit::layer_norm_channels", mutates_args=())
def _layer_norm_channels_op(input: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                            eps: float, activation: str = "none") -> Tensor:
    variant = _channel_variant("layer_norm_channels", activation)
    y = _eager("layer_norm_channels", 0, input, weight, bias, eps, variant)
    return y if y is not None else _fresh_channels(
        _activate(_torch_layer_norm_channels(input, weight, bias, eps), variant and variant[4]),
        input)


@torch.library.custom_op("normjit::group_norm", mutates_args=())
def _group_norm_op(input: Tensor, num_groups: int, weight: Optional[Tensor],
                   bias: Optional[Tensor], eps: float, activation: str = "none") -> Tensor:
    variant = _channel_variant("group_norm", activation)
    y = _eager("group_norm", num_groups, input, weight, bias, eps, variant)
    return y if y is not None else _fresh_channels(
        _activate(F.group_norm(input, num_groups, weight, bias, eps), variant and variant[4]),
        input)


def _fake(input: Tensor, *args) -> Tensor:
    return input.new_empty(input.shape)


def _fake_channels(input: Tensor, *args) -> Tensor:
    """The channel ops return the input's memory format: channels last stays channels last."""
    return _empty_like_layout(input)


for _op in (_rms_norm_op, _layer_norm_op):
    _op.register_fake(_fake)
for _op in (_rms_norm_channels_op, _layer_norm_channels_op, _group_norm_op):
    _op.register_fake(_fake_channels)


# The variant functions' ops: y (the _ex ops), y and statistics (_stats), y and h (add_*), and
# in place (add_*_inplace, mutating x and residual). Each computes through _eager_variant, or
# PyTorch's expression where normjit cannot serve the call, so that every output is fresh and
# contiguous, as the fake implementations say.

def _op_outputs(op: str, x: Tensor, residual: Optional[Tensor], normalized_shape: List[int],
                weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                weight_offset: float, out_dtype: Optional[torch.dtype], scale: Optional[Tensor],
                stats: bool, inplace: bool, activation: str = "none") -> tuple:
    shape = tuple(normalized_shape)
    variant = (float(weight_offset), out_dtype, stats, inplace, _as_activation(op, activation))
    out = _eager_variant(op, shape, x, weight, bias, eps, variant, residual, scale)
    if type(out) is not tuple:
        out = _torch_variant(op, x, residual, shape, weight, bias, eps, variant, scale)
    return out


@torch.library.custom_op("normjit::rms_norm_ex", mutates_args=())
def _rms_norm_ex_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                    eps: float, weight_offset: float, out_dtype: Optional[torch.dtype],
                    scale: Optional[Tensor], activation: str = "none") -> Tensor:
    return _op_outputs("rms_norm", input, None, normalized_shape, weight, None, eps,
                       weight_offset, out_dtype, scale, False, False, activation)[0]


@torch.library.custom_op("normjit::rms_norm_stats", mutates_args=())
def _rms_norm_stats_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                       eps: float, weight_offset: float, out_dtype: Optional[torch.dtype],
                       scale: Optional[Tensor], activation: str = "none") -> Tuple[Tensor, Tensor]:
    y, _, _, rstd = _op_outputs("rms_norm", input, None, normalized_shape, weight, None, eps,
                                weight_offset, out_dtype, scale, True, False, activation)
    return y, rstd


@torch.library.custom_op("normjit::layer_norm_ex", mutates_args=())
def _layer_norm_ex_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                      bias: Optional[Tensor], eps: float, weight_offset: float,
                      out_dtype: Optional[torch.dtype], scale: Optional[Tensor],
                      activation: str = "none") -> Tensor:
    return _op_outputs("layer_norm", input, None, normalized_shape, weight, bias, eps,
                       weight_offset, out_dtype, scale, False, False, activation)[0]


@torch.library.custom_op("normjit::layer_norm_stats", mutates_args=())
def _layer_norm_stats_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                         bias: Optional[Tensor], eps: float, weight_offset: float,
                         out_dtype: Optional[torch.dtype], scale: Optional[Tensor],
                         activation: str = "none") -> Tuple[Tensor, Tensor, Tensor]:
    y, _, mean, rstd = _op_outputs("layer_norm", input, None, normalized_shape, weight, bias,
                                   eps, weight_offset, out_dtype, scale, True, False, activation)
    return y, mean, rstd


@torch.library.custom_op("normjit::add_rms_norm", mutates_args=())
def _add_rms_norm_op(x: Tensor, residual: Tensor, normalized_shape: List[int],
                     weight: Optional[Tensor], eps: float, weight_offset: float,
                     out_dtype: Optional[torch.dtype], scale: Optional[Tensor],
                     activation: str = "none") -> Tuple[Tensor, Tensor]:
    y, h, _, _ = _op_outputs("add_rms_norm", x, residual, normalized_shape, weight, None, eps,
                             weight_offset, out_dtype, scale, False, False, activation)
    return y, h


@torch.library.custom_op("normjit::add_rms_norm_inplace", mutates_args=("x", "residual"))
def _add_rms_norm_inplace_op(x: Tensor, residual: Tensor, normalized_shape: List[int],
                             weight: Optional[Tensor], eps: float, weight_offset: float,
                             activation: str = "none") -> None:
    _op_outputs("add_rms_norm", x, residual, normalized_shape, weight, None, eps, weight_offset,
                None, None, False, True, activation)


@torch.library.custom_op("normjit::add_layer_norm", mutates_args=())
def _add_layer_norm_op(x: Tensor, residual: Tensor, normalized_shape: List[int],
                       weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                       weight_offset: float, out_dtype: Optional[torch.dtype],
                       scale: Optional[Tensor], activation: str = "none") -> Tuple[Tensor, Tensor]:
    y, h, _, _ = _op_outputs("add_layer_norm", x, residual, normalized_shape, weight, bias, eps,
                             weight_offset, out_dtype, scale, False, False, activation)
    return y, h


@torch.library.custom_op("normjit::add_layer_norm_inplace", mutates_args=("x", "residual"))
def _add_layer_norm_inplace_op(x: Tensor, residual: Tensor, normalized_shape: List[int],
                               weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                               weight_offset: float, activation: str = "none") -> None:
    _op_outputs("add_layer_norm", x, residual, normalized_shape, weight, bias, eps,
                weight_offset, None, None, False, True, activation)


def _fake_y(x: Tensor, out_dtype: Optional[torch.dtype]) -> Tensor:
    return x.new_empty(x.shape, dtype=x.dtype if out_dtype is None else out_dtype)


def _fake_stat(x: Tensor, normalized_shape: List[int]) -> Tensor:
    return x.new_empty(_stats_shape(x.shape, len(normalized_shape)), dtype=torch.float32)


@_rms_norm_ex_op.register_fake
def _(input, normalized_shape, weight, eps, weight_offset, out_dtype, scale, activation="none"):
    return _fake_y(input, out_dtype)


@_rms_norm_stats_op.register_fake
def _(input, normalized_shape, weight, eps, weight_offset, out_dtype, scale, activation="none"):
    return _fake_y(input, out_dtype), _fake_stat(input, normalized_shape)


@_layer_norm_ex_op.register_fake
def _(input, normalized_shape, weight, bias, eps, weight_offset, out_dtype, scale,
      activation="none"):
    return _fake_y(input, out_dtype)


@_layer_norm_stats_op.register_fake
def _(input, normalized_shape, weight, bias, eps, weight_offset, out_dtype, scale,
      activation="none"):
    return (_fake_y(input, out_dtype), _fake_stat(input, normalized_shape),
            _fake_stat(input, normalized_shape))


@_add_rms_norm_op.register_fake
def _(x, residual, normalized_shape, weight, eps, weight_offset, out_dtype, scale,
      activation="none"):
    return _fake_y(x, out_dtype), residual.new_empty(residual.shape)


@_add_layer_norm_op.register_fake
def _(x, residual, normalized_shape, weight, bias, eps, weight_offset, out_dtype, scale,
      activation="none"):
    return _fake_y(x, out_dtype), residual.new_empty(residual.shape)


@_add_rms_norm_inplace_op.register_fake
def _(x, residual, normalized_shape, weight, eps, weight_offset, activation="none"):
    return None


@_add_layer_norm_inplace_op.register_fake
def _(x, residual, normalized_shape, weight, bias, eps, weight_offset, activation="none"):
    return None


def _traced_variant(op: str, x: Tensor, residual: Optional[Tensor], shape: Tuple[int, ...],
                    weight: Optional[Tensor], bias: Optional[Tensor], eps: float, variant: tuple,
                    scale: Optional[Tensor]) -> tuple:
    """Under torch.compile: the custom op of a variant call, its outputs as (y, h, mean,
    rstd)."""
    offset, out_dtype, stats, inplace, activation = variant
    ops = torch.ops.normjit
    shape = list(shape)
    act = activation or "none"
    if op == "rms_norm":
        if stats:
            y, rstd = ops.rms_norm_stats(x, shape, weight, eps, offset, out_dtype, scale, act)
            return y, None, None, rstd
        return (ops.rms_norm_ex(x, shape, weight, eps, offset, out_dtype, scale, act), None,
                None, None)
    if op == "layer_norm":
        if stats:
            y, mean, rstd = ops.layer_norm_stats(x, shape, weight, bias, eps, offset, out_dtype,
                                                 scale, act)
            return y, None, mean, rstd
        return (ops.layer_norm_ex(x, shape, weight, bias, eps, offset, out_dtype, scale, act),
                None, None, None)
    if op == "add_rms_norm":
        if inplace:
            ops.add_rms_norm_inplace(x, residual, shape, weight, eps, offset, act)
            return x, residual, None, None
        y, h = ops.add_rms_norm(x, residual, shape, weight, eps, offset, out_dtype, scale, act)
        return y, h, None, None
    if inplace:
        ops.add_layer_norm_inplace(x, residual, shape, weight, bias, eps, offset, act)
        return x, residual, None, None
    y, h = ops.add_layer_norm(x, residual, shape, weight, bias, eps, offset, out_dtype, scale,
                              act)
    return y, h, None, None


# ---------------------------------------------------------------------------------------
# Training: autograd
# ---------------------------------------------------------------------------------------
# rms_norm and layer_norm (the functions without their keyword variants or with weight_offset alone,
# the modules, patched layers: Gemma's RMSNorm too), rms_norm_channels, layer_norm_channels and
# group_norm (and their modules and patched layers) called in grad mode with an input, weight or
# bias that requires grad run the custom op <function>_train: normjit's forward with save_stats (y
# has the same bits as without), returning y and the statistics (float32, one per normalized row:
# per row of the trailing forms, per (n, position) of the channel forms, per (n, group) of
# group_norm; shaped as _stats_of says), which its autograd saves with x and the weight, marked
# non-differentiable and never handed to the caller. Its backward is the custom op
# <function>_backward, which launches the backward kernel (the spec's backward=true: dx, and
# dweight/dbias summed over every row, or over n and the positions, in a fixed order) on the current
# stream into tensors allocated by PyTorch, so that torch.compile traces forward and backward and a
# CUDA graph records both. Where the backward kernel cannot serve a call (see _decide_backward), the
# gradient is PyTorch's, from the same statistics, with one NormjitFallbackWarning per reason; a
# double backward (create_graph=True) is PyTorch's, differentiable, from x itself.

_TRAINED = ("rms_norm", "layer_norm", "rms_norm_channels", "layer_norm_channels", "group_norm")
# The trained functions whose backward kernel reads a channels-last x in place (layout=nhwc with
# backward=true: the channel forms' the row backward kernel over N x S rows of C, group_norm's a
# kernel of its own; where the library refuses that one, group_norm's takes contiguous copies).
_NHWC_BACKWARD = ("rms_norm_channels", "layer_norm_channels", "group_norm")
# The fused residual adds that train (called without other variant than weight_offset, not in
# place): their training op normalizes h = x + residual with the norm's kernel and saves h and
# its statistics; the norm's backward op gives dh, to which h's own gradient is added, and dh is
# the gradient of x and of residual (each in its dtype).
_ADD_TRAINED = {"add_rms_norm": "rms_norm", "add_layer_norm": "layer_norm"}
# The trained functions whose training ops take weight_offset, and where (their last input; a
# default of 0.0). Their calls with weight_offset alone train.
_OFFSET_AT = {"rms_norm": 4, "layer_norm": 5, "add_rms_norm": 5, "add_layer_norm": 6}
_LIBRARY_OPS = {**_ROW_OPS, **_CHANNEL_OPS}
# Where the custom ops of each trained function (<function>, <function>_train) take the weight,
# the bias (None: no bias) and eps among their inputs (the input is the first; the add_* ops'
# x and residual the first two).
_INPUTS_AT = {"rms_norm": (2, None, 3), "layer_norm": (2, 3, 4), "rms_norm_channels": (1, None, 2),
              "layer_norm_channels": (1, 2, 3), "group_norm": (2, 3, 4),
              "add_rms_norm": (3, None, 4), "add_layer_norm": (3, 4, 5)}


def _trains_variant(op: str, variant: tuple) -> bool:
    """Whether a call with the variant arguments trains through the training ops: rms_norm or
    layer_norm with weight_offset and/or an activation and no other variant (Gemma's RMSNorm,
    zero-centred gamma), add_rms_norm and add_layer_norm with at most those (not in place); the
    channel forms and group_norm with an activation."""
    if op in _OFFSET_AT:
        return variant[1:4] == (None, False, False)
    return op in _TRAINED and variant[:4] == (0.0, None, False, False)


class _Train:
    """_decide's answer for a call whose inputs require grad: the autograd op trains it."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "_TRAIN"


_TRAIN = _Train()


def _train(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
           eps: float, offset: float = 0.0, activation: Optional[str] = None) -> Tensor:
    """y of the training op of op (arg: normalized_shape, num_groups, or 0; offset: rms_norm's
    and layer_norm's weight_offset; activation: None, 'silu' or 'gelu'). The ops are called
    without the arguments at their defaults (the traced graph of a plain call is as before)."""
    ops = torch.ops.normjit
    act = () if activation is None else (activation,)
    if op == "rms_norm":
        if offset or act:
            return ops.rms_norm_train(x, list(arg), weight, eps, offset, *act)[0]
        return ops.rms_norm_train(x, list(arg), weight, eps)[0]
    if op == "layer_norm":
        if offset or act:
            return ops.layer_norm_train(x, list(arg), weight, bias, eps, offset, *act)[0]
        return ops.layer_norm_train(x, list(arg), weight, bias, eps)[0]
    if op == "rms_norm_channels":
        return ops.rms_norm_channels_train(x, weight, eps, *act)[0]
    if op == "layer_norm_channels":
        return ops.layer_norm_channels_train(x, weight, bias, eps, *act)[0]
    return ops.group_norm_train(x, arg, weight, bias, eps, *act)[0]


def _train_add(op: str, arg, x: Tensor, residual: Tensor, weight: Optional[Tensor],
               bias: Optional[Tensor], eps: float, offset: float,
               activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """(y, h) of the training op of add_rms_norm or add_layer_norm."""
    ops = torch.ops.normjit
    act = () if activation is None else (activation,)
    if op == "add_rms_norm":
        y, h, _ = ops.add_rms_norm_train(x, residual, list(arg), weight, eps, offset, *act)
    else:
        y, h, _, _ = ops.add_layer_norm_train(x, residual, list(arg), weight, bias, eps, offset,
                                              *act)
    return y, h


def _train_why_not(op: str, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                   eps: float) -> Optional[str]:
    """For a call of a trained function with an input that requires grad: None when its training
    op serves it, else why not (_why_not's reasons but grad). A channels-last input of the
    channel forms and group_norm trains too: the forward and the backward kernel read it in
    place (layout=nhwc with save_stats; with backward). Traceable by dynamo."""
    return _why_not(x, weight, bias, eps, op, None, False)


def _trains(op: str, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
            eps: float) -> bool:
    """Under torch.compile, for a call _traced_why_not gave a reason: whether the training op
    serves it (the reason is an input that requires grad, and nothing else stands in the way:
    _why_not checks grad after device, dtype and layout)."""
    return _train_why_not(op, x, weight, bias, eps) is None


def _reduction(op: str, arg, shape: Sequence[int]) -> Tuple[tuple, tuple, tuple]:
    """How op normalizes a tensor of `shape` (arg: normalized_shape, num_groups, or 0): viewed
    as `view`, it is reduced over `dims`, with one statistic per index of the other dims in
    row-major order (the library's layout of saved statistics); weight and bias, viewed as
    `param`, broadcast against the view's trailing dims. Works on symbolic shapes."""
    shape = tuple(shape)
    if op in _ROW_OPS:
        return shape, tuple(range(len(shape) - len(arg), len(shape))), tuple(arg)
    ones = (1,) * (len(shape) - 2)
    if op == "group_norm":  # [N, G, C / G, *spatial] over (C / G, *spatial)
        per_group = shape[1] // arg
        return ((shape[0], arg, per_group) + shape[2:], tuple(range(2, len(shape) + 1)),
                (arg, per_group) + ones)
    return shape, (1,), (shape[1],) + ones  # over the channels


def _stats_of(op: str, arg, shape: Sequence[int]) -> Tuple[int, ...]:
    """The shape of the statistics a training forward saves: the view's, the reduced dims of
    size 1 (as return_stats's for the trailing forms; [N, 1, *spatial] for the channel forms;
    [N, G, 1, ...] for group_norm)."""
    view, dims, _ = _reduction(op, arg, shape)
    return tuple(1 if d in dims else s for d, s in enumerate(view))


def _stats_per(op: str) -> str:
    if op in _ROW_OPS:
        return "row"
    return "(n, group)" if op == "group_norm" else "(n, position)"


def _torch_stats(library_op: str, xf: Tensor, dims: tuple,
                 eps: float) -> Tuple[Optional[Tensor], Tensor]:
    """(mean, rstd) of xf over dims, the reduced dims kept (size 1), in xf's dtype: rmsnorm's
    rstd = rsqrt(mean(x^2) + eps) (mean None); layernorm's mean and rsqrt(biased var + eps)."""
    if library_op == "rmsnorm":
        return None, torch.rsqrt(xf.square().mean(dims, keepdim=True) + eps)
    var, mean = torch.var_mean(xf, dims, correction=0, keepdim=True)
    return mean, torch.rsqrt(var + eps)


def _remember(key: Optional[tuple], decision):
    """Caches a decision under key (None: not cacheable) in _calls; returns it."""
    if key is not None:
        if len(_calls) >= _CALLS_MAX:
            _calls.clear()
        _calls[key] = decision
    return decision


# The training forward of the channel forms and group_norm: their kernel with save_stats,
# launched through normjit_launch_ex (the trailing forms' is the variant path, _op_outputs).

def _channels_kernel(op: str, arg, x: Tensor, has_weight: bool, has_bias: bool, eps: float,
                     axis: str, nhwc: bool = False, activation: Optional[str] = None) -> tuple:
    """_prepare's (kernel, per item) of a channel form or group_norm for x's shape class with
    one more axis of the spec: "save_stats" (the training forward) or "backward" (nhwc: of a
    channels-last x, layout=nhwc; activation: the forward's); or (None, the library's message)
    where it does not take the problem."""
    library_op = _CHANNEL_OPS[op]
    key = (library_op, tuple(x.shape[1:]), arg, x.dtype, has_weight, has_bias, axis, nhwc,
           activation, x.device.index)
    layout = " layout=nhwc" if nhwc else ""  # before backward, after save_stats: canonical
    spec = _channels_spec(library_op, tuple(x.shape), arg, x.dtype, has_weight, has_bias, eps,
                          activation)
    spec += layout + " backward=true" if axis == "backward" else f" {axis}=true" + layout
    return _prepare(key, spec, x.numel() // x.shape[0])


def _decide_channels_train(op: str, arg, x: Tensor, weight: Optional[Tensor],
                           bias: Optional[Tensor], eps: float,
                           activation: Optional[str] = None) -> Union[_Ex, str]:
    """Checks the arguments, then: an _Ex launching the save_stats kernel of a channel form or
    group_norm (with the activation), or why normjit cannot serve the call."""
    _check(op, arg, x, weight, bias)
    why = _train_why_not(op, x, weight, bias, eps)
    if why:
        return why
    nhwc = not x.is_contiguous()  # _why_not let it through: channels last
    kernel, message = _channels_kernel(op, arg, x, weight is not None, bias is not None, eps,
                                       "save_stats", nhwc, activation)
    if kernel is None:
        return message
    ex = _Ex()
    ex.nhwc = nhwc
    ex.kernel, ex.batch, ex.eps = kernel, x.shape[0], float(eps)
    ex.device, ex.torch_device = x.device.index, x.device
    ex.shape, ex.k, ex.y_dtype, ex.h_dtype = x.shape, 0, x.dtype, None
    ex.stats_shape = _stats_of(op, arg, x.shape)
    ex.mean = _CHANNEL_OPS[op] != "rmsnorm"
    ex.inplace = ex.strided = False
    ex.by_strides = {}
    return ex


def _torch_channels(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                    eps: float) -> Tensor:
    """PyTorch's y of a channel form or group_norm."""
    if op == "rms_norm_channels":
        return _torch_rms_norm_channels(x, weight, eps)
    if op == "layer_norm_channels":
        return _torch_layer_norm_channels(x, weight, bias, eps)
    return F.group_norm(x, arg, weight, bias, eps)


def _channels_train_decision(op: str, arg, x: Tensor, weight: Optional[Tensor],
                             bias: Optional[Tensor], eps: float,
                             activation: Optional[str] = None) -> Union[_Ex, str]:
    """_decide_channels_train's answer, cached as _decision's."""
    key = None
    if type(eps) is float:
        try:
            key = ("save_stats", op, arg, eps, activation, *_tensor_key(x),
                   *(_NO_TENSOR if weight is None else _tensor_key(weight)),
                   *(_NO_TENSOR if bias is None else _tensor_key(bias)))
            return _calls[key]
        except KeyError:
            pass
        except (AttributeError, TypeError):
            key = None
    return _remember(key, _decide_channels_train(op, arg, x, weight, bias, eps, activation))


def _channels_train(op: str, arg, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                    eps: float, activation: Optional[str] = None
                    ) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """(y, mean, rstd) of the training forward of a channel form or group_norm (mean None for
    rmsnorm; y through the activation, the statistics the norm's): normjit's kernel with
    save_stats, or, after the fallback warning, PyTorch's y and the statistics in float32;
    every output fresh, y in x's layout (channels last stays channels last), the statistics
    contiguous."""
    decision = _channels_train_decision(op, arg, x, weight, bias, eps, activation)
    if type(decision) is _Ex:
        out = _run(decision, x, weight, bias, None, None)
        if type(out) is tuple:
            y, _, mean, rstd = out
            return y, mean, rstd
        decision = out
    _fallback_warn(op, decision, x, weight, bias, eps)
    y = _fresh_channels(_activate(_torch_channels(op, arg, x, weight, bias, eps), activation), x)
    view, dims, _ = _reduction(op, arg, x.shape)
    acc = torch.promote_types(x.dtype, torch.float32)
    mean, rstd = _torch_stats(_CHANNEL_OPS[op], x.to(acc).reshape(view), dims, eps)
    return (y, None if mean is None else mean.to(torch.float32).contiguous(),
            rstd.to(torch.float32).contiguous())


# The backward

def _backward_reason_text(code: str, dy: Tensor, x: Tensor, weight: Optional[Tensor],
                          eps: float) -> str:
    if code == "double":
        return ("a double backward (create_graph=True; normjit's backward kernel has no "
                "derivative of its own)")
    if code == "grad_dtype":
        return (f"gradient dtype {dy.dtype} differs from the input's {x.dtype} (normjit's "
                "backward takes dy in the input's dtype)")
    if code == "stats_layout":
        return "non-contiguous saved statistics (normjit's backward reads one float per row)"
    return _reason_text(code, x, weight, None, eps)


def _backward_warn(op: str, code: str, dy: Tensor, x: Tensor, weight: Optional[Tensor],
                   eps: float) -> None:
    if _is_compiling():
        return
    key = (op + " backward", code)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"normjit.torch.{op} backward: {_backward_reason_text(code, dy, x, weight, eps)}"
                  "; computing the gradient with PyTorch", NormjitFallbackWarning, stacklevel=3)


def _sum_over(t: Tensor, dims: tuple) -> Tensor:
    """t summed over dims, kept (size 1), a fresh tensor; a contiguous copy of t when there are
    none (Tensor.sum(()) would sum everything; t itself could be a view of the backward op's
    gradient, which a custom op's output may not alias)."""
    return t.sum(dims, keepdim=True) if dims else t.clone(memory_format=torch.contiguous_format)


def _activation_slope(z: Tensor, activation: str) -> Tensor:
    """The derivative of F.silu or F.gelu (approximate='none') at z, differentiable."""
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    cdf = 0.5 * (1 + torch.erf(z * 0.7071067811865476))
    return cdf + z * torch.exp(-0.5 * z * z) * 0.3989422804014327


def _torch_backward(op: str, arg, dy: Tensor, x: Tensor, weight: Optional[Tensor],
                    has_bias: bool, mean: Optional[Tensor], rstd: Optional[Tensor],
                    eps: float, offset: float = 0.0, activation: Optional[str] = None,
                    bias: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """(dx, dweight, dbias) of op in PyTorch, in float32 (or wider), from the saved statistics;
    rstd None: from statistics computed here from x, a function autograd can differentiate
    (double backward). On x viewed as _reduction says, with xhat = (x - mean) * rstd (rmsnorm: x *
    rstd) and g = dy * (offset + weight): dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    (rmsnorm: without mean(g)), means over the normalized dims; dweight = sum of dy * xhat, dbias =
    sum of dy over the dims the parameters broadcast along (the rows; n and the positions);
    contiguous, in the dtypes of x and of the weight. With an activation after the affine step,
    dy is first taken through its derivative at z = xhat * (offset + weight) + bias."""
    view, dims, param = _reduction(op, arg, x.shape)
    rms = _LIBRARY_OPS[op] == "rmsnorm"
    acc = torch.promote_types(x.dtype, torch.float32)
    xf, dyf = x.to(acc).reshape(view), dy.to(acc).reshape(view)
    if rstd is None:
        mean, rstd = _torch_stats(_LIBRARY_OPS[op], xf, dims, eps)
    else:
        stats = _stats_of(op, arg, x.shape)
        rstd = rstd.to(acc).reshape(stats)
        if mean is not None:
            mean = mean.to(acc).reshape(stats)
    xhat = xf * rstd if rms else (xf - mean) * rstd
    w = None
    if weight is not None:
        w = weight.to(acc).reshape(param)
        w = w + offset if offset else w
    if activation is not None:
        z = xhat if w is None else xhat * w
        if bias is not None:
            z = z + bias.to(acc).reshape(param)
        dyf = dyf * _activation_slope(z, activation)
    g = dyf if w is None else dyf * w
    dx = g - xhat * (g * xhat).mean(dims, keepdim=True)
    if not rms:
        dx = dx - g.mean(dims, keepdim=True)
    dx = (rstd * dx).to(x.dtype).reshape(x.shape).contiguous()
    lead = len(view) - len(param)
    summed = tuple(d for d in range(len(view)) if d < lead or param[d - lead] == 1)
    dw = db = None
    if weight is not None:
        dw = _sum_over(dyf * xhat, summed).reshape(weight.shape).to(weight.dtype)
    if has_bias:
        db = _sum_over(dyf, summed).reshape(weight.shape).to(weight.dtype)
    return dx, dw, db


def _check_backward(op: str, arg, dy: Tensor, x: Tensor, mean: Optional[Tensor], rstd: Tensor,
                    weight: Optional[Tensor], has_bias: bool, offset: float = 0.0) -> None:
    """The backward ops' arguments (what the train ops hand over; checked for direct callers),
    ValueError naming the argument and its value."""
    what = f"normjit.torch.{op} backward"
    _check(op, arg, x, weight, None)
    for name, t in (("grad", dy), ("rstd", rstd), ("mean", mean)):
        if t is not None:
            _check_tensor(op, name, t, x)
    if dy.shape != x.shape:
        raise ValueError(f"{what}: grad has shape {list(dy.shape)}; expected the input's, "
                         f"{list(x.shape)}")
    stats = _stats_of(op, arg, x.shape)
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t is None:
            if name == "rstd" or _LIBRARY_OPS[op] != "rmsnorm":
                raise ValueError(f"{what}: {name} is None; expected the forward's saved {name}")
            continue
        if t.dtype != torch.float32 or t.numel() != math.prod(stats):
            raise ValueError(f"{what}: {name} has shape {list(t.shape)} and dtype {t.dtype}; "
                             f"expected {list(stats)} torch.float32 (one per {_stats_per(op)})")
    if has_bias and weight is None:
        raise ValueError(f"{what}: has_bias without a weight (normjit's affine is none, weight "
                         "or both)")
    if offset:
        _check_variant(op, x, weight, (offset, None, False, False, None), None)


def _decide_backward(op: str, arg, dy: Tensor, x: Tensor, mean: Optional[Tensor], rstd: Tensor,
                     weight: Optional[Tensor], has_bias: bool, eps: float,
                     offset: float = 0.0, residual: bool = False,
                     nhwc: bool = False, activation: Optional[str] = None) -> Union[tuple, str]:
    """Checks the arguments, then: a launch (kernel, batch, device index) of the backward
    kernel, or why it cannot serve the call (a reason code, or the library's message: a
    problem it has no backward kernel for, such as rows whose partials outgrow its workspace).
    residual: the kernel that adds h's gradient to dx (rms_norm and layer_norm; x is h). nhwc:
    the kernel of channels-last x and dy (layout=nhwc; the channel forms and group_norm).
    activation: the forward's (the kernel takes dy through its derivative)."""
    _check_backward(op, arg, dy, x, mean, rstd, weight, has_bias, offset)
    why = _why_not(x, weight, None, eps, op, None, False)
    if why == "param_dtype" and op in _ROW_OPS and weight.dtype in _DTYPES:
        # layer_norm's parameters of another dtype than its input, which F.layer_norm refuses
        # (so does layer_norm's forward), come from add_layer_norm, whose forward takes any one
        # parameter dtype (an f32 h beside 16-bit parameters): the backward kernel takes them.
        why = None
    if why:
        return why
    if dy.dtype != x.dtype:
        return "grad_dtype"
    if not rstd.is_contiguous() or (mean is not None and not mean.is_contiguous()):
        return "stats_layout"
    has_weight = weight is not None
    if op in _CHANNEL_OPS:  # one launch item per n
        kernel, message = _channels_kernel(op, arg, x, has_weight, has_bias, eps, "backward",
                                           nhwc, activation)
        return message if kernel is None else (kernel, x.shape[0], x.device.index)
    library_op = _ROW_OPS[op]
    per_item = math.prod(arg)
    batch = x.numel() // per_item
    param_dtype = weight.dtype if has_weight else None
    device = x.device.index
    key = (library_op, arg, x.dtype, has_weight, has_bias, param_dtype, offset, "backward",
           residual, activation, device)
    spec = _rows_spec(library_op, (batch,) + arg, len(arg), x.dtype, has_weight, has_bias,
                      eps, param_dtype, residual=x.dtype if residual else None,
                      weight_offset=offset, backward=True, activation=activation)
    kernel, message = _prepare(key, spec, per_item)
    if kernel is None:
        return message
    return (kernel, batch, device)


def _backward_decision(op: str, arg, dy: Tensor, x: Tensor, mean: Optional[Tensor],
                       rstd: Tensor, weight: Optional[Tensor], has_bias: bool, eps: float,
                       offset: float = 0.0, residual: bool = False,
                       nhwc: bool = False, activation: Optional[str] = None) -> Union[tuple, str]:
    """_decide_backward's answer, cached as _decision's."""
    key = None
    if type(eps) is float:
        try:
            key = ("backward", op, arg, eps, offset, residual, nhwc, has_bias, activation,
                   *_tensor_key(dy),
                   *_tensor_key(x),
                   *_tensor_key(rstd), *(_NO_TENSOR if mean is None else _tensor_key(mean)),
                   *(_NO_TENSOR if weight is None else _tensor_key(weight)))
            return _calls[key]
        except KeyError:
            pass
        except (AttributeError, TypeError):
            key = None
    return _remember(key, _decide_backward(op, arg, dy, x, mean, rstd, weight, has_bias, eps,
                                           offset, residual, nhwc, activation))


def _run_backward_kernel(decision: tuple, x: Tensor, dy: Tensor, mean: Optional[Tensor],
                         rstd: Tensor, weight: Optional[Tensor], has_bias: bool,
                         nhwc: bool = False, dh: Optional[Tensor] = None,
                         bias: Optional[Tensor] = None) -> Union[tuple, str]:
    """Launches the backward kernel of a decision (kernel, batch, device) on the current stream
    into tensors PyTorch allocates: (dx, dweight, dbias), dweight None without a weight, dbias
    None without a bias; or why it could not (a reason code, or the library's message: checked
    before anything was enqueued). nhwc: dx in x's channels-last layout; dh: the spec's
    residual, h's gradient added to dx; bias: the forward's, read by the kernel of a spec with
    an activation (for the activation's input)."""
    kernel, batch, device = decision
    xp, dyp, rp = x.data_ptr(), dy.data_ptr(), rstd.data_ptr()
    hp = dh.data_ptr() if dh is not None else 0
    bp = bias.data_ptr() if bias is not None else 0
    mp = mean.data_ptr() if mean is not None else None
    wp = weight.data_ptr() if weight is not None else None
    if (xp | dyp | hp | bp | (wp or 0)) & 15 or (rp | (mp or 0)) & 3:
        return "align"
    # channels last: dx in x's layout (empty_like keeps dense strides)
    dx = torch.empty_like(x) if nhwc else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty(weight.shape, dtype=weight.dtype, device=x.device) \
        if weight is not None else None
    db = torch.empty(weight.shape, dtype=weight.dtype, device=x.device) if has_bias else None
    args = (kernel, xp, dyp, mp, rp, wp, dx.data_ptr(), dw.data_ptr() if dw is not None else None,
            db.data_ptr() if db is not None else None, batch, _raw_stream(device))
    if dh is not None or bias is not None:
        args += (hp or None,)
    if bias is not None:
        args += (bp,)
    if _multi_device and torch.cuda.current_device() != device:
        with torch.cuda.device(device):
            status = _launch_backward(*args)
    else:
        status = _launch_backward(*args)
    if not status:
        return dx, dw, db
    error = normjit._capi.library().error(status)
    if not isinstance(error, InvalidArgumentError):
        raise error
    return error.message


def _backward_with_dh(op: str, arg, dy: Tensor, x: Tensor, mean: Optional[Tensor], rstd: Tensor,
                      weight: Optional[Tensor], has_bias: bool, eps: float, offset: float,
                      dh: Tensor, activation: Optional[str] = None,
                      bias: Optional[Tensor] = None) -> Optional[tuple]:
    """(dx, dweight, dbias) of _backward with dh from the backward kernel of the spec with a
    residual (one pass: dh loaded with x and dy, dx + dh stored), or None where it cannot serve
    the call (then: the kernel without it, and PyTorch's add)."""
    if op not in _ROW_OPS or dh.dtype != x.dtype or dh.shape != x.shape:
        return None
    x, dy, dh = x.contiguous(), dy.contiguous(), dh.contiguous()
    decision = _backward_decision(op, arg, dy, x, mean, rstd, weight, has_bias, eps, offset,
                                  residual=True, activation=activation)
    if type(decision) is not tuple:
        return None
    result = _run_backward_kernel(decision, x, dy, mean, rstd, weight, has_bias, dh=dh,
                                  bias=_read_bias(activation, bias))
    return result if type(result) is tuple else None


def _read_bias(activation: Optional[str], bias: Optional[Tensor]) -> Optional[Tensor]:
    """The bias a backward kernel reads: the forward's, with an activation (for its input z);
    contiguous (a parameter is)."""
    return bias.contiguous() if activation is not None and bias is not None else None


def _backward(op: str, arg, dy: Tensor, x: Tensor, mean: Optional[Tensor], rstd: Tensor,
              weight: Optional[Tensor], has_bias: bool, eps: float, offset: float = 0.0,
              dh: Optional[Tensor] = None, activation: Optional[str] = None,
              bias: Optional[Tensor] = None
              ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """(dx, dweight, dbias): normjit's backward kernel, or, after the fallback warning,
    PyTorch's gradient from the same statistics. dweight None without a weight, dbias None
    without a bias. dh (rms_norm and layer_norm, x's dtype and shape): a gradient of x from
    elsewhere (the fused adds' h), added to dx by the kernel of the spec with a residual, or
    after the kernel without one where that kernel cannot serve the call (a misaligned dh, a
    problem the library has no such kernel for). activation: the forward's, after its affine
    step (dy is its output's gradient); bias: the forward's, which the activation's input
    needs. dx of the channel forms and group_norm has x's memory format (channels last stays
    channels last), whichever computes it, as their backward ops' fake implementations say."""
    if dh is not None:
        dx = _backward_with_dh(op, arg, dy, x, mean, rstd, weight, has_bias, eps, offset, dh,
                               activation, bias)
        if dx is not None:
            return dx
        dx, dw, db = _backward(op, arg, dy, x, mean, rstd, weight, has_bias, eps, offset,
                               None, activation, bias)
        return dx + dh, dw, db
    # The kernel reads contiguous rows of x and dy: an input that the forward normalized in place
    # from strided rows (a per-head view of a qkv projection) and a non-contiguous gradient
    # (y.sum()'s is expanded) are copied first, one more pass over each, which costs less than
    # PyTorch's gradient. The channel forms and group_norm read a channels-last x in place
    # (layout=nhwc), dy copied channels last where it is not, and write dx channels last;
    # group_norm's channels-last kernel covers at most 512 vectors of channels, and past that
    # takes contiguous copies of x and dy (the channels-first kernel).
    nhwc = last = op in _NHWC_BACKWARD and not x.is_contiguous() and _channels_last(x)
    x_in = x
    if nhwc:
        dy_last = dy
        if not _channels_last(dy) or dy.shape != x.shape:
            dy_last = dy.movedim(1, -1).contiguous().movedim(-1, 1)
        decision = _backward_decision(op, arg, dy_last, x, mean, rstd, weight, has_bias, eps,
                                      offset, nhwc=True, activation=activation)
        if type(decision) is tuple or op != "group_norm":
            dy = dy_last
        else:
            nhwc = False
    if not nhwc:
        x, dy = x.contiguous(), dy.contiguous()
        decision = _backward_decision(op, arg, dy, x, mean, rstd, weight, has_bias, eps, offset,
                                      activation=activation)
    if type(decision) is tuple:
        decision = _run_backward_kernel(decision, x, dy, mean, rstd, weight, has_bias, nhwc,
                                        bias=_read_bias(activation, bias))
    if type(decision) is not tuple:
        _backward_warn(op, decision, dy, x, weight, eps)
        decision = _torch_backward(op, arg, dy, x, weight, has_bias, mean, rstd, eps, offset,
                                   activation, bias)
    dx, dw, db = decision
    if last and dx.is_contiguous():
        # Computed channels first (contiguous copies, PyTorch's gradient): dx in x's memory
        # format all the same, as the backward ops' fake implementations say.
        dx = _fresh_channels(dx, x_in)
    return dx, dw, db


# The training forward ops: y and the statistics (float32, _stats_of's shape).

@torch.library.custom_op("normjit::rms_norm_train", mutates_args=())
def _rms_norm_train_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                       eps: float, weight_offset: float = 0.0,
                       activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    y, _, _, rstd = _op_outputs("rms_norm", input, None, normalized_shape, weight, None, eps,
                                weight_offset, None, None, True, False, activation)
    return y, rstd


@torch.library.custom_op("normjit::layer_norm_train", mutates_args=())
def _layer_norm_train_op(input: Tensor, normalized_shape: List[int], weight: Optional[Tensor],
                         bias: Optional[Tensor], eps: float, weight_offset: float = 0.0,
                         activation: Optional[str] = None) -> Tuple[Tensor, Tensor, Tensor]:
    y, _, mean, rstd = _op_outputs("layer_norm", input, None, normalized_shape, weight, bias,
                                   eps, weight_offset, None, None, True, False, activation)
    return y, mean, rstd


@torch.library.custom_op("normjit::add_rms_norm_train", mutates_args=())
def _add_rms_norm_train_op(x: Tensor, residual: Tensor, normalized_shape: List[int],
                           weight: Optional[Tensor], eps: float, weight_offset: float = 0.0,
                           activation: Optional[str] = None) -> Tuple[Tensor, Tensor, Tensor]:
    y, h, _, rstd = _op_outputs("add_rms_norm", x, residual, normalized_shape, weight, None,
                                eps, weight_offset, None, None, True, False, activation)
    return y, h, rstd


@torch.library.custom_op("normjit::add_layer_norm_train", mutates_args=())
def _add_layer_norm_train_op(x: Tensor, residual: Tensor, normalized_shape: List[int],
                             weight: Optional[Tensor], bias: Optional[Tensor], eps: float,
                             weight_offset: float = 0.0, activation: Optional[str] = None
                             ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    y, h, mean, rstd = _op_outputs("add_layer_norm", x, residual, normalized_shape, weight,
                                   bias, eps, weight_offset, None, None, True, False, activation)
    return y, h, mean, rstd


@torch.library.custom_op("normjit::rms_norm_channels_train", mutates_args=())
def _rms_norm_channels_train_op(input: Tensor, weight: Optional[Tensor], eps: float,
                                activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    y, _, rstd = _channels_train("rms_norm_channels", 0, input, weight, None, eps, activation)
    return y, rstd


@torch.library.custom_op("normjit::layer_norm_channels_train", mutates_args=())
def _layer_norm_channels_train_op(input: Tensor, weight: Optional[Tensor],
                                  bias: Optional[Tensor], eps: float,
                                  activation: Optional[str] = None
                                  ) -> Tuple[Tensor, Tensor, Tensor]:
    return _channels_train("layer_norm_channels", 0, input, weight, bias, eps, activation)


@torch.library.custom_op("normjit::group_norm_train", mutates_args=())
def _group_norm_train_op(input: Tensor, num_groups: int, weight: Optional[Tensor],
                         bias: Optional[Tensor], eps: float,
                         activation: Optional[str] = None) -> Tuple[Tensor, Tensor, Tensor]:
    return _channels_train("group_norm", num_groups, input, weight, bias, eps, activation)


def _fake_train(op: str, input: Tensor, arg, count: int) -> tuple:
    """y (the channel forms' and group_norm's in the input's layout) and count - 1 statistics
    of op's training forward."""
    stats = _stats_of(op, arg, input.shape)
    y = _empty_like_layout(input) if op in _CHANNEL_OPS else input.new_empty(input.shape)
    return (y, *(input.new_empty(stats, dtype=torch.float32) for _ in range(count - 1)))


@_rms_norm_train_op.register_fake
def _(input, normalized_shape, weight, eps, weight_offset=0.0, activation=None):
    return _fake_train("rms_norm", input, normalized_shape, 2)


@_layer_norm_train_op.register_fake
def _(input, normalized_shape, weight, bias, eps, weight_offset=0.0, activation=None):
    return _fake_train("layer_norm", input, normalized_shape, 3)


@_add_rms_norm_train_op.register_fake
def _(x, residual, normalized_shape, weight, eps, weight_offset=0.0, activation=None):
    return (_fake_y(x, None), residual.new_empty(residual.shape),
            _fake_stat(x, normalized_shape))


@_add_layer_norm_train_op.register_fake
def _(x, residual, normalized_shape, weight, bias, eps, weight_offset=0.0, activation=None):
    return (_fake_y(x, None), residual.new_empty(residual.shape),
            _fake_stat(x, normalized_shape), _fake_stat(x, normalized_shape))


@_rms_norm_channels_train_op.register_fake
def _(input, weight, eps, activation=None):
    return _fake_train("rms_norm_channels", input, 0, 2)


@_layer_norm_channels_train_op.register_fake
def _(input, weight, bias, eps, activation=None):
    return _fake_train("layer_norm_channels", input, 0, 3)


@_group_norm_train_op.register_fake
def _(input, num_groups, weight, bias, eps, activation=None):
    return _fake_train("group_norm", input, num_groups, 3)


# The backward ops: (dx, dweight[, dbias]) from the forward's input, its saved statistics and
# the gradient of its output; dweight and dbias are empty tensors where the call has no such
# parameter (an op's outputs are tensors).

def _no_param(input: Tensor) -> Tensor:
    """What a backward op returns for a parameter the call does not have: an empty tensor of
    the input's dtype."""
    return input.new_empty((0,))


def _grad_outputs(input: Tensor, dx: Tensor, dw: Optional[Tensor],
                  db: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    return (dx, dw if dw is not None else _no_param(input),
            db if db is not None else _no_param(input))


@torch.library.custom_op("normjit::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(grad: Tensor, input: Tensor, rstd: Tensor, weight: Optional[Tensor],
                          normalized_shape: List[int], eps: float, weight_offset: float = 0.0,
                          dresidual_out: Optional[Tensor] = None,
                          activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """(dx, dweight) of rms_norm (with weight_offset: of the weight used, weight_offset +
    weight); with dresidual_out (the fused add's: input is h, this is h's gradient from its
    other uses, input's dtype and shape), dx is the norm's gradient plus it; with an activation
    ('silu', 'gelu': the forward's after its affine step), grad is the activation's output's."""
    return _grad_outputs(input, *_backward("rms_norm", tuple(normalized_shape), grad, input,
                                           None, rstd, weight, False, eps, weight_offset,
                                           dresidual_out, activation))[:2]


@torch.library.custom_op("normjit::layer_norm_backward", mutates_args=())
def _layer_norm_backward_op(grad: Tensor, input: Tensor, mean: Tensor, rstd: Tensor,
                            weight: Optional[Tensor], has_bias: bool, normalized_shape: List[int],
                            eps: float, weight_offset: float = 0.0,
                            dresidual_out: Optional[Tensor] = None,
                            activation: Optional[str] = None, bias: Optional[Tensor] = None
                            ) -> Tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of layer_norm (with weight_offset: of the weight used,
    weight_offset + weight; with dresidual_out and an activation, as rms_norm_backward's; bias:
    the forward's, which the activation's input needs where has_bias)."""
    return _grad_outputs(input, *_backward("layer_norm", tuple(normalized_shape), grad, input,
                                           mean, rstd, weight, has_bias, eps, weight_offset,
                                           dresidual_out, activation, bias))


@torch.library.custom_op("normjit::rms_norm_channels_backward", mutates_args=())
def _rms_norm_channels_backward_op(grad: Tensor, input: Tensor, rstd: Tensor,
                                   weight: Optional[Tensor], eps: float,
                                   activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """(dx, dweight) of rms_norm_channels (activation: as rms_norm_backward's)."""
    return _grad_outputs(input, *_backward("rms_norm_channels", 0, grad, input, None, rstd,
                                           weight, False, eps, 0.0, None, activation))[:2]


@torch.library.custom_op("normjit::layer_norm_channels_backward", mutates_args=())
def _layer_norm_channels_backward_op(grad: Tensor, input: Tensor, mean: Tensor, rstd: Tensor,
                                     weight: Optional[Tensor], has_bias: bool, eps: float,
                                     activation: Optional[str] = None,
                                     bias: Optional[Tensor] = None
                                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of layer_norm_channels (activation and bias: as
    layer_norm_backward's)."""
    return _grad_outputs(input, *_backward("layer_norm_channels", 0, grad, input, mean, rstd,
                                           weight, has_bias, eps, 0.0, None, activation, bias))


@torch.library.custom_op("normjit::group_norm_backward", mutates_args=())
def _group_norm_backward_op(grad: Tensor, input: Tensor, mean: Tensor, rstd: Tensor,
                            weight: Optional[Tensor], has_bias: bool, num_groups: int,
                            eps: float, activation: Optional[str] = None,
                            bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of group_norm (activation and bias: as layer_norm_backward's)."""
    return _grad_outputs(input, *_backward("group_norm", num_groups, grad, input, mean, rstd,
                                           weight, has_bias, eps, 0.0, None, activation, bias))


def _fake_grads(input: Tensor, weight: Optional[Tensor], has_bias: bool,
                channels: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of a backward op: dx contiguous, or for the channel forms and
    group_norm (channels) in the input's memory format, as _backward returns it."""
    return (_empty_like_layout(input) if channels else input.new_empty(input.shape),
            weight.new_empty(weight.shape) if weight is not None else _no_param(input),
            weight.new_empty(weight.shape) if has_bias and weight is not None
            else _no_param(input))


@_rms_norm_backward_op.register_fake
def _(grad, input, rstd, weight, normalized_shape, eps, weight_offset=0.0, dresidual_out=None,
      activation=None):
    return _fake_grads(input, weight, False)[:2]


@_layer_norm_backward_op.register_fake
def _(grad, input, mean, rstd, weight, has_bias, normalized_shape, eps, weight_offset=0.0,
      dresidual_out=None, activation=None, bias=None):
    return _fake_grads(input, weight, has_bias)


@_rms_norm_channels_backward_op.register_fake
def _(grad, input, rstd, weight, eps, activation=None):
    return _fake_grads(input, weight, False, channels=True)[:2]


@_layer_norm_channels_backward_op.register_fake
def _(grad, input, mean, rstd, weight, has_bias, eps, activation=None, bias=None):
    return _fake_grads(input, weight, has_bias, channels=True)


@_group_norm_backward_op.register_fake
def _(grad, input, mean, rstd, weight, has_bias, num_groups, eps, activation=None, bias=None):
    return _fake_grads(input, weight, has_bias, channels=True)


def _backward_op(op: str, arg, dy: Tensor, x: Tensor, mean: Optional[Tensor], rstd: Tensor,
                 weight: Optional[Tensor], has_bias: bool, eps: float,
                 offset: float = 0.0, dh: Optional[Tensor] = None,
                 activation: Optional[str] = None, bias: Optional[Tensor] = None) -> tuple:
    """(dx, dweight, dbias) by op's backward op (the last two placeholders where absent); dh
    (rms_norm, layer_norm): added to dx by it; activation: the forward's (bias: its bias, for
    the activation's input). The ops are called without the arguments at their defaults."""
    ops = torch.ops.normjit
    if activation is not None:
        bias = bias if has_bias else None
        if op == "rms_norm":
            return (*ops.rms_norm_backward(dy, x, rstd, weight, list(arg), eps, offset, dh,
                                           activation), None)
        if op == "layer_norm":
            return ops.layer_norm_backward(dy, x, mean, rstd, weight, has_bias, list(arg), eps,
                                           offset, dh, activation, bias)
        if op == "rms_norm_channels":
            return (*ops.rms_norm_channels_backward(dy, x, rstd, weight, eps, activation), None)
        if op == "layer_norm_channels":
            return ops.layer_norm_channels_backward(dy, x, mean, rstd, weight, has_bias, eps,
                                                    activation, bias)
        return ops.group_norm_backward(dy, x, mean, rstd, weight, has_bias, arg, eps,
                                       activation, bias)
    if op == "rms_norm":
        if dh is not None:
            return (*ops.rms_norm_backward(dy, x, rstd, weight, list(arg), eps, offset, dh), None)
        if offset:
            return (*ops.rms_norm_backward(dy, x, rstd, weight, list(arg), eps, offset), None)
        return (*ops.rms_norm_backward(dy, x, rstd, weight, list(arg), eps), None)
    if op == "layer_norm":
        if dh is not None:
            return ops.layer_norm_backward(dy, x, mean, rstd, weight, has_bias, list(arg), eps,
                                           offset, dh)
        if offset:
            return ops.layer_norm_backward(dy, x, mean, rstd, weight, has_bias, list(arg), eps,
                                           offset)
        return ops.layer_norm_backward(dy, x, mean, rstd, weight, has_bias, list(arg), eps)
    if op == "rms_norm_channels":
        return (*ops.rms_norm_channels_backward(dy, x, rstd, weight, eps), None)
    if op == "layer_norm_channels":
        return ops.layer_norm_channels_backward(dy, x, mean, rstd, weight, has_bias, eps)
    return ops.group_norm_backward(dy, x, mean, rstd, weight, has_bias, arg, eps)


# Autograd of the training ops (and of the plain ops of rms_norm and layer_norm, called directly
# as torch.ops.normjit.rms_norm with inputs that require grad: they save no statistics, so their
# backward computes them first, one more pass over x in PyTorch; the public functions train
# through the _train ops instead).

def _grads(ctx, op: str, dy: Optional[Tensor], x: Tensor, weight: Optional[Tensor],
           mean: Optional[Tensor], rstd: Optional[Tensor], dh: Optional[Tensor] = None,
           bias: Optional[Tensor] = None) -> tuple:
    """The gradients of a forward op for its inputs, from the gradient dy of the result of norm
    op (op: rms_norm, layer_norm, ...) of x: the backward op, or in a double backward PyTorch's
    differentiable expression. rstd None (an op that saved no statistics): they are computed
    here first, in float32. ctx.x_at: where the forward op takes what x's gradient is the
    gradient of, each with the dtype it takes (None: x's); ctx.params_at: where it takes weight
    and bias. dh: a gradient of x from elsewhere (the add_* ops' output h, which is x here),
    added to the norm's: by the backward kernel as it stores dx where dh has x's dtype.
    ctx.activation: the forward's activation after its affine step (bias: the forward's bias,
    saved for the activation's input where there is one)."""
    w_at, b_at = ctx.params_at
    need = ctx.needs_input_grad
    has_bias = ctx.has_bias
    need_x = any(need[at] for at, _ in ctx.x_at)
    need_w = weight is not None and need[w_at]
    need_b = has_bias and need[b_at]
    dx = dw = db = None
    if dy is not None and (need_x or need_w or need_b):
        if torch.is_grad_enabled():  # create_graph=True
            _backward_warn(op, "double", dy, x, weight, ctx.eps)
            dx, dw, db = _torch_backward(op, ctx.arg, dy, x, weight, has_bias, None, None,
                                         ctx.eps, ctx.offset, ctx.activation, bias)
        else:
            if rstd is None:
                view, dims, _ = _reduction(op, ctx.arg, x.shape)
                acc = torch.promote_types(x.dtype, torch.float32)
                mean, rstd = _torch_stats(_LIBRARY_OPS[op], x.to(acc).reshape(view), dims,
                                          ctx.eps)
                rstd = rstd.float().contiguous()
                mean = mean.float().contiguous() if mean is not None else None
            # h's own gradient goes into the backward kernel (added as it stores dx) where it
            # has h's dtype; else it is added here.
            fused = dh is not None and op in _ROW_OPS and dh.dtype == x.dtype
            dx, dw, db = _backward_op(op, ctx.arg, dy, x, mean, rstd, weight, has_bias, ctx.eps,
                                      ctx.offset, dh if fused else None, ctx.activation, bias)
            if fused:
                dh = None
    if dh is not None:
        dx = dh if dx is None else dx + dh
    grads = [None] * len(need)
    for at, dtype in ctx.x_at:
        if need[at] and dx is not None:
            grads[at] = dx if dtype is None or dtype == dx.dtype else dx.to(dtype)
    if need_w:
        grads[w_at] = dw
    if need_b:
        grads[b_at] = db
    return tuple(grads)


def _autograd(op: str, saves_stats: bool) -> Tuple[Callable, Callable]:
    """(backward, setup_context) of op's training op (saves_stats: its outputs are y and the
    statistics; the add_* ops': y, h and h's statistics) or of its plain op (y alone)."""
    w_at, b_at, eps_at = _INPUTS_AT[op]
    add = op in _ADD_TRAINED
    norm = _ADD_TRAINED.get(op, op)

    # The training ops take the activation last: after weight_offset (rms_norm, layer_norm and
    # the add_* ops), else after eps.
    act_at = (_OFFSET_AT[op] if op in _OFFSET_AT else eps_at) + 1

    def setup_context(ctx, inputs, output):
        stats = tuple(output[2 if add else 1:]) if saves_stats else ()
        ctx.mark_non_differentiable(*stats)
        ctx.set_materialize_grads(False)
        ctx.activation = inputs[act_at] if saves_stats and len(inputs) > act_at else None
        # The bias, for the activation's input.
        bias = inputs[b_at] if ctx.activation is not None and b_at is not None else None
        # What the norm normalized: the input, or the add_* ops' output h (x + residual).
        ctx.save_for_backward(output[1] if add else inputs[0], inputs[w_at], bias, *stats)
        ctx.x_at = ((0, inputs[0].dtype), (1, inputs[1].dtype)) if add else ((0, None),)
        ctx.params_at = (w_at, b_at)
        if op in _ROW_OPS:
            ctx.arg = tuple(inputs[2 if add else 1])
        else:
            ctx.arg = inputs[1] if op == "group_norm" else 0
        ctx.eps = inputs[eps_at]
        ctx.has_bias = b_at is not None and inputs[b_at] is not None
        offset_at = _OFFSET_AT.get(op) if saves_stats else None
        ctx.offset = float(inputs[offset_at]) if offset_at is not None and \
            len(inputs) > offset_at else 0.0

    def backward(ctx, dy, *other_grads):
        x, weight, bias, *stats = ctx.saved_tensors
        mean, rstd = (None, None) if not stats else (None, stats[0]) if len(stats) == 1 \
            else stats
        if not add:
            return _grads(ctx, norm, dy, x, weight, mean, rstd, None, bias)
        if dy is not None and dy.dtype != x.dtype:  # y in x's dtype, h in the residual's
            dy = dy.to(x.dtype)
        return _grads(ctx, norm, dy, x, weight, mean, rstd, other_grads[0], bias)

    return backward, setup_context


for _op, _name, _saves_stats in (
        (_rms_norm_train_op, "rms_norm", True), (_layer_norm_train_op, "layer_norm", True),
        (_rms_norm_channels_train_op, "rms_norm_channels", True),
        (_layer_norm_channels_train_op, "layer_norm_channels", True),
        (_group_norm_train_op, "group_norm", True),
        (_add_rms_norm_train_op, "add_rms_norm", True),
        (_add_layer_norm_train_op, "add_layer_norm", True),
        (_rms_norm_op, "rms_norm", False), (_layer_norm_op, "layer_norm", False)):
    _backward_fn, _setup_fn = _autograd(_name, _saves_stats)
    _op.register_autograd(_backward_fn, setup_context=_setup_fn)


# ---------------------------------------------------------------------------------------
# The public functions: torch.nn.functional's signatures
# ---------------------------------------------------------------------------------------
# Each runs PyTorch's implementation when normjit cannot serve the call; a patched layer
# passes its class's own forward and itself (fallback(module, x)) to run instead.

def _rms_norm(x: Tensor, shape: Union[int, Sequence[int]], weight: Optional[Tensor],
              eps: Optional[float], fallback: Optional[Callable] = None,
              module: Optional[torch.nn.Module] = None) -> Tensor:
    if type(shape) is not tuple:
        shape = _as_shape("rms_norm", shape)
    if _is_compiling():
        eps_f = _eps(x, eps)
        why = _traced_why_not("rms_norm", shape, x, weight, None, eps_f)
        if why is None:
            return torch.ops.normjit.rms_norm(x, list(shape), weight, eps_f)
        if why == "grad" and _why_not(x, weight, None, eps_f, "rms_norm", None, False) is None:
            return torch.ops.normjit.rms_norm_train(x, list(shape), weight, eps_f)[0]
    else:
        y = _eager("rms_norm", shape, x, weight, None, eps)
        if y is not None:
            return y
    return fallback(module, x) if fallback else F.rms_norm(x, shape, weight, eps)


def _rms_norm_channels(x: Tensor, weight: Optional[Tensor], eps: float,
                       fallback: Optional[Callable] = None,
                       module: Optional[torch.nn.Module] = None,
                       activation: Optional[str] = None) -> Tensor:
    if _is_compiling():
        why = _traced_why_not("rms_norm_channels", 0, x, weight, None, eps)
        if why is None:
            if activation is None:
                return torch.ops.normjit.rms_norm_channels(x, weight, eps)
            return torch.ops.normjit.rms_norm_channels(x, weight, eps, activation)
        if why == "grad" and _trains("rms_norm_channels", x, weight, None, eps):
            return _train("rms_norm_channels", 0, x, weight, None, eps, 0.0, activation)
    else:
        y = _eager("rms_norm_channels", 0, x, weight, None, eps,
                   None if activation is None else (0.0, None, False, False, activation))
        if y is not None:
            return y
    return _activate(fallback(module, x) if fallback else _torch_rms_norm_channels(x, weight, eps),
                     activation)


def _layer_norm(x: Tensor, shape: Union[int, Sequence[int]], weight: Optional[Tensor],
                bias: Optional[Tensor], eps: float, fallback: Optional[Callable] = None,
                module: Optional[torch.nn.Module] = None) -> Tensor:
    if type(shape) is not tuple:
        shape = _as_shape("layer_norm", shape)
    if _is_compiling():
        why = _traced_why_not("layer_norm", shape, x, weight, bias, eps)
        if why is None:
            return torch.ops.normjit.layer_norm(x, list(shape), weight, bias, eps)
        if why == "grad" and _why_not(x, weight, bias, eps, "layer_norm", None, False) is None:
            return torch.ops.normjit.layer_norm_train(x, list(shape), weight, bias, eps)[0]
    else:
        y = _eager("layer_norm", shape, x, weight, bias, eps)
        if y is not None:
            return y
    return fallback(module, x) if fallback else F.layer_norm(x, shape, weight, bias, eps)


def _layer_norm_channels(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                         eps: float, fallback: Optional[Callable] = None,
                         module: Optional[torch.nn.Module] = None,
                         activation: Optional[str] = None) -> Tensor:
    if _is_compiling():
        why = _traced_why_not("layer_norm_channels", 0, x, weight, bias, eps)
        if why is None:
            if activation is None:
                return torch.ops.normjit.layer_norm_channels(x, weight, bias, eps)
            return torch.ops.normjit.layer_norm_channels(x, weight, bias, eps, activation)
        if why == "grad" and _trains("layer_norm_channels", x, weight, bias, eps):
            return _train("layer_norm_channels", 0, x, weight, bias, eps, 0.0, activation)
    else:
        y = _eager("layer_norm_channels", 0, x, weight, bias, eps,
                   None if activation is None else (0.0, None, False, False, activation))
        if y is not None:
            return y
    return _activate(
        fallback(module, x) if fallback else _torch_layer_norm_channels(x, weight, bias, eps),
        activation)


def _group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor], bias: Optional[Tensor],
                eps: float, fallback: Optional[Callable] = None,
                module: Optional[torch.nn.Module] = None,
                activation: Optional[str] = None) -> Tensor:
    """group_norm; with an activation ('silu', 'gelu'), the fused kernel, or the fallback's
    y (a patched layer's own forward, or F.group_norm) through PyTorch's activation."""
    if type(num_groups) is not int or num_groups < 1:
        num_groups = _as_groups("group_norm", num_groups)
    if _is_compiling():
        why = _traced_why_not("group_norm", num_groups, x, weight, bias, eps)
        if why is None:
            if activation is None:
                return torch.ops.normjit.group_norm(x, num_groups, weight, bias, eps)
            return torch.ops.normjit.group_norm(x, num_groups, weight, bias, eps, activation)
        if why == "grad" and _trains("group_norm", x, weight, bias, eps):
            return _train("group_norm", num_groups, x, weight, bias, eps, 0.0, activation)
    else:
        y = _eager("group_norm", num_groups, x, weight, bias, eps,
                   None if activation is None else (0.0, None, False, False, activation))
        if y is not None:
            return y
    return _activate(
        fallback(module, x) if fallback else F.group_norm(x, num_groups, weight, bias, eps),
        activation)


def _variant(op: str, x: Tensor, residual: Optional[Tensor],
             shape: Union[int, Sequence[int]], weight: Optional[Tensor], bias: Optional[Tensor],
             eps: Optional[float], offset: float, out_dtype: Optional[torch.dtype],
             scale: Optional[Tensor], stats: bool, inplace: bool,
             fallback: Optional[Callable] = None, module: Optional[torch.nn.Module] = None,
             activation: Optional[str] = None):
    """A call with the variant arguments: normjit's outputs, or PyTorch's expression (a
    patched layer's own forward, fallback(module, x), where given, through the activation)."""
    if type(shape) is not tuple:
        shape = _as_shape(op, shape)
    if type(offset) is not float:
        offset = _as_offset(op, offset)
    variant = (offset, out_dtype, bool(stats), bool(inplace), activation)
    if _is_compiling():
        eps_f = _eps(x, eps)
        why = _traced_why_not(op, shape, x, weight, bias, eps_f, variant, residual, scale)
        if why is None:
            return _result(op, _traced_variant(op, x, residual, shape, weight, bias, eps_f,
                                               variant, scale), variant)
        if why == "grad" and _trains_variant(op, variant) and _trains(op, x, weight, bias, eps_f):
            if op in _ADD_TRAINED:
                return _train_add(op, shape, x, residual, weight, bias, eps_f, offset, activation)
            return _train(op, shape, x, weight, bias, eps_f, offset, activation)
    else:
        out = _eager_variant(op, shape, x, weight, bias, eps, variant, residual, scale)
        if type(out) is tuple:
            return _result(op, out, variant)
    if fallback is not None:
        return _activate(fallback(module, x), activation)
    return _result(op, _torch_variant(op, x, residual, shape, weight, bias, eps, variant, scale),
                   variant)


def _result(op: str, out: tuple, variant: tuple):
    """What the public function returns of (y, h, mean, rstd)."""
    y, h, mean, rstd = out
    if op == "rms_norm":
        return (y, rstd) if variant[2] else y
    if op == "layer_norm":
        return (y, mean, rstd) if variant[2] else y
    return y, h


def rms_norm(input: Tensor, normalized_shape: Union[int, Sequence[int]],
             weight: Optional[Tensor] = None, eps: Optional[float] = None, *,
             weight_offset: float = 0.0, out_dtype: Optional[torch.dtype] = None,
             scale: Optional[Tensor] = None, return_stats: bool = False,
             activation: Optional[str] = None):
    """torch.nn.functional.rms_norm: RMSNorm over the trailing `normalized_shape` of input,
    statistics in float32; eps None means torch.finfo(input.dtype).eps, as in PyTorch. The
    result has the input's dtype, as F.rms_norm's, also for a weight of another dtype
    (float32, float16, bfloat16). An input whose rows are strided (a slice, a per-head view)
    is read in place, the result is contiguous.

    Keyword-only variants (any of them given: the result is the expression below, computed in
    float32 from the input):
      weight_offset: the weight used is weight_offset + weight, in float32 (Gemma: 1.0);
        needs a weight. Given alone or with activation, it trains through normjit's backward
        kernel (the others are forward-only: with an input that requires grad, PyTorch
        computes the expression, with a NormjitFallbackWarning).
      out_dtype: the result's dtype: torch.float32, float16, bfloat16, or fp8
        (torch.float8_e4m3fn, torch.float8_e5m2) with `scale`, a one-element float32 tensor
        on the input's device: y = saturate(normalized * scale) (scale only with fp8).
      return_stats: returns (y, rstd), rstd float32 of shape input.shape[:-k] + (1,) * k for
        k normalized dims, as torch.ops.aten._fused_rms_norm's.
      activation: None, 'silu' or 'gelu' (F.silu; F.gelu, approximate='none'), applied to n
        in the same kernel; trains through normjit's backward kernel as weight_offset does
        (dy through the activation's derivative).
    The expression: xf = input.float(); rstd = torch.rsqrt(xf.square().mean(dims,
    keepdim=True) + eps); n = activation(xf * rstd * (weight_offset + weight.float()));
    y = n.to(out_dtype) (default the input's dtype), for fp8 (n * scale).clamp(-max,
    max).to(out_dtype) with max the format's largest finite value (448, 57344)."""
    # The variant arguments at their defaults: torch.nn.functional's call, the cheapest path
    # (spelled out here: a helper's call costs about 0.1 us).
    if (out_dtype is None and scale is None and return_stats is False and activation is None
            and type(weight_offset) is float and weight_offset == 0.0):
        return _rms_norm(input, normalized_shape, weight, eps)
    return _variant("rms_norm", input, None, normalized_shape, weight, None, eps, weight_offset,
                    out_dtype, scale, return_stats, False, None, None,
                    _as_activation("rms_norm", activation))


def rms_norm_channels(input: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-5, *,
                      activation: Optional[str] = None) -> Tensor:
    """RMSNorm's channel form: input [N, C, *spatial] reduced over dim 1,
    x / sqrt(mean(x^2, dim=1, keepdim=True) + eps), times weight [C] when given; activation
    None, 'silu' or 'gelu' (F.silu; F.gelu, approximate='none') of that, in the same kernel. A
    channels-last input (channels_last, channels_last_3d, or any rank's analogue) is read in
    place and the result is channels last too; a contiguous input gives a contiguous result."""
    if eps is None:
        _no_eps("rms_norm_channels")
    if activation is None:
        return _rms_norm_channels(input, weight, eps)
    return _rms_norm_channels(input, weight, eps, None, None,
                              _as_activation("rms_norm_channels", activation))


def layer_norm(input: Tensor, normalized_shape: Union[int, Sequence[int]],
               weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5, *, weight_offset: float = 0.0,
               out_dtype: Optional[torch.dtype] = None, scale: Optional[Tensor] = None,
               return_stats: bool = False, activation: Optional[str] = None):
    """torch.nn.functional.layer_norm: over the trailing `normalized_shape`, biased variance,
    statistics in float32. The result has the input's dtype. weight and bias of another dtype
    than the input fall back to F.layer_norm, which raises on CUDA (and computes some mixes on
    CPU). An input whose rows are strided is read in place, the result is contiguous.

    Keyword-only variants, as rms_norm's: weight_offset (zero-centred gamma: the weight used
    is weight_offset + weight, in float32), out_dtype and scale (fp8), return_stats, which
    returns (y, mean, rstd) as torch.ops.aten.native_layer_norm on CUDA does (float32, shape
    input.shape[:-k] + (1,) * k), and activation (None, 'silu', 'gelu'). The expression:
    xf = input.float(); var, mean = torch.var_mean(xf, dims, correction=0, keepdim=True);
    rstd = torch.rsqrt(var + eps); n = activation((xf - mean) * rstd * (weight_offset +
    weight.float()) + bias.float()); y as rms_norm's."""
    if (out_dtype is None and scale is None and return_stats is False and activation is None
            and type(weight_offset) is float and weight_offset == 0.0):
        return _layer_norm(input, normalized_shape, weight, bias, eps)
    return _variant("layer_norm", input, None, normalized_shape, weight, bias, eps,
                    weight_offset, out_dtype, scale, return_stats, False, None, None,
                    _as_activation("layer_norm", activation))


def add_rms_norm(x: Tensor, residual: Tensor, normalized_shape: Union[int, Sequence[int]],
                 weight: Optional[Tensor] = None, eps: Optional[float] = None, *,
                 weight_offset: float = 0.0, out_dtype: Optional[torch.dtype] = None,
                 scale: Optional[Tensor] = None, inplace: bool = False,
                 activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """The residual add and RMSNorm of a decoder layer in one pass (vLLM's and FlashInfer's
    fused_add_rms_norm): returns (y, h) with

        h = (x.float() + residual.float()).to(residual.dtype)
        y = rms_norm(h, normalized_shape, weight, eps, weight_offset=weight_offset,
                     out_dtype=out_dtype or x.dtype, scale=scale)

    that is, h computed in float32 and rounded once to the residual's dtype (x's dtype or
    torch.float32, same shape as x), and y normalized from that rounded h in float32, in x's
    dtype unless out_dtype says otherwise (fp8 with scale, as rms_norm's). eps None is
    torch.finfo(x.dtype).eps. weight may have another dtype than x (float32, float16,
    bfloat16). x and residual may be strided as rms_norm's input.
    inplace=True writes h into residual and y into x (out_dtype None or x's dtype) and returns
    (x, residual), as vLLM's fused_add_rms_norm(input, residual, weight, eps). activation
    (None, 'silu', 'gelu') applies to y only, as rms_norm's; h is the sum.
    Training (x, residual or weight requiring grad, grad mode on): without variants other than
    weight_offset and activation and not in place, through normjit's kernels (this forward
    saving h's statistics, rms_norm's backward kernel on h; the gradient of x and of residual
    is that dh plus h's own gradient, each in its dtype); otherwise PyTorch's autograd of the
    expression, with a NormjitFallbackWarning."""
    return _variant("add_rms_norm", x, residual, normalized_shape, weight, None, eps,
                    weight_offset, out_dtype, scale, False, inplace, None, None,
                    _as_activation("add_rms_norm", activation))


def add_layer_norm(x: Tensor, residual: Tensor, normalized_shape: Union[int, Sequence[int]],
                   weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                   eps: float = 1e-5, *, weight_offset: float = 0.0,
                   out_dtype: Optional[torch.dtype] = None, scale: Optional[Tensor] = None,
                   inplace: bool = False,
                   activation: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """add_rms_norm's LayerNorm: returns (y, h) with

        h = (x.float() + residual.float()).to(residual.dtype)
        y = layer_norm(h, normalized_shape, weight, bias, eps, weight_offset=weight_offset,
                       out_dtype=out_dtype or x.dtype, scale=scale)

    (layer_norm's expression: statistics and affine step in float32 from h). weight and bias
    have one dtype of float32, float16, bfloat16 (any, whatever x's). inplace=True writes h
    into residual and y into x and returns (x, residual). activation as add_rms_norm's, and so
    is training (layer_norm's backward kernel on h)."""
    return _variant("add_layer_norm", x, residual, normalized_shape, weight, bias, eps,
                    weight_offset, out_dtype, scale, False, inplace, None, None,
                    _as_activation("add_layer_norm", activation))


def layer_norm_channels(input: Tensor, weight: Optional[Tensor] = None,
                        bias: Optional[Tensor] = None, eps: float = 1e-6, *,
                        activation: Optional[str] = None) -> Tensor:
    """LayerNorm's channel form: input [N, C, *spatial] normalized over dim 1 (each position's
    C values: mean, biased variance, statistics in float32), times weight [C] plus bias [C]
    when given; the result has the input's dtype and memory format where normjit computes it (a
    channels-last input is read in place, the result channels last too; where PyTorch's
    implementation runs, timm's permuted view). The function of timm's and
    SAM's LayerNorm2d (F.layer_norm of the input permuted channels-last, permuted back), for
    any number of spatial dims; eps defaults to theirs, 1e-6. Trains through normjit's backward
    kernel (an input, weight or bias that requires grad, grad mode on). activation None, 'silu' or
    'gelu' (F.silu; F.gelu, approximate='none') of the result, in the same kernel (and in
    training, the backward kernel takes the gradient through the activation's derivative)."""
    if eps is None:
        _no_eps("layer_norm_channels")
    if activation is None:
        return _layer_norm_channels(input, weight, bias, eps)
    return _layer_norm_channels(input, weight, bias, eps, None, None,
                                _as_activation("layer_norm_channels", activation))


def group_norm(input: Tensor, num_groups: int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5, *,
               activation: Optional[str] = None) -> Tensor:
    """torch.nn.functional.group_norm: input [N, C, *spatial], num_groups dividing C, weight
    and bias [C]. activation None, 'silu' or 'gelu': F.silu(F.group_norm(...)) (diffusion's
    GroupNorm -> SiLU), or F.gelu with approximate='none', in one kernel (in training, the
    backward kernel takes the gradient through the activation's derivative). A
    channels-last input (channels_last, channels_last_3d, or any rank's analogue) is normalized
    in place of its memory order, without the copy PyTorch's CUDA GroupNorm makes, and the result
    keeps the input's memory format (channels last stays channels last; a contiguous input gives
    a contiguous result, as F.group_norm's)."""
    if eps is None:
        _no_eps("group_norm")
    if activation is None:
        return _group_norm(input, num_groups, weight, bias, eps)
    return _group_norm(input, num_groups, weight, bias, eps, None, None,
                       _as_activation("group_norm", activation))


def _no_eps(op: str) -> None:
    """eps None: a float is needed (rms_norm's None, the dtype's epsilon, is not theirs); the same
    error on every device, where the kernel would take the dtype's epsilon and PyTorch's
    implementation would fail on None."""
    raise TypeError(f"{op}: eps must be a float, not None")


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


def prepared_specs() -> List[str]:
    """The spec texts of the kernels this process has prepared, in the order it prepared them
    (each with the batch of its first call: a kernel serves every batch), training forwards and
    backward kernels included. write_manifest() writes them for `normjit prewarm`."""
    with _prepare_lock:
        return [_kernel_specs[key] for key, (kernel, _) in _kernels.items()
                if kernel is not None and key in _kernel_specs]


# The manifest's JSON type of each spec field that is not a string (docs/deployment.md).
_MANIFEST_INTS = ("normalized_dims", "groups")
_MANIFEST_NUMBERS = ("eps", "weight_offset")
_MANIFEST_BOOLS = ("save_stats", "backward")


def _manifest_entry(spec: str) -> dict:
    """A spec text as a manifest entry: its fields, shape a list of ints, the integer, number
    and boolean fields as JSON's."""
    entry = {}
    for word in spec.split():
        name, value = word.split("=", 1)
        if name == "shape":
            entry[name] = [int(v) for v in value.split(",")]
        elif name in _MANIFEST_INTS:
            entry[name] = int(value)
        elif name in _MANIFEST_NUMBERS:
            entry[name] = float(value)
        elif name in _MANIFEST_BOOLS:
            entry[name] = value == "true"
        else:
            entry[name] = value
    return entry


def write_manifest(path) -> int:
    """Writes the kernels this process has prepared (prepared_specs()) as a JSON manifest
    (docs/deployment.md) and returns how many entries it holds: run the model once as it will
    run in production (inference, or training steps: their forward and backward kernels), on a
    GPU; then, on the build machine, with no GPU, prewarm(PATH, arch, cache_dir) compiles them
    into the directory the image ships."""
    import json
    entries = [_manifest_entry(spec) for spec in prepared_specs()]
    with open(path, "w") as f:
        json.dump(entries, f, indent=1)
        f.write("\n")
    return len(entries)


def _read_manifest(path) -> list:
    """The entries of a manifest file, each a dict, refusing what `normjit prewarm` refuses:
    text that is not JSON, anything but a list of objects, a field given twice in an entry."""
    import json

    def no_twice(pairs):
        seen = set()
        for name, _ in pairs:
            if name in seen:
                raise ValueError(f"normjit.torch.prewarm: manifest {str(path)!r}: field "
                                 f"{name!r} is given twice in an entry; give each field once")
            seen.add(name)
        return dict(pairs)

    with open(path) as f:
        text = f.read()
    try:
        entries = json.loads(text, object_pairs_hook=no_twice)
    except json.JSONDecodeError as e:
        raise ValueError(f"normjit.torch.prewarm: manifest {str(path)!r} is not JSON ({e}); "
                         "expected a list of specs (docs/deployment.md)") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"normjit.torch.prewarm: manifest {str(path)!r} is not a JSON "
                         "list of objects (a list of specs: docs/deployment.md)")
    return entries


def _spec_text(entry: dict) -> str:
    """A manifest entry (its JSON types) as spec text: the library checks its fields."""
    words = []
    for name, value in entry.items():
        if name == "shape" and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, float):
            value = repr(value)
        words.append(f"{name}={value}")
    return " ".join(words)


def prewarm(manifest, arch: Union[str, Sequence[str]] = "sm_90", cache_dir=None,
            verbose: bool = False) -> Tuple[int, int]:
    """Compiles every kernel of `manifest` (a manifest's path, as write_manifest writes and
    `normjit prewarm` reads, or a list of spec texts) for each `arch` ("sm_90", "sm_90:114",
    ...; a list, or comma-separated) into `cache_dir` (default: the cache of this process's
    engine), with no GPU needed; returns (compiled, already cached). With cache_dir, as
    `normjit prewarm` does: only that directory counts (NORMJIT_CACHE_READONLY's layers are
    not read), with no byte cap and the JIT on whatever NORMJIT_JIT says, and it raises
    where the directory cannot be written or a kernel could not be saved there, so that a
    shipped directory is never silently incomplete (normjit.Engine's prewarm). Run it on the build
    machine in the Python environment the application runs in: a cached kernel's key holds the
    NVRTC build, and a process that imports PyTorch compiles with PyTorch's NVRTC (the
    nvidia-cuda-nvrtc wheel), which `normjit prewarm`, run alone, does not load
    (docs/deployment.md, "PyTorch processes"). verbose: a line per kernel on stderr."""
    import sys
    names = arch.split(",") if isinstance(arch, str) else list(arch)
    archs = [str(a).strip() for a in names]
    if not any(archs):
        raise ValueError(f"normjit.torch.prewarm: arch {arch!r} names no target (e.g. 'sm_90')")
    if not all(archs):
        raise ValueError(f"normjit.torch.prewarm: arch {arch!r} names an empty target; list "
                         "targets like 'sm_80,sm_90' or ['sm_80', 'sm_90']")
    if isinstance(manifest, (list, tuple)):
        specs = [str(s) for s in manifest]
        where = "manifest (a list of spec texts)"
    else:
        specs = [_spec_text(e) for e in _read_manifest(manifest)]
        where = f"manifest {str(manifest)!r}"
    if not specs:
        raise ValueError(f"normjit.torch.prewarm: {where} lists no spec; expected specs such as "
                         '[{"op": "rmsnorm", "shape": [8, 64, 32, 32]}] (docs/deployment.md)')
    engine = (normjit.Engine(cache_dir=cache_dir, prewarm=True) if cache_dir is not None
              else normjit.engine())
    compiled = cached = 0
    try:
        # Each spec for every arch in turn: an arch the library refuses fails at the first
        # spec, before the other archs' kernels are compiled.
        for i, spec in enumerate(specs, 1):
            for a in archs:
                if engine.precompile(spec, a):
                    compiled += 1
                else:
                    cached += 1
                if verbose:
                    print(f"prewarm: {a} {i}/{len(specs)} {spec}", file=sys.stderr, flush=True)
    finally:
        if cache_dir is not None:
            engine.close()
    return compiled, cached


def warmup(fn: Callable, *args, stream: Optional["torch.cuda.Stream"] = None, **kwargs) -> int:
    """Runs fn(*args, **kwargs) once under torch.no_grad() on `stream` (default: a new side
    stream) and waits for it, so that every normjit kernel of those shapes is prepared
    (compiled or loaded from the cache) before torch.cuda.graph captures fn: preparing is
    not something a capture can record. Pass the stream the capture will use, if known.
    Returns how many kernels were newly prepared. Inference kernels only: before capturing a
    training step, run one training step (forward and backward) on a side stream instead,
    which prepares the training forward and the backward kernels."""
    if not torch.cuda.is_available():
        raise RuntimeError("normjit.torch.warmup: no CUDA device is available to PyTorch "
                           "(torch.cuda.is_available() is False); warmup prepares normjit's "
                           "kernels on a CUDA stream before a CUDA-graph capture, and on the "
                           "CPU normjit.torch computes with PyTorch, which needs no warmup")
    before = prepared_kernels()
    stream = stream if stream is not None else torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        fn(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    stream.synchronize()
    return prepared_kernels() - before
