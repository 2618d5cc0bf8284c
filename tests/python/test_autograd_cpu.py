"""Training through normjit.torch where there is no GPU (issue 20): autograd of rms_norm and
layer_norm. The backward kernels' spec texts compile for sm_90; on CPU tensors the custom ops
fall back (one warning per reason) to PyTorch's forward and gradient, which gradcheck and
gradgradcheck verify in float64; the backward ops check their arguments; the forward-only
functions say so and keep PyTorch's autograd. With the library emulated (CPU tensors then take
the launch path; an emulator reads and writes the host memory behind the pointers as the
kernels would, in float64), the whole training path is checked end to end: which specs are
prepared, which launches happen with which pointers, the gradients they give against float64
autograd of PyTorch's reference, the fallbacks of the backward (a non-contiguous dy, rows the
library has no backward kernel for, double backward), torch.compile(fullgraph=True) tracing
forward and backward ops, and normjit._launch.launch_backward against ctypes. Needs PyTorch;
no GPU."""
import contextlib
import math
import os
import re
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from normjit.torch import _ops  # noqa: E402
from conftest import launch_path_into  # noqa: E402
from emulator import Emulator  # noqa: E402

# fresh_warnings: conftest.py; each test starts with no fallback warning given yet.
pytestmark = pytest.mark.usefixtures("fresh_warnings")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def fallbacks(caught):
    return [str(w.message) for w in caught if issubclass(w.category, njt.NormjitFallbackWarning)]


def reference_grads(op, x, shape, weight, bias, eps, dy):
    """Gradients of x, weight, bias by float64 autograd of PyTorch's own function."""
    leaves = [t.detach().double().requires_grad_() if t is not None else None
              for t in (x, weight, bias)]
    if op == "rms":
        y = F.rms_norm(leaves[0], shape, leaves[1], eps)
    else:
        y = F.layer_norm(leaves[0], shape, leaves[1], leaves[2], eps)
    y.backward(dy.double())
    return [t.grad if t is not None else None for t in leaves]


def close(got, ref, rtol):
    """Relative error below rtol (a gradient that is zero in exact arithmetic, such as dx of
    a LayerNorm row of one element, within 1e-6 absolute)."""
    assert got is not None and ref is not None
    diff = (got.double() - ref).norm().item()
    assert diff <= rtol * ref.norm().item() + 1e-6, (diff, ref.norm().item())


# ---------------------------------------------------------------------------------------
# The backward kernels' specs compile for sm_90 (no GPU needed)
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    _ops._rows_spec("rmsnorm", (7, 4096), 1, torch.bfloat16, True, False, 1e-6, backward=True),
    _ops._rows_spec("rmsnorm", (7, 4096), 1, torch.bfloat16, True, False, 1e-6, torch.float32,
                    backward=True),
    _ops._rows_spec("rmsnorm", (3, 65), 1, torch.float32, False, False, 1e-6, backward=True),
    _ops._rows_spec("layernorm", (3, 8192), 1, torch.float16, True, True, 1e-5, backward=True),
    _ops._rows_spec("layernorm", (2, 4, 250), 2, torch.float32, True, False, 1e-5,
                    backward=True),
    _ops._rows_spec("layernorm", (1, 1), 1, torch.bfloat16, False, False, 1e-5, backward=True),
], ids=["rms-bf16", "rms-f32-weight", "rms-none-65", "ln-f16-8192", "ln-2dims", "ln-1"])
def test_the_backward_spec_texts_it_prepares_compile(spec, tmp_path):
    assert spec.endswith(" backward=true")
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        assert engine.precompile(spec, arch="sm_90") is True


def test_long_rows_have_backward_kernels_and_the_longest_are_refused(tmp_path):
    """Rows past 8192 elements take a team of 1024 threads (16-bit LLM hidden 16384) or the split
    backward (f32 rows, the LayerNorm seed);
    rows whose CTAs' dweight/dbias partials outgrow its workspace are refused, naming them."""
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        for shape, k, dtype in [((3, 8193), 1, torch.float32), ((7, 16384), 1, torch.bfloat16),
                                ((16, 64, 256, 256), 3, torch.float32)]:
            spec = _ops._rows_spec("layernorm", shape, k, dtype, True, True, 1e-5, backward=True)
            assert engine.precompile(spec, arch="sm_90") is True, spec
        spec = _ops._rows_spec("layernorm", (2, 40000000), 1, torch.float32, True, True, 1e-5,
                               backward=True)
        with pytest.raises(normjit.UnsupportedError, match="40000000"):
            engine.precompile(spec, arch="sm_90")


# ---------------------------------------------------------------------------------------
# On CPU tensors: PyTorch's forward and gradient, one warning per reason
# ---------------------------------------------------------------------------------------

def test_the_public_functions_on_cpu_keep_pytorchs_autograd():
    torch.manual_seed(0)
    x = torch.randn(3, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    b = torch.randn(64, requires_grad=True)
    dy = torch.randn(3, 64)
    with pytest.warns(njt.NormjitFallbackWarning, match=r"layer_norm: input on cpu"):
        y = njt.layer_norm(x, 64, w, b, 1e-5)
    y.backward(dy)
    ref = reference_grads("ln", x, (64,), w, b, 1e-5, dy)
    for got, r in zip((x.grad, w.grad, b.grad), ref):
        close(got, r, 1e-5)


@pytest.mark.parametrize("affine", ["none", "weight", "both", "offset"])
def test_gradcheck_of_the_train_ops_in_float64(affine, quiet):
    """The ops themselves on CPU float64 (forward and backward fall back): gradcheck and
    gradgradcheck against finite differences (offset: weight and bias, weight_offset 1.0)."""
    torch.manual_seed(1)
    x = torch.randn(3, 2, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 9, dtype=torch.float64, requires_grad=True) if affine != "none" else None
    b = torch.randn(2, 9, dtype=torch.float64, requires_grad=True) \
        if affine in ("both", "offset") else None
    offset = (1.0,) if affine == "offset" else ()
    ops = torch.ops.normjit
    inputs = tuple(t for t in (x, w, b) if t is not None)

    def ln(*ts):
        it = iter(ts)
        xx = next(it)
        ww = next(it) if w is not None else None
        bb = next(it) if b is not None else None
        return ops.layer_norm_train(xx, [2, 9], ww, bb, 1e-5, *offset)[0]

    def rms(*ts):
        return ops.rms_norm_train(ts[0], [2, 9], ts[1] if w is not None else None, 1e-6,
                                  *offset)[0]

    for fn, ins in ((ln, inputs), (rms, inputs[:2])):
        assert torch.autograd.gradcheck(fn, ins)
        assert torch.autograd.gradgradcheck(fn, ins)


@pytest.mark.parametrize("op", ["add_rms_norm_train", "add_layer_norm_train"])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_gradcheck_of_the_add_train_ops_in_float64(op, offset, quiet):
    """y and h of the fused residual add's training ops, for x, residual, weight (and bias):
    gradcheck and gradgradcheck (the double backward differentiates through the saved h)."""
    torch.manual_seed(15)
    ts = [torch.randn(3, 2, 9, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    ts += [torch.randn(9, dtype=torch.float64, requires_grad=True)
           for _ in range(2 if op == "add_layer_norm_train" else 1)]
    fn = getattr(torch.ops.normjit, op)

    def outputs(x, r, w, *b):
        out = fn(x, r, [9], w, *b, 1e-5, offset)
        return out[0], out[1]  # y and h (the statistics are not differentiable)

    assert torch.autograd.gradcheck(outputs, ts)
    assert torch.autograd.gradgradcheck(outputs, ts)


def test_gradcheck_of_the_plain_ops_called_directly(quiet):
    """torch.ops.normjit.rms_norm/layer_norm save no statistics; their backward computes
    them."""
    torch.manual_seed(2)
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    b = torch.randn(16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w: torch.ops.normjit.rms_norm(x, [16], w, 1e-6), (x, w))
    assert torch.autograd.gradcheck(
        lambda x, w, b: torch.ops.normjit.layer_norm(x, [16], w, b, 1e-5), (x, w, b))


def rms_backward_args():
    return (torch.randn(3, 64), torch.randn(3, 64), torch.rand(3, 1) + 0.5, torch.randn(64),
            [64], 1e-6)


def ln_backward_args():
    return (torch.randn(2, 3, 64), torch.randn(2, 3, 64), torch.randn(2, 3, 1),
            torch.rand(2, 3, 1) + 0.5, torch.randn(64), True, [64], 1e-5)


OPS = [
    ("rms_norm_train", lambda: (torch.randn(3, 64), [64], torch.randn(64), 1e-6)),
    ("rms_norm_train", lambda: (torch.randn(2, 3, 8, dtype=torch.bfloat16), [3, 8], None, 1e-6)),
    ("layer_norm_train", lambda: (torch.randn(3, 64), [64], torch.randn(64), torch.randn(64),
                                  1e-5)),
    ("layer_norm_train", lambda: (torch.randn(3, 64, dtype=torch.float16), [64], None, None,
                                  1e-5)),
    ("rms_norm_train", lambda: (torch.randn(3, 64), [64], torch.randn(64), 1e-6, 1.0)),
    ("layer_norm_train", lambda: (torch.randn(3, 64), [64], torch.randn(64), torch.randn(64),
                                  1e-5, -0.5)),
    ("add_rms_norm_train", lambda: (torch.randn(3, 64), torch.randn(3, 64), [64],
                                    torch.randn(64), 1e-6)),
    ("add_rms_norm_train", lambda: (torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(3, 64),
                                    [64], torch.randn(64), 1e-6, 1.0)),
    ("add_layer_norm_train", lambda: (torch.randn(2, 3, 64), torch.randn(2, 3, 64), [64],
                                      torch.randn(64), torch.randn(64), 1e-5)),
    ("add_layer_norm_train", lambda: (torch.randn(3, 64, dtype=torch.float16),
                                      torch.randn(3, 64, dtype=torch.float16), [64], None, None,
                                      1e-5)),
    ("rms_norm_backward", rms_backward_args),
    ("rms_norm_backward", lambda: rms_backward_args() + (1.0,)),
    ("layer_norm_backward", lambda: ln_backward_args() + (1.0,)),
    ("rms_norm_backward", lambda: rms_backward_args()[:3] + (None, [64], 1e-6)),
    ("layer_norm_backward", ln_backward_args),
    ("layer_norm_backward", lambda: ln_backward_args()[:4] + (None, False, [64], 1e-5)),
    # normalized_shape the whole input's: dbias is dy summed over no rows, a copy of it
    ("layer_norm_backward", lambda: (torch.randn(64), torch.randn(64), torch.randn(1),
                                     torch.rand(1) + 0.5, torch.randn(64), True, [64], 1e-5)),
]


@pytest.mark.parametrize("op, args", OPS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(OPS)])
def test_opcheck_of_the_training_ops(op, args, quiet):
    """Schema, fake implementation, the autograd registration and AOT dispatch (the default
    opcheck utilities) of the forward-with-statistics and backward ops."""
    torch.library.opcheck(getattr(torch.ops.normjit, op).default, args())


def test_opcheck_of_the_plain_ops_with_autograd(quiet):
    x = torch.randn(3, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    torch.library.opcheck(torch.ops.normjit.rms_norm.default, (x, [64], w, 1e-6))
    torch.library.opcheck(torch.ops.normjit.layer_norm.default, (x, [64], w, w, 1e-5))


@pytest.mark.parametrize("call, error, match", [
    (lambda: torch.ops.normjit.rms_norm_backward(torch.randn(3, 32), torch.randn(3, 64),
                                                 torch.ones(3, 1), None, [64], 1e-6),
     ValueError, r"grad has shape \[3, 32\]; expected the input's, \[3, 64\]"),
    (lambda: torch.ops.normjit.rms_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                 torch.ones(4, 1), None, [64], 1e-6),
     ValueError, r"rstd has shape \[4, 1\] and dtype torch.float32; expected \[3, 1\]"),
    (lambda: torch.ops.normjit.rms_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                 torch.ones(3, 1, dtype=torch.float16), None,
                                                 [64], 1e-6),
     ValueError, r"rstd .* dtype torch.float16; expected \[3, 1\] torch.float32"),
    (lambda: torch.ops.normjit.rms_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                 torch.ones(3, 1), torch.randn(32), [64], 1e-6),
     ValueError, r"weight has shape \[32\]; expected \[64\]"),
    (lambda: torch.ops.normjit.layer_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                   torch.ones(3, 1), torch.ones(3, 1), None,
                                                   True, [64], 1e-5),
     ValueError, r"has_bias without a weight"),
    (lambda: torch.ops.normjit.layer_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                   torch.ones(3, 1), torch.ones(3, 1), None,
                                                   False, [32], 1e-5),
     ValueError, r"normalized_shape \[32\] is not the trailing shape of the input"),
    (lambda: torch.ops.normjit.rms_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                 torch.ones(3, 1), None, [64], 1e-6, 1.0),
     ValueError, r"weight_offset 1.0 needs a weight"),
    (lambda: torch.ops.normjit.layer_norm_backward(torch.randn(3, 64), torch.randn(3, 64),
                                                   torch.ones(3, 1), torch.ones(3, 1),
                                                   torch.ones(64), True, [64], 1e-5,
                                                   float("nan")),
     ValueError, r"weight_offset must be finite, not nan"),
])
def test_backward_ops_name_wrong_arguments(call, error, match, quiet):
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------------------------------
# The library emulated: CPU tensors take the launch path, the emulator computes in float64
# from the host memory behind the pointers and writes what the kernel would
# ---------------------------------------------------------------------------------------

@pytest.fixture
def emu(monkeypatch):
    """CPU tensors take the launch path into the emulator: normjit "runs" on their device, and
    every other check of the calls is the real one (grad included)."""
    e = Emulator()
    with launch_path_into(monkeypatch, e):
        yield e


@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape, normalized", [((3, 64), (64,)), ((2, 5, 4, 8), (4, 8)),
                                               ((1, 1), (1,)), ((64,), (64,))],
                         ids=["3x64", "2x5x4x8", "1x1", "no-batch"])
def test_layer_norm_trains_through_normjit(emu, shape, normalized, affine):
    torch.manual_seed(3)
    x = (torch.randn(shape) * 3 + 10).requires_grad_()
    w = (1 + 0.3 * torch.randn(normalized)).requires_grad_() if affine != "none" else None
    b = (0.1 * torch.randn(normalized)).requires_grad_() if affine == "both" else None
    dy = torch.randn(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        y = njt.layer_norm(x, normalized, w, b, 1e-5)
        assert y.requires_grad and y.grad_fn is not None
        y.backward(dy)
    rows = math.prod(shape) // math.prod(normalized)
    forward_spec = _ops._rows_spec("layernorm", (rows,) + normalized, len(normalized),
                                   torch.float32, w is not None, b is not None, 1e-5,
                                   save_stats=True)
    assert emu.specs == [forward_spec, forward_spec.replace(" save_stats=true", " backward=true")]
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    fwd, bwd = emu.last("launch_ex"), emu.last("launch_backward")
    # The backward reads x itself, and the statistics the forward wrote.
    assert bwd["x"] == x.data_ptr() and bwd["batch"] == fwd["batch"] == rows
    assert (bwd["mean"], bwd["rstd"]) == (fwd["mean"], fwd["rstd"])
    assert bwd["dx"] == x.grad.data_ptr()  # the gradient is the kernel's output itself
    ref = reference_grads("ln", x, normalized, w, b, 1e-5, dy)
    for got, r in zip((x.grad, w.grad if w is not None else None,
                       b.grad if b is not None else None), ref):
        if r is not None:
            close(got, r, 1e-5)


@pytest.mark.parametrize("weight", [None, torch.float32, torch.bfloat16])
def test_rms_norm_module_trains_through_normjit(emu, weight):
    torch.manual_seed(4)
    m = njt.RMSNorm(64, eps=1e-6, elementwise_affine=weight is not None, dtype=weight)
    if weight is not None:
        with torch.no_grad():
            m.weight.copy_(1 + 0.3 * torch.randn(64))
    x = torch.randn(5, 64, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(5, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        m(x).backward(dy)
    param = " param_dtype=f32" if weight == torch.float32 else ""
    affine = "none" if weight is None else "weight"
    base = f"op=rmsnorm shape=5,64 dtype=bf16 normalized_dims=1 affine={affine} eps=1e-06{param}"
    assert emu.specs == [base + " save_stats=true", base + " backward=true"]
    assert x.grad.dtype == torch.bfloat16
    w = m.weight if weight is not None else None
    ref = reference_grads("rms", x, (64,), w, None, 1e-6, dy)
    close(x.grad, ref[0], 1e-2)
    if weight is not None:
        assert m.weight.grad.dtype == weight
        close(m.weight.grad, ref[1], 1e-2)


@pytest.mark.parametrize("op", ["rms", "ln"])
@pytest.mark.parametrize("offset", [1.0, -0.5])
def test_weight_offset_alone_trains_through_normjit(emu, op, offset):
    """weight_offset alone (Gemma's RMSNorm, zero-centred gamma) trains through the training
    and backward ops, the offset in both kernels' specs: dx from the weight used (offset +
    weight), and dweight that weight's gradient, which is the weight's."""
    torch.manual_seed(13)
    x = (torch.randn(6, 64) * 2 + (3 if op == "ln" else 0)).requires_grad_()
    w = (0.2 * torch.randn(64)).requires_grad_()
    b = torch.randn(64, requires_grad=True) if op == "ln" else None
    dy = torch.randn(6, 64)
    eps = 1e-6 if op == "rms" else 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        if op == "rms":
            y = njt.rms_norm(x, 64, w, eps, weight_offset=offset)
        else:
            y = njt.layer_norm(x, 64, w, b, eps, weight_offset=offset)
        y.backward(dy)
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    name, affine = ("rmsnorm", "weight") if op == "rms" else ("layernorm", "both")
    base = (f"op={name} shape=6,64 dtype=f32 normalized_dims=1 affine={affine} eps={eps!r} "
            f"weight_offset={offset!r}")
    assert emu.specs == [base + " save_stats=true", base + " backward=true"]
    used = w.detach() + offset  # PyTorch's function of the weight used, in float64
    ref = reference_grads(op, x, (64,), used, b, eps, dy)
    if op == "rms":
        expected = F.rms_norm(x.detach().double(), (64,), used.double(), eps)
    else:
        expected = F.layer_norm(x.detach().double(), (64,), used.double(), b.detach().double(),
                                eps)
    close(y.detach(), expected, 1e-6)
    close(x.grad, ref[0], 1e-5)
    close(w.grad, ref[1], 1e-5)
    if b is not None:
        close(b.grad, ref[2], 1e-5)


def test_weight_offset_with_another_variant_is_pytorchs(emu):
    """weight_offset and return_stats: forward-only in normjit, as every other variant."""
    x = torch.randn(3, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    with pytest.warns(njt.NormjitFallbackWarning,
                      match="or with weight_offset and activation alone"):
        y, rstd = njt.rms_norm(x, 64, w, 1e-6, weight_offset=1.0, return_stats=True)
    y.sum().backward()
    assert emu.launches == [] and w.grad is not None


def test_patched_gemma_rms_norm_trains_through_normjit(emu, fake_transformers):
    """transformers' GemmaRMSNorm, patched: its (1 + weight) trains through normjit's kernels
    with weight_offset=1, its float32 weight beside a bfloat16 input (param_dtype=f32)."""
    torch.manual_seed(14)
    layer = fake_transformers["gemma"].GemmaRMSNorm(64)
    with torch.no_grad():
        layer.weight.normal_(0, 0.2)
    ref = fake_transformers["gemma"].GemmaRMSNorm(64)
    ref.load_state_dict(layer.state_dict())
    assert len(njt.patch(layer).replaced) == 1
    x = torch.randn(5, 64, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(5, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        layer(x).backward(dy)
    base = ("op=rmsnorm shape=5,64 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06 "
            "param_dtype=f32 weight_offset=1.0")
    assert emu.specs == [base + " save_stats=true", base + " backward=true"]
    xd = x.detach().double().requires_grad_()
    ref.double()(xd).backward(dy.double())
    assert x.grad.dtype == torch.bfloat16 and layer.weight.grad.dtype == torch.float32
    close(x.grad, xd.grad, 1e-2)
    close(layer.weight.grad, ref.weight.grad, 1e-2)


ADD_CASES = [("rms", torch.float32, torch.float32, 0.0),
             ("ln", torch.float32, torch.float32, 0.0),
             ("rms", torch.bfloat16, torch.float32, 1.0),
             ("ln", torch.bfloat16, torch.bfloat16, 0.0)]


@pytest.mark.parametrize("op, dtype, rdtype, offset", ADD_CASES,
                         ids=[f"{o}-{d}-{r}-{f}" for o, d, r, f in ADD_CASES])
def test_add_norms_train_through_normjit(emu, op, dtype, rdtype, offset):
    """add_rms_norm and add_layer_norm (not in place): the forward with the residual saves h's
    statistics; the norm's backward kernel reads h (its dtype, the residual's; the weight's
    dtype its param_dtype); dh plus h's own gradient is the gradient of x and of residual, each
    in its dtype."""
    torch.manual_seed(16)
    x = (torch.randn(6, 64) * 2 + 1).to(dtype).requires_grad_()
    r = torch.randn(6, 64).to(rdtype).requires_grad_()
    w = (1 + 0.3 * torch.randn(64)).to(dtype).requires_grad_()
    b = (0.3 * torch.randn(64)).to(dtype).requires_grad_() if op == "ln" else None
    dy, dh = torch.randn(6, 64), torch.randn(6, 64)
    eps = 1e-6 if op == "rms" else 1e-5
    kw = {"weight_offset": offset} if offset else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        if op == "rms":
            y, h = njt.add_rms_norm(x, r, 64, w, eps, **kw)
        else:
            y, h = njt.add_layer_norm(x, r, 64, w, b, eps, **kw)
        assert y.dtype == dtype and h.dtype == rdtype
        ((y.double() * dy).sum() + (h.double() * dh).sum()).backward()
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert emu.last("launch_backward")["x"] == h.data_ptr()  # the norm's input: h
    # h's own gradient added by the backward kernel (the spec's residual, h's dtype)
    assert emu.last("launch_backward")["dresidual_out"] is not None
    name, affine = ("rmsnorm", "weight") if op == "rms" else ("layernorm", "both")
    short = {torch.float32: "f32", torch.bfloat16: "bf16"}
    head = f"op={name} shape=6,64 dtype="
    tail = f" normalized_dims=1 affine={affine} eps={eps!r}"
    off = f" weight_offset={offset!r}" if offset else ""
    param = f" param_dtype={short[dtype]}" if rdtype != dtype else ""
    assert emu.specs == [
        head + short[dtype] + tail + f" residual={short[rdtype]}" + off + " save_stats=true",
        head + short[rdtype] + tail + param + f" residual={short[rdtype]}" + off +
        " backward=true"]
    leaves = [t.detach().double().requires_grad_()
              for t in (x, r, w) + ((b,) if b is not None else ())]
    hd = leaves[0] + leaves[1]
    if op == "rms":
        yd = F.rms_norm(hd, (64,), leaves[2] + offset, eps)
    else:
        yd = F.layer_norm(hd, (64,), leaves[2] + offset, leaves[3], eps)
    ((yd * dy.double()).sum() + (hd * dh.double()).sum()).backward()
    rtol = 1e-5 if dtype == rdtype == torch.float32 else 2e-2
    close(y.detach(), yd.detach(), rtol)
    for got, leaf in zip((x, r, w, b), leaves):
        if got is not None:
            assert got.grad.dtype == got.dtype
            close(got.grad, leaf.grad, rtol)


def test_add_rms_norm_with_only_y_used_trains_and_in_place_is_pytorchs(emu):
    """h unused (its gradient None): x's and residual's gradient is the norm's alone. In place,
    the call is PyTorch's (forward-only in normjit), with the warning."""
    torch.manual_seed(17)
    x, r = torch.randn(4, 64, requires_grad=True), torch.randn(4, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    dy = torch.randn(4, 64)
    y, _ = njt.add_rms_norm(x, r, 64, w, 1e-6)
    y.backward(dy)
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    torch.testing.assert_close(x.grad, r.grad, rtol=0, atol=0)
    leaves = [t.detach().double().requires_grad_() for t in (x, r, w)]
    F.rms_norm(leaves[0] + leaves[1], (64,), leaves[2], 1e-6).backward(dy.double())
    close(x.grad, leaves[0].grad, 1e-5)
    close(w.grad, leaves[2].grad, 1e-5)
    xs, rs = torch.randn(4, 64), torch.randn(4, 64)
    with pytest.warns(njt.NormjitFallbackWarning, match="inplace have no normjit backward"):
        with torch.enable_grad():
            njt.add_rms_norm(xs, rs, 64, w, 1e-6, inplace=True)
    assert emu.kinds() == ["launch_ex", "launch_backward"]  # nothing launched in place


@pytest.mark.parametrize("op", ["add_rms_norm", "add_layer_norm"])
def test_in_place_adds_tell_autograd_that_x_and_residual_changed(emu, op):
    """inplace=True: the kernel writes y into x and h into residual through their pointers, and
    their version counters are bumped as by PyTorch's in-place ops: a backward that saved x (x @
    W's, for W's gradient) raises instead of computing from the overwritten x. Inference tensors
    (no version counter) are written all the same."""
    torch.manual_seed(21)
    W = torch.randn(64, 64, requires_grad=True)
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    loss = (x @ W).sum()
    versions = x._version, r._version
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        getattr(njt, op)(x, r, 64, w, inplace=True)
    assert emu.kinds() == ["launch_ex"]
    assert x._version > versions[0] and r._version > versions[1]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    with torch.inference_mode():
        xi, ri = torch.randn(4, 64), torch.randn(4, 64)
        h = xi + ri
        getattr(njt, op)(xi, ri, 64, w, inplace=True)
    torch.testing.assert_close(ri, h)
    assert emu.kinds() == ["launch_ex"] * 2


def test_inference_keeps_the_plain_kernel_and_same_decision_cache(emu):
    """no_grad and inputs that need no grad: normjit_launch, no statistics, no training op."""
    m = njt.RMSNorm(64)
    x = torch.randn(3, 64)
    with torch.no_grad():
        m(x)
    assert emu.kinds() == ["launch"]
    m.weight.requires_grad_(False)
    m(x)  # grad mode, nothing requires grad
    assert emu.kinds() == ["launch", "launch"]
    assert not emu.specs[0].endswith("save_stats=true")


def test_only_the_weight_requires_grad(emu):
    torch.manual_seed(5)
    m = njt.LayerNorm(32)
    with torch.no_grad():
        m.weight.copy_(1 + 0.3 * torch.randn(32))
    x, dy = torch.randn(4, 32), torch.randn(4, 32)
    m(x).backward(dy)
    ref = reference_grads("ln", x, (32,), m.weight, m.bias, 1e-5, dy)
    close(m.weight.grad, ref[1], 1e-5)
    close(m.bias.grad, ref[2], 1e-5)
    assert x.grad is None


def test_a_non_contiguous_gradient_and_a_strided_input_are_copied_for_the_kernel(emu):
    """y.sum() gives an expanded (stride 0) dy, and a per-head view of a qkv projection is read
    in place by the forward: the backward kernel gets contiguous copies of both (the pointers
    it reads are not the views'), no warning, and the gradients are float64 autograd's."""
    torch.manual_seed(6)
    w = torch.randn(64, requires_grad=True)
    qkv = torch.randn(5, 3 * 4 * 64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        q = qkv[:, :256].view(5, 4, 64)
        njt.rms_norm(q, 64, w, 1e-6).sum().backward()
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert emu.last("launch_backward")["x"] != q.data_ptr()
    leaves = [t.detach().double().requires_grad_() for t in (qkv, w)]
    F.rms_norm(leaves[0][:, :256].view(5, 4, 64), (64,), leaves[1], 1e-6).sum().backward()
    close(qkv.grad, leaves[0].grad, 1e-5)
    close(w.grad, leaves[1].grad, 1e-5)
    assert qkv.grad[:, 256:].abs().max().item() == 0


@contextlib.contextmanager
def backward_library(emu, tmp_path):
    """The emulator asks a real engine (memory only, sm_90) whether it takes each backward spec;
    forward specs are taken as they are."""
    with normjit.Engine(cache_dir=str(tmp_path), memory_only=True) as engine:
        emu.library = engine
        original = engine.precompile
        engine.precompile = lambda spec, arch: (original(spec, arch) if "backward" in spec
                                                else True)
        yield engine


def test_rows_past_8192_elements_train_through_normjits_backward(emu, tmp_path):
    """Rows of 8193 elements: the library has a backward kernel for them (the split backward),
    so the gradient is normjit's, with no fallback warning."""
    with backward_library(emu, tmp_path):
        torch.manual_seed(8)
        x = torch.randn(2, 8193, requires_grad=True)
        w = (1 + 0.3 * torch.randn(8193)).requires_grad_()
        dy = torch.randn(2, 8193)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", njt.NormjitFallbackWarning)
            njt.rms_norm(x, 8193, w, 1e-6).backward(dy)
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert fallbacks(caught) == []
    assert emu.specs[-1].endswith(" backward=true") and "shape=2,8193" in emu.specs[-1]
    ref = reference_grads("rms", x, (8193,), w, None, 1e-6, dy)
    close(x.grad, ref[0], 1e-5)
    close(w.grad, ref[1], 1e-5)


def test_add_norm_rows_past_8192_elements_take_the_residual_backward(emu, tmp_path):
    """f32 rows of 8193 elements: the library's backward spec with a residual (rows split over
    CTAs) adds h's gradient in the kernel; no fallback warning, the gradients float64's."""
    with backward_library(emu, tmp_path):
        torch.manual_seed(18)
        x, r = torch.randn(2, 8193, requires_grad=True), torch.randn(2, 8193, requires_grad=True)
        w = (1 + 0.3 * torch.randn(8193)).requires_grad_()
        dy, dh = torch.randn(2, 8193), torch.randn(2, 8193)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", njt.NormjitFallbackWarning)
            y, h = njt.add_rms_norm(x, r, 8193, w, 1e-6)
            ((y * dy).sum() + (h * dh).sum()).backward()
    assert fallbacks(caught) == []
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert emu.last("launch_backward")["dresidual_out"] is not None
    assert emu.specs[-1].endswith(" residual=f32 backward=true"), emu.specs[-1]
    leaves = [t.detach().double().requires_grad_() for t in (x, r, w)]
    hd = leaves[0] + leaves[1]
    ((F.rms_norm(hd, (8193,), leaves[2], 1e-6) * dy.double()).sum()
     + (hd * dh.double()).sum()).backward()
    for got, leaf in zip((x, r, w), leaves):
        close(got.grad, leaf.grad, 1e-5)


def test_a_misaligned_dresidual_out_is_added_after_the_kernel(emu):
    """rms_norm_backward called with a dresidual_out the kernel cannot read (a view 4 bytes past
    a 16-byte boundary): the kernel without a residual, then PyTorch's add; the same result."""
    torch.manual_seed(19)
    x, dy = torch.randn(3, 64), torch.randn(3, 64)
    w = 1 + 0.3 * torch.randn(64)
    rstd = torch.rsqrt(x.square().mean(1) + 1e-6).float()
    storage = torch.randn(3 * 64 + 1)
    dh = storage[1:].view(3, 64)
    assert dh.data_ptr() % 16 == 4
    dx, dw = torch.ops.normjit.rms_norm_backward(dy, x, rstd, w, [64], 1e-6, 0.0, dh)
    assert emu.kinds() == ["launch_backward"]
    assert emu.last("launch_backward")["dresidual_out"] is None
    assert "residual" not in emu.specs[-1]
    dx0, dw0 = torch.ops.normjit.rms_norm_backward(dy, x, rstd, w, [64], 1e-6)
    torch.testing.assert_close(dx, dx0 + dh, rtol=0, atol=0)
    torch.testing.assert_close(dw, dw0, rtol=0, atol=0)
    aligned = dh.clone()
    dx2, _ = torch.ops.normjit.rms_norm_backward(dy, x, rstd, w, [64], 1e-6, 0.0, aligned)
    assert emu.last("launch_backward")["dresidual_out"] == aligned.data_ptr()
    close(dx2, dx, 1e-6)


def test_a_fallback_gradient_over_the_whole_input_aliases_no_input(emu):
    """layer_norm of a 1-D x (normalized_shape its whole shape: dbias is dy summed over no rows)
    whose gradient the backward kernel cannot read (a view 12 bytes past a 16-byte boundary):
    PyTorch's gradient, in fresh tensors (a custom op's output may not alias an input), the
    values float64 autograd's."""
    torch.manual_seed(20)
    x = (torch.randn(64) * 2 + 1).requires_grad_()
    w = (1 + 0.3 * torch.randn(64)).requires_grad_()
    b = torch.randn(64, requires_grad=True)
    dz = torch.randn(67)
    y = njt.layer_norm(x, (64,), w, b)
    with pytest.warns(njt.NormjitFallbackWarning, match="not 16-byte aligned"):
        torch.cat([torch.zeros(3), y]).backward(dz)  # y's gradient: dz[3:]
    assert emu.kinds() == ["launch_ex"]
    ref = reference_grads("ln", x, (64,), w, b, 1e-5, dz[3:])
    for got, r in zip((x.grad, w.grad, b.grad), ref):
        close(got, r, 1e-5)


def test_double_backward_is_pytorchs(emu):
    torch.manual_seed(9)
    x = torch.randn(3, 16, dtype=torch.float32, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    b = torch.randn(16, requires_grad=True)
    dy = torch.randn(3, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        y = njt.layer_norm(x, 16, w, b, 1e-5)
        gx, gw = torch.autograd.grad(y, (x, w), dy, create_graph=True)
        (gx.square().sum() + gw.sum()).backward()
    assert [m for m in fallbacks(caught) if "double backward" in m]
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ry = F.layer_norm(leaves[0], (16,), leaves[1], leaves[2], 1e-5)
    rgx, rgw = torch.autograd.grad(ry, leaves[:2], dy.double(), create_graph=True)
    (rgx.square().sum() + rgw.sum()).backward()
    close(x.grad, leaves[0].grad, 1e-4)
    close(w.grad, leaves[1].grad, 1e-4)


@pytest.mark.parametrize("call, what", [
    (lambda x, w: njt.add_rms_norm(x, torch.randn_like(x), 64, w, 1e-6,
                                   out_dtype=torch.bfloat16)[0], "add_rms_norm"),
    (lambda x, w: njt.rms_norm(x, 64, w, 1e-6, weight_offset=1.0, return_stats=True)[0],
     "rms_norm"),
    (lambda x, w: njt.layer_norm(x, 64, w, None, 1e-5, return_stats=True)[0], "layer_norm"),
])
def test_forward_only_functions_fall_back_to_pytorchs_autograd(emu, call, what):
    """The variants (but weight_offset and activation) have no normjit backward: with an input
    that requires grad they run PyTorch's expression (its autograd), saying so once; no
    launch."""
    torch.manual_seed(10)
    x = torch.randn(4, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        y = call(x, w)
    assert emu.launches == []
    messages = fallbacks(caught)
    assert len(messages) == 1 and f"normjit.torch.{what}: an input requires grad and this " \
        "function is forward-only in normjit" in messages[0], messages
    y.float().square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_a_layer_norm_of_mixed_dtypes_with_grad_is_pytorchs(emu):
    x = torch.randn(3, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    with pytest.warns(njt.NormjitFallbackWarning, match="weight/bias dtype torch.float32"):
        y = njt.layer_norm(x, 64, w, None, 1e-5)  # PyTorch's CPU kernel computes this mix
    y.float().sum().backward()
    assert emu.launches == [] and w.grad is not None


def test_patched_layers_train_through_normjit(emu):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(32)
            self.proj = torch.nn.Linear(32, 32)
            self.rms = torch.nn.RMSNorm(32, eps=1e-6)

        def forward(self, x):
            return self.rms(self.proj(self.norm(x)))

    torch.manual_seed(11)
    ref = Block()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model = Block()
    model.load_state_dict(ref.state_dict())
    assert len(njt.patch(model).replaced) == 2
    x = torch.randn(6, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        model(x).square().sum().backward()
    ref.double()(x.double()).square().sum().backward()
    assert emu.kinds().count("launch_backward") == 2
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p.grad, q.grad, 1e-5)


@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15),
                    reason="with PyTorch before 2.15 (2.11 on the GPU machine) dynamo raises an "
                           "InternalTorchDynamoError tracing the emulated launch path of this "
                           "test; "
                           "test_autograd_gpu.py's fullgraph training step covers compile on the "
                           "real one")
@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("fused", [False, True], ids=["rms_norm", "add_rms_norm"])
def test_compile_traces_forward_and_backward_ops_without_graph_breaks(emu, fused, offset):
    """torch.compile(fullgraph=True) of a training step: the forward graph has the _train ops,
    the backward graph the backward ops (with weight_offset: the offset passed to both; the
    fused residual add: add_rms_norm_train, then rms_norm_backward); the gradients are the
    eager ones."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    graphs = {"fw": [], "bw": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm.code)
            return make_boxed_func(gm.forward)
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    torch.manual_seed(12)
    w = torch.randn(64, requires_grad=True)
    lw, lb = torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True)

    def step(x, r):
        if fused:
            y, h = njt.add_rms_norm(x, r, 64, w, 1e-6, weight_offset=offset)
            y = y + 0.5 * h
        else:
            y = njt.rms_norm(x, 64, w, 1e-6, weight_offset=offset)
        return njt.layer_norm(y * 2, 64, lw, lb, 1e-5).square().sum()

    x, r = torch.randn(3, 64, requires_grad=True), torch.randn(3, 64, requires_grad=True)
    torch._dynamo.reset()
    try:
        loss = torch.compile(step, fullgraph=True, backend=backend)(x, r)
        loss.backward()
    finally:
        torch._dynamo.reset()
    fw, bw = "\n".join(graphs["fw"]), "\n".join(graphs["bw"])
    train = "add_rms_norm_train" if fused else "rms_norm_train"
    assert f"normjit.{train}" in fw and "normjit.layer_norm_train" in fw, fw
    assert "normjit.rms_norm_backward" in bw and "normjit.layer_norm_backward" in bw, bw
    for graph, name in ((fw, train), (bw, "rms_norm_backward")):
        call, = [line for line in graph.splitlines() if f"normjit.{name}." in line]
        args = call.split("(", 1)[1].split(")")[0]
        # eps, then the offset; the fused add's backward: then h's gradient (y + 0.5 * h)
        if fused and name == "rms_norm_backward":
            assert re.search(r", 1e-06, %s, \w+$" % ("1.0" if offset else "0.0"), args), call
        else:
            assert args.endswith(", 1e-06, 1.0") == bool(offset), call
    leaves = (x, r, w, lw, lb) if fused else (x, w, lw, lb)
    compiled = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    step(x, r).backward()
    for got, t in zip(compiled, leaves):
        close(got, t.grad.double(), 1e-6)


# ---------------------------------------------------------------------------------------
# normjit_launch_backward from Python: the extension's launch_backward, and ctypes
# ---------------------------------------------------------------------------------------

# kernel NULL: refused by the library (naming the kernel) before any device work
BWD_ARGS = (0, 0x1000, 0x2000, None, 0x3000, None, 0x4000, None, None, 1, None)


def test_launch_backward_by_the_extension_returns_what_ctypes_returns():
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    from normjit import _capi
    launch_backward = _capi.launch_backward_function()
    by_ctypes = _capi._ctypes_launch_backward(_capi.library())
    assert launch_backward is normjit._launch.launch_backward
    for args in (BWD_ARGS, BWD_ARGS + (None,), BWD_ARGS + (0xa000,),
                 (0, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000, 2**40,
                  0x9000)):
        status = launch_backward(*args)
        assert status == by_ctypes(*args) == _capi.Status.ERROR_INVALID_ARGUMENT
        assert "kernel" in _capi.library().error(status).message


@pytest.mark.parametrize("index, value, match", [
    (0, None, "kernel must be an int, not <class 'NoneType'>"),
    (1, 1.5, "x must be an int"),
    (2, None, "dy must be an int, not"),
    (3, "m", "mean must be an int or None"),
    (4, None, "rstd must be an int, not"),
    (6, None, "dx must be an int, not"),
    (7, [], "dweight must be an int or None"),
    (9, 1.0, "launch_backward: batch must be an int"),
    (10, object(), "stream must be an int or None"),
    (11, "h", "dresidual_out must be an int or None"),
])
def test_launch_backward_by_the_extension_rejects_wrong_types(index, value, match):
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    from normjit import _capi
    args = list(BWD_ARGS) + [None]  # with dresidual_out
    args[index] = value
    with pytest.raises(TypeError, match=match):
        _capi.launch_backward_function()(*args)


def test_launch_backward_by_the_extension_rejects_a_wrong_count_and_bad_binding():
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    from normjit import _capi, _launch
    launch_backward = _capi.launch_backward_function()
    for count in (10, 14):
        with pytest.raises(TypeError, match=f"takes 11 to 13 arguments .*, not {count}"):
            launch_backward(*(BWD_ARGS + (None, None, None))[:count])
    with pytest.raises(OverflowError):
        launch_backward(*BWD_ARGS[:9], 2**63, None)
    with pytest.raises(ValueError, match="address 0"):
        _launch.bind_backward(0, 1)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        _launch.bind_backward(1)


def test_launch_backward_through_ctypes_without_the_extension():
    """A fresh process where `import normjit._launch` fails: the ctypes function, filling a
    BackwardArgs with normjit_backward_args_init."""
    code = ("import sys; sys.modules['normjit._launch'] = None\n"
            "from normjit import _capi\n"
            "launch_backward = _capi.launch_backward_function()\n"
            "assert launch_backward.__name__ == 'launch', launch_backward\n"
            f"print(launch_backward(*{BWD_ARGS!r}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == normjit.Status.ERROR_INVALID_ARGUMENT
