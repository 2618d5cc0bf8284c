"""Training through normjit.torch where there is no GPU (issue 20), for the forms over channels:
group_norm (GroupNorm), rms_norm_channels (RMSNorm over dim 1) and layer_norm_channels
(LayerNorm2d). Their save_stats and backward spec texts compile for sm_90; on CPU tensors the
training ops fall back to PyTorch (gradcheck and gradgradcheck in float64, opcheck of the new
ops); the backward ops name wrong arguments. With the library emulated (CPU tensors take the
launch path; the emulator reads and writes the host memory behind the pointers in float64, with
the statistics laid out as the kernels lay them out: n * G + g, n * S + s), the training path is
checked end to end: the specs prepared, the launches and their pointers (the backward reads x
and the statistics the forward wrote), the gradients against float64 autograd of PyTorch's
reference (F.group_norm, permute + F.layer_norm, the RMSNorm channel formula), the modules and
patched layers, the fallbacks (non-contiguous dy, channels_last input, a problem the library has
no backward kernel for, double backward) and torch.compile(fullgraph=True) tracing the training
and backward ops. Needs PyTorch; no GPU."""
import ctypes
import math
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from normjit.torch import _ops  # noqa: E402
from conftest import keeping_backend, launch_path_into  # noqa: E402

# fresh_warnings: conftest.py; each test starts with no fallback warning given yet.
pytestmark = pytest.mark.usefixtures("fresh_warnings")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
OPS = ["group_norm", "rms_norm_channels", "layer_norm_channels"]
# (op, affine) pairs that exist: rmsnorm has no bias.
OP_AFFINES = [(op, affine) for op in OPS for affine in ("none", "weight", "both")
              if not (op == "rms_norm_channels" and affine == "both")]
OP_AFFINE_IDS = [f"{op}-{affine}" for op, affine in OP_AFFINES]


def fallbacks(caught):
    return [str(w.message) for w in caught if issubclass(w.category, njt.NormjitFallbackWarning)]


def torch_reference(op, x, weight, bias, eps, groups=1):
    """PyTorch's function of op, differentiable: F.group_norm; the RMSNorm channel formula;
    timm's LayerNorm2d (permute, F.layer_norm over the channels, permute back)."""
    if op == "group_norm":
        return F.group_norm(x, groups, weight, bias, eps)
    if op == "rms_norm_channels":
        y = x * torch.rsqrt(x.square().mean(1, keepdim=True) + eps)
        return y * weight.view(1, -1, *([1] * (x.dim() - 2))) if weight is not None else y
    return F.layer_norm(x.movedim(1, -1), (x.shape[1],), weight, bias, eps).movedim(-1, 1)


def reference_grads(op, x, weight, bias, eps, dy, groups=1):
    """Gradients of x, weight, bias by float64 autograd of PyTorch's reference."""
    leaves = [t.detach().double().requires_grad_() if t is not None else None
              for t in (x, weight, bias)]
    torch_reference(op, *leaves, eps, groups).backward(dy.double())
    return [t.grad if t is not None else None for t in leaves]


def ours(op, x, weight, bias, eps, groups=1, activation=None):
    if op == "group_norm":
        return njt.group_norm(x, groups, weight, bias, eps, activation=activation)
    if op == "rms_norm_channels":
        return njt.rms_norm_channels(x, weight, eps, activation=activation)
    return njt.layer_norm_channels(x, weight, bias, eps, activation=activation)


def close(got, ref, rtol):
    assert got is not None and ref is not None
    assert got.shape == ref.shape, (got.shape, ref.shape)
    diff = (got.double() - ref).norm().item()
    assert diff <= rtol * ref.norm().item() + 1e-6, (diff, ref.norm().item())


def spec_of(op, shape, dtype, affine, eps, groups=1, axis=""):
    library_op = _ops._CHANNEL_OPS[op]
    return (_ops._channels_spec(library_op, shape, groups, dtype, affine != "none",
                                affine == "both", eps) + axis)


# ---------------------------------------------------------------------------------------
# The specs it prepares compile for sm_90 (no GPU needed)
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    spec_of("group_norm", (2, 320, 64, 64), torch.float16, "both", 1e-5, 32, " save_stats=true"),
    spec_of("group_norm", (2, 320, 64, 64), torch.float16, "both", 1e-5, 32, " backward=true"),
    spec_of("group_norm", (3, 7, 7, 9), torch.float32, "none", 1e-5, 7, " backward=true"),
    spec_of("group_norm", (2, 320, 64, 64), torch.bfloat16, "both", 1e-5, 32,
            " layout=nhwc backward=true"),
    spec_of("rms_norm_channels", (3, 65, 7, 9), torch.bfloat16, "weight", 1e-5, 0,
            " save_stats=true"),
    spec_of("rms_norm_channels", (3, 65, 7, 9), torch.bfloat16, "weight", 1e-5, 0,
            " backward=true"),
    spec_of("layer_norm_channels", (1, 96, 56, 56), torch.float32, "both", 1e-6, 0,
            " save_stats=true"),
    spec_of("layer_norm_channels", (1, 96, 56, 56), torch.float32, "both", 1e-6, 0,
            " backward=true"),
    spec_of("layer_norm_channels", (2, 1, 3), torch.float16, "none", 1e-6, 0, " backward=true"),
], ids=["gn-stats", "gn-bwd", "gn-7x9", "gn-nhwc-bwd", "rms-stats", "rms-bwd", "ln-stats",
        "ln-bwd", "ln-c1"])
def test_the_spec_texts_it_prepares_compile(spec, tmp_path):
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        assert engine.precompile(spec, arch="sm_90") is True


def test_the_spec_texts_are_the_forward_with_one_more_axis():
    assert spec_of("group_norm", (2, 320, 64, 64), torch.bfloat16, "both", 1e-5, 32,
                   " backward=true") == ("op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 "
                                         "affine=both eps=1e-05 backward=true")
    assert spec_of("rms_norm_channels", (2, 8, 3), torch.float32, "weight", 1e-5, 0,
                   " save_stats=true") == ("op=rmsnorm shape=2,8,3 dtype=f32 normalized_dims=0 "
                                           "affine=weight eps=1e-05 save_stats=true")


# ---------------------------------------------------------------------------------------
# On CPU tensors: PyTorch's forward and gradient, one warning per reason
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
def test_cpu_tensors_keep_pytorchs_autograd_with_one_warning(op):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 3, 5, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    b = torch.randn(6, requires_grad=True) if op != "rms_norm_channels" else None
    dy = torch.randn(2, 6, 3, 5)
    with pytest.warns(njt.NormjitFallbackWarning, match=rf"{op}: input on cpu"):
        y = ours(op, x, w, b, 1e-5, 3)
    y.backward(dy)
    ref = reference_grads(op, x, w, b, 1e-5, dy, 3)
    for got, r in zip((x.grad, w.grad, b.grad if b is not None else None), ref):
        if r is not None:
            close(got, r, 1e-5)


@pytest.mark.parametrize("op, affine", OP_AFFINES, ids=OP_AFFINE_IDS)
def test_gradcheck_of_the_train_ops_in_float64(op, affine, quiet):
    """The training ops themselves on CPU float64 (forward and backward fall back, through the
    statistics they saved): gradcheck and gradgradcheck against finite differences."""
    torch.manual_seed(1)
    x = torch.randn(2, 6, 3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True) if affine != "none" else None
    b = torch.randn(6, dtype=torch.float64, requires_grad=True) if affine == "both" else None
    ops = torch.ops.normjit
    inputs = tuple(t for t in (x, w, b) if t is not None)

    def fn(*ts):
        it = iter(ts)
        xx = next(it)
        ww = next(it) if w is not None else None
        bb = next(it) if b is not None else None
        if op == "group_norm":
            return ops.group_norm_train(xx, 3, ww, bb, 1e-5)[0]
        if op == "rms_norm_channels":
            return ops.rms_norm_channels_train(xx, ww, 1e-5)[0]
        return ops.layer_norm_channels_train(xx, ww, bb, 1e-5)[0]

    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


def gn_backward_args():
    return (torch.randn(2, 6, 5), torch.randn(2, 6, 5), torch.randn(2, 3, 1, 1),
            torch.rand(2, 3, 1, 1) + 0.5, torch.randn(6), True, 3, 1e-5)


def ln2d_backward_args():
    return (torch.randn(2, 6, 5), torch.randn(2, 6, 5), torch.randn(2, 1, 5),
            torch.rand(2, 1, 5) + 0.5, torch.randn(6), True, 1e-6)


def rms2d_backward_args():
    return (torch.randn(2, 6, 5), torch.randn(2, 6, 5), torch.rand(2, 1, 5) + 0.5,
            torch.randn(6), 1e-5)


def channels_last(t):
    """t with its channels innermost (channels_last for 4-D, any rank's analogue)."""
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


def gn_backward_args_channels_last():
    return (channels_last(torch.randn(2, 6, 3, 5)), channels_last(torch.randn(2, 6, 3, 5)),
            torch.randn(2, 3, 1, 1, 1), torch.rand(2, 3, 1, 1, 1) + 0.5, torch.randn(6), True, 3,
            1e-5)


OPCHECKS = [
    ("group_norm_train", lambda: (torch.randn(2, 6, 5), 3, torch.randn(6), torch.randn(6), 1e-5)),
    ("group_norm_train", lambda: (torch.randn(2, 6, 3, 5, dtype=torch.bfloat16), 6, None, None,
                                  1e-5)),
    ("rms_norm_channels_train", lambda: (torch.randn(2, 6, 5), torch.randn(6), 1e-5)),
    ("rms_norm_channels_train", lambda: (torch.randn(2, 6, dtype=torch.float16), None, 1e-5)),
    ("layer_norm_channels_train", lambda: (torch.randn(2, 6, 5), torch.randn(6), torch.randn(6),
                                           1e-6)),
    ("layer_norm_channels_train", lambda: (torch.randn(2, 6, 2, 2, 2), None, None, 1e-6)),
    ("group_norm_backward", gn_backward_args),
    ("group_norm_backward", lambda: gn_backward_args()[:4] + (None, False, 3, 1e-5)),
    ("rms_norm_channels_backward", rms2d_backward_args),
    ("rms_norm_channels_backward", lambda: rms2d_backward_args()[:3] + (None, 1e-5)),
    ("layer_norm_channels_backward", ln2d_backward_args),
    ("layer_norm_channels_backward", lambda: ln2d_backward_args()[:4] + (None, False, 1e-6)),
    # channels last: dx too, whichever path computes it (here PyTorch's gradient)
    ("group_norm_backward", gn_backward_args_channels_last),
    ("rms_norm_channels_backward", lambda: tuple(
        channels_last(t) if i < 2 else t for i, t in enumerate(rms2d_backward_args()))),
    ("layer_norm_channels_backward", lambda: tuple(
        channels_last(t) if i < 2 else t for i, t in enumerate(ln2d_backward_args()))),
    ("group_norm_train", lambda: (channels_last(torch.randn(2, 6, 3, 5)), 3, torch.randn(6),
                                  torch.randn(6), 1e-5)),
]


@pytest.mark.parametrize("op, args", OPCHECKS,
                         ids=[f"{op}-{i}" for i, (op, _) in enumerate(OPCHECKS)])
def test_opcheck_of_the_training_ops(op, args, quiet):
    """Schema, fake implementation, the autograd registration and AOT dispatch."""
    torch.library.opcheck(getattr(torch.ops.normjit, op).default, args())


def test_opcheck_of_the_training_ops_with_inputs_that_require_grad(quiet):
    x = torch.randn(2, 6, 5, requires_grad=True)
    w, b = torch.randn(6, requires_grad=True), torch.randn(6, requires_grad=True)
    torch.library.opcheck(torch.ops.normjit.group_norm_train.default, (x, 2, w, b, 1e-5))
    torch.library.opcheck(torch.ops.normjit.rms_norm_channels_train.default, (x, w, 1e-5))
    torch.library.opcheck(torch.ops.normjit.layer_norm_channels_train.default, (x, w, b, 1e-6))


def test_the_training_forward_saves_statistics_in_the_kernels_layout(quiet):
    """[N, G, 1, ...] for group_norm (n * G + g), [N, 1, *spatial] for the channel forms
    (n * S + s), float32, as the fake implementations say."""
    x = torch.randn(2, 6, 3, 5)
    _, mean, rstd = torch.ops.normjit.group_norm_train(x, 3, None, None, 1e-5)
    assert mean.shape == rstd.shape == (2, 3, 1, 1, 1) and rstd.dtype == torch.float32
    groups = x.view(2, 3, -1).double()
    torch.testing.assert_close(mean.flatten().double(), groups.mean(-1).flatten())
    torch.testing.assert_close(rstd.flatten().double(),
                               torch.rsqrt(groups.var(-1, correction=0) + 1e-5).flatten())
    _, rstd = torch.ops.normjit.rms_norm_channels_train(x, None, 1e-5)
    assert rstd.shape == (2, 1, 3, 5)
    torch.testing.assert_close(rstd.double(),
                               torch.rsqrt(x.double().square().mean(1, keepdim=True) + 1e-5))
    _, mean, rstd = torch.ops.normjit.layer_norm_channels_train(x.half(), None, None, 1e-6)
    assert mean.shape == rstd.shape == (2, 1, 3, 5) and mean.dtype == torch.float32
    torch.testing.assert_close(mean.double(), x.half().double().mean(1, keepdim=True))


@pytest.mark.parametrize("call, match", [
    (lambda: torch.ops.normjit.group_norm_backward(torch.randn(2, 6, 4), torch.randn(2, 6, 5),
                                                   torch.ones(2, 3), torch.ones(2, 3), None,
                                                   False, 3, 1e-5),
     r"group_norm backward: grad has shape \[2, 6, 4\]; expected the input's, \[2, 6, 5\]"),
    (lambda: torch.ops.normjit.group_norm_backward(torch.randn(2, 6, 5), torch.randn(2, 6, 5),
                                                   torch.ones(2, 2), torch.ones(2, 3), None,
                                                   False, 3, 1e-5),
     r"mean has shape \[2, 2\] and dtype torch.float32; expected \[2, 3, 1, 1\] torch.float32 "
     r"\(one per \(n, group\)\)"),
    (lambda: torch.ops.normjit.group_norm_backward(torch.randn(2, 6, 5), torch.randn(2, 6, 5),
                                                   torch.ones(2, 3), torch.ones(2, 3), None,
                                                   False, 4, 1e-5),
     r"num_groups 4 does not divide the input's 6 channels"),
    (lambda: torch.ops.normjit.group_norm_backward(torch.randn(2, 6, 5), torch.randn(2, 6, 5),
                                                   torch.ones(2, 3), torch.ones(2, 3),
                                                   torch.ones(5), True, 3, 1e-5),
     r"weight has shape \[5\]; expected \[6\] \(the input's channels\)"),
    (lambda: torch.ops.normjit.rms_norm_channels_backward(
        torch.randn(2, 6, 5), torch.randn(2, 6, 5), torch.ones(2, 5, dtype=torch.float16), None,
        1e-5),
     r"rstd has shape \[2, 5\] and dtype torch.float16; expected \[2, 1, 5\] torch.float32 "
     r"\(one per \(n, position\)\)"),
    (lambda: torch.ops.normjit.rms_norm_channels_backward(
        torch.randn(2, 6, 5), torch.randn(2, 6, 5), torch.ones(2, 6), None, 1e-5),
     r"rstd has shape \[2, 6\]"),
    (lambda: torch.ops.normjit.layer_norm_channels_backward(
        torch.randn(2, 6, 5), torch.randn(2, 6, 5), torch.ones(2, 5), torch.ones(2, 5), None,
        True, 1e-6),
     r"layer_norm_channels backward: has_bias without a weight"),
    (lambda: torch.ops.normjit.layer_norm_channels_backward(
        torch.randn(6), torch.randn(6), torch.ones(1), torch.ones(1), None, False, 1e-6),
     r"input of shape \[6\]; expected \[N, C, \*spatial\]"),
])
def test_backward_ops_name_wrong_arguments(call, match, quiet):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------------------------
# The library emulated: CPU tensors take the launch path; the emulator computes in float64
# from the host memory behind the pointers and writes what the kernel would
# ---------------------------------------------------------------------------------------

_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def memory(pointer, n, dtype):
    """n elements of dtype at a host address, as a tensor sharing that memory."""
    size = torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * (n * size)).from_address(pointer), dtype=dtype)


class Emulator:
    """normjit's engine and launch functions for CPU tensors of [N, C, *spatial]: prepare
    records spec texts (`refuse(spec)` may raise what the library would); launches record their
    arguments and compute, for batch N, x viewed as rows [N, R, L] (groupnorm: R = G rows of
    C/G * S; the channel forms: R = S positions of C values at stride S), the statistics one per
    (n, r) at n * R + r."""

    def __init__(self):
        self.specs, self.launches, self.by_handle = [], [], {}
        self.refuse = None

    def prepare(self, spec):
        if self.refuse is not None:
            self.refuse(spec)
        self.specs.append(spec)
        handle = 0x7F0000001000 + 0x100 * len(self.specs)
        f = dict(kv.split("=", 1) for kv in spec.split())
        shape = [int(s) for s in f["shape"].split(",")]
        assert f.get("normalized_dims", "0") == "0", spec
        self.by_handle[handle] = {
            "op": f["op"], "shape": shape, "groups": int(f.get("groups", 0)),
            "dtype": _DT[f["dtype"]], "affine": f["affine"],
            "stats": f.get("save_stats") == "true", "backward": f.get("backward") == "true",
            "nhwc": f.get("layout") == "nhwc", "activation": f.get("activation", "none")}
        return handle

    @staticmethod
    def rows(s, t):
        """t [N, C, S] as [N, R, L] (a copy for the channel forms) and the inverse."""
        n, c = t.shape[:2]
        if s["op"] == "groupnorm":
            g = s["groups"]
            return t.reshape(n, g, -1), lambda r: r.reshape(n, c, -1)
        return t.transpose(1, 2), lambda r: r.transpose(1, 2)

    def tensors(self, s, batch, *pointers):
        """[N, C, S] views of the tensors at the pointers (layout=nhwc: read as [N, S, C])."""
        c = s["shape"][1]
        per = math.prod(s["shape"][1:])
        if s["nhwc"]:
            return [memory(p, batch * per, s["dtype"]).double().view(batch, -1, c).transpose(1, 2)
                    for p in pointers]
        return [memory(p, batch * per, s["dtype"]).double().view(batch, c, -1) for p in pointers]

    def params(self, s, weight, bias):
        """weight and bias per row element: [1, 1, L] for the channel forms (L = C), [1, G, C/G *
        S] for groupnorm; None where absent."""
        c = s["shape"][1]
        spatial = math.prod(s["shape"][2:])
        out = []
        for p in (weight, bias):
            if p is None:
                out.append(None)
                continue
            v = memory(p, c, s["dtype"]).double()
            if s["op"] == "groupnorm":
                g = s["groups"]
                out.append(v.view(g, c // g, 1).expand(g, c // g, spatial).reshape(1, g, -1))
            else:
                out.append(v.view(1, 1, c))
        return out

    def _forward(self, kernel, x, y, weight, bias, batch, eps, mean=None, rstd=None):
        s = self.by_handle[kernel]
        assert not s["backward"]
        (xt,) = self.tensors(s, batch, x)
        xr, back = self.rows(s, xt)
        if s["op"] == "rmsnorm":
            r = torch.rsqrt(xr.square().mean(-1, keepdim=True) + eps)
            yr, m = xr * r, None
        else:
            m = xr.mean(-1, keepdim=True)
            r = torch.rsqrt((xr - m).square().mean(-1, keepdim=True) + eps)
            yr = (xr - m) * r
        w, b = self.params(s, weight, bias)
        if w is not None:
            yr = yr * w
        if b is not None:
            yr = yr + b
        yr = {"none": lambda v: v, "silu": F.silu, "gelu": F.gelu}[s["activation"]](yr)
        yt = back(yr)  # [N, C, S]; layout=nhwc writes [N, S, C]
        memory(y, xt.numel(), s["dtype"]).copy_((yt.transpose(1, 2) if s["nhwc"] else yt).flatten())
        if rstd is not None:
            memory(rstd, r.numel(), torch.float32).copy_(r.flatten())
        if mean is not None:
            memory(mean, m.numel(), torch.float32).copy_(m.flatten())
        return 0

    def launch(self, kernel, x, y, weight, bias, batch, eps, stream):
        self.launches.append(("launch", dict(kernel=kernel, x=x, y=y, batch=batch)))
        return self._forward(kernel, x, y, weight, bias, batch, eps)

    def launch_ex(self, kernel, x, y, weight, bias, batch, eps, residual, residual_out, scale,
                  mean, rstd, stream, rows):
        self.launches.append(("launch_ex", dict(kernel=kernel, x=x, y=y, mean=mean, rstd=rstd,
                                                batch=batch)))
        s = self.by_handle[kernel]
        assert residual is None and scale is None and rows is None
        assert s["stats"] and rstd is not None and (mean is None) == (s["op"] == "rmsnorm")
        return self._forward(kernel, x, y, weight, bias, batch, eps, mean, rstd)

    def launch_backward(self, kernel, x, dy, mean, rstd, weight, dx, dweight, dbias, batch,
                        stream, dresidual_out=None, bias=None):
        self.launches.append(("launch_backward", dict(
            kernel=kernel, x=x, dy=dy, mean=mean, rstd=rstd, weight=weight, dx=dx,
            dweight=dweight, dbias=dbias, batch=batch, bias=bias)))
        s = self.by_handle[kernel]
        assert s["backward"] and dresidual_out is None
        assert (bias is not None) == (s["activation"] != "none" and s["affine"] == "both")
        xt, dyt = self.tensors(s, batch, x, dy)
        (xr, back), (dyr, _) = self.rows(s, xt), self.rows(s, dyt)
        count = xr.shape[0] * xr.shape[1]
        r = memory(rstd, count, torch.float32).double().view(xr.shape[0], xr.shape[1], 1)
        if s["op"] == "rmsnorm":
            assert mean is None
            xhat = xr * r
        else:
            m = memory(mean, count, torch.float32).double().view(r.shape)
            xhat = (xr - m) * r
        w, b = self.params(s, weight, bias)
        if s["activation"] != "none":  # dy through the activation's derivative at z
            z = xhat * w if w is not None else xhat
            z = z + b if b is not None else z
            dyr = dyr * _ops._activation_slope(z, s["activation"])
            dyt = back(dyr).reshape(dyt.shape)
        g = dyr * w if w is not None else dyr
        dxr = g - xhat * (g * xhat).mean(-1, keepdim=True)
        if s["op"] != "rmsnorm":
            dxr = dxr - g.mean(-1, keepdim=True)
        dxt = back(r * dxr)  # [N, C, S]; layout=nhwc writes [N, S, C]
        memory(dx, xt.numel(), s["dtype"]).copy_((dxt.transpose(1, 2) if s["nhwc"] else dxt)
                                                 .flatten())
        assert (dweight is not None) == (s["affine"] != "none")
        assert (dbias is not None) == (s["affine"] == "both")
        c = s["shape"][1]
        # Per channel: over n and the positions (x [N, C, S] again).
        dyc, xhatc = dyt, back(xhat).reshape(dyt.shape)
        if dweight is not None:
            memory(dweight, c, s["dtype"]).copy_((dyc * xhatc).sum((0, 2)))
        if dbias is not None:
            memory(dbias, c, s["dtype"]).copy_(dyc.sum((0, 2)))
        return 0

    def kinds(self):
        return [kind for kind, _ in self.launches]

    def last(self, kind):
        return next(args for k, args in reversed(self.launches) if k == kind)


@pytest.fixture
def emu(monkeypatch):
    """CPU tensors take the launch path into the emulator: normjit "runs" on their device, and
    every other check of the calls is the real one (grad included)."""
    e = Emulator()
    with launch_path_into(monkeypatch, e):
        yield e


def test_the_emulator_is_pytorchs_reference_in_inference(emu):
    """The emulator's own check: its forward is F.group_norm and the channel formulas."""
    torch.manual_seed(2)
    x = torch.randn(3, 6, 7, 9) * 2 + 1
    w, b = torch.randn(6), torch.randn(6)
    for op in OPS:
        bias = b if op != "rms_norm_channels" else None
        with torch.no_grad():
            y = ours(op, x, w, bias, 1e-5, 3)
        close(y, torch_reference(op, x.double(), w.double(),
                                 bias.double() if bias is not None else None, 1e-5, 3), 1e-6)
    assert emu.kinds() == ["launch"] * 3


SHAPES = [(1, 3, 1), (3, 6, 7, 9), (2, 65, 3), (7, 12, 2, 2, 2), (2, 3)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op, affine", OP_AFFINES, ids=OP_AFFINE_IDS)
def test_trains_through_normjit(emu, op, shape, affine, dtype):
    torch.manual_seed(3)
    groups = math.gcd(shape[1], 3) if op == "group_norm" else 0
    if op == "group_norm" and shape[1] // groups * math.prod(shape[2:]) == 1:
        groups = 1  # F.group_norm refuses groups of one value
    c = shape[1]
    x = (torch.randn(shape) * 3 + 10).to(dtype).requires_grad_()
    w = (1 + 0.3 * torch.randn(c)).to(dtype).requires_grad_() if affine != "none" else None
    b = (0.1 * torch.randn(c)).to(dtype).requires_grad_() if affine == "both" else None
    dy = torch.randn(shape).to(dtype)
    eps = 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        y = ours(op, x, w, b, eps, groups)
        assert y.requires_grad and y.grad_fn is not None
        y.backward(dy)
    forward = spec_of(op, shape, dtype, affine, eps, groups, " save_stats=true")
    assert emu.specs == [forward, forward.replace(" save_stats=true", " backward=true")]
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    fwd, bwd = emu.last("launch_ex"), emu.last("launch_backward")
    # The backward reads x itself and the statistics the forward wrote; batch N both.
    assert bwd["x"] == x.data_ptr() and bwd["batch"] == fwd["batch"] == shape[0]
    assert (bwd["mean"], bwd["rstd"]) == (fwd["mean"], fwd["rstd"])
    assert bwd["dx"] == x.grad.data_ptr()  # the gradient is the kernel's output itself
    assert y.dtype == x.grad.dtype == dtype and y.is_contiguous()
    ref = reference_grads(op, x, w, b, eps, dy, groups)
    rtol = 1e-5 if dtype == torch.float32 else 1e-2
    for got, r in zip((x.grad, w.grad if w is not None else None,
                       b.grad if b is not None else None), ref):
        if r is not None:
            assert got.dtype == dtype
            close(got, r, rtol)


@pytest.mark.parametrize("op", OPS)
def test_inference_keeps_the_plain_kernel(emu, op):
    x = torch.randn(2, 6, 5)
    w = torch.randn(6, requires_grad=True)
    with torch.no_grad():
        ours(op, x, w, None, 1e-5, 3)
    ours(op, x, w.detach(), None, 1e-5, 3)  # grad mode, nothing requires grad
    assert emu.kinds() == ["launch", "launch"]
    assert not any("save_stats" in s or "backward" in s for s in emu.specs)


def test_only_the_weight_requires_grad(emu):
    torch.manual_seed(4)
    m = njt.GroupNorm(4, 8)
    with torch.no_grad():
        m.weight.copy_(1 + 0.3 * torch.randn(8))
        m.bias.copy_(0.1 * torch.randn(8))
    x, dy = torch.randn(3, 8, 5, 5), torch.randn(3, 8, 5, 5)
    m(x).backward(dy)
    ref = reference_grads("group_norm", x, m.weight, m.bias, 1e-5, dy, 4)
    close(m.weight.grad, ref[1], 1e-5)
    close(m.bias.grad, ref[2], 1e-5)
    assert x.grad is None and emu.kinds() == ["launch_ex", "launch_backward"]


def test_modules_and_patched_layers_train_through_normjit(emu):
    """A conv net with nn.GroupNorm and a timm-style LayerNorm2d, patched, and the modules
    GroupNorm and LayerNorm2d: every parameter's gradient against the float64 net's."""

    class LayerNorm2d(torch.nn.LayerNorm):  # timm's
        def __init__(self, num_channels, eps=1e-6, affine=True):
            super().__init__(num_channels, eps=eps, elementwise_affine=affine)

        def forward(self, x):
            x = x.permute(0, 2, 3, 1)
            x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
            return x.permute(0, 3, 1, 2)

    class Net(torch.nn.Module):
        def __init__(self, gn, ln):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(4, 8, 3, padding=1)
            self.gn = gn
            self.conv2 = torch.nn.Conv2d(8, 8, 1)
            self.ln = ln

        def forward(self, x):
            return self.ln(self.conv2(F.silu(self.gn(self.conv1(x)))))

    torch.manual_seed(5)
    ref = Net(torch.nn.GroupNorm(4, 8), LayerNorm2d(8))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    patched = Net(torch.nn.GroupNorm(4, 8), LayerNorm2d(8))
    patched.load_state_dict(ref.state_dict())
    assert len(njt.patch(patched).replaced) == 2
    modules = Net(njt.GroupNorm(4, 8), njt.LayerNorm2d(8))
    modules.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 6, 5)
    dy = torch.randn(2, 8, 6, 5)
    ref.double()(x.double()).backward(dy.double())
    for model in (patched, modules):
        emu.launches.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", njt.NormjitFallbackWarning)
            model(x).backward(dy)
        assert emu.kinds().count("launch_backward") == 2, emu.kinds()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p.grad, q.grad, 1e-5)


def test_rms_norm_channels_module_form_trains(emu):
    """timm's RmsNorm2d patched: rms_norm_channels with its weight."""

    class RmsNorm2d(torch.nn.Module):
        def __init__(self, channels, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = torch.nn.Parameter(1 + 0.3 * torch.randn(channels))

        def forward(self, x):
            return torch_reference("rms_norm_channels", x, self.weight, None, self.eps)

    RmsNorm2d.__module__ = "timm.layers.norm"  # patch() takes timm's class of that name
    torch.manual_seed(6)
    layer = RmsNorm2d(16)
    report = njt.patch(layer)
    assert len(report.replaced) == 1, str(report)
    x = torch.randn(2, 16, 3, 3, requires_grad=True)
    dy = torch.randn(2, 16, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        layer(x).backward(dy)
    ref = reference_grads("rms_norm_channels", x, layer.weight, None, 1e-6, dy)
    close(x.grad, ref[0], 1e-5)
    close(layer.weight.grad, ref[1], 1e-5)
    assert emu.kinds() == ["launch_ex", "launch_backward"]


@pytest.mark.parametrize("op", OPS)
def test_a_non_contiguous_gradient_is_copied_for_the_kernel(emu, op):
    """y.sum() gives an expanded (stride 0) dy: the backward kernel reads a contiguous copy of
    it, no warning."""
    torch.manual_seed(7)
    w = torch.randn(6, requires_grad=True)
    x = (torch.randn(2, 6, 3, 4) + 2).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        ours(op, x, w, None, 1e-5, 3).sum().backward()
    ref = reference_grads(op, x, w, None, 1e-5, torch.ones(2, 6, 3, 4), 3)
    close(x.grad, ref[0], 1e-5)
    close(w.grad, ref[1], 1e-5)
    assert emu.kinds() == ["launch_ex", "launch_backward"]


@pytest.mark.parametrize("op", OPS)
def test_a_channels_last_input_trains_through_normjit(emu, op):
    """A channels_last input that requires grad: the forward reads it in place (layout=nhwc with
    save_stats; y channels last); the backward kernel too (layout=nhwc with backward: x and dy
    read in place, dx channels last); no warning, the gradients float64 autograd's."""
    torch.manual_seed(8)
    x = torch.randn(2, 6, 3, 4).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(6, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        y = ours(op, x, w, None, 1e-5, 3)
        assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
        dy = torch.randn(2, 6, 3, 4).to(memory_format=torch.channels_last)
        y.backward(dy)
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert emu.specs[0].endswith(" save_stats=true layout=nhwc"), emu.specs
    assert emu.specs[1].endswith(" layout=nhwc backward=true"), emu.specs
    assert emu.last("launch_backward")["x"] == x.data_ptr()  # in place
    assert emu.last("launch_backward")["dy"] == dy.data_ptr()
    assert x.grad.is_contiguous(memory_format=torch.channels_last)
    ref = reference_grads(op, x, w, None, 1e-5, dy, 3)
    close(y.detach(), torch_reference(op, x.detach().double(), w.detach().double(), None,
                                      1e-5, 3), 1e-5)
    close(x.grad, ref[0], 1e-5)
    close(w.grad, ref[1], 1e-5)


@pytest.mark.parametrize("op", ["rms_norm_channels", "layer_norm_channels"])
def test_a_channels_last_backward_copies_only_a_gradient_of_another_layout(emu, op):
    """The channel forms' nhwc backward on x [N, C, L] laid out [N, L, C] (rank 3) with the
    gradient of y.sum() (expanded: no layout): dy is copied channels last, x read in place, dx
    channels last; then a contiguous x of the same shape takes the nchw kernel."""
    torch.manual_seed(9)
    x = torch.randn(2, 5, 6).transpose(1, 2).requires_grad_()  # [2, 6, 5], channels innermost
    w = torch.randn(6, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        ours(op, x, w, None, 1e-5, 3).sum().backward()
    call = emu.last("launch_backward")
    assert call["x"] == x.data_ptr() and emu.specs[-1].endswith(" layout=nhwc backward=true")
    assert x.grad.movedim(1, -1).is_contiguous()
    ref = reference_grads(op, x, w, None, 1e-5, torch.ones(2, 6, 5), 3)
    close(x.grad, ref[0], 1e-5)
    close(w.grad, ref[1], 1e-5)
    xc = x.detach().contiguous().requires_grad_()
    ours(op, xc, w, None, 1e-5, 3).sum().backward()
    assert emu.last("launch_backward")["x"] == xc.data_ptr()
    assert "layout" not in emu.specs[-1] and xc.grad.is_contiguous()
    close(xc.grad, ref[0], 1e-5)


def test_group_norm_channels_last_backward_refused_takes_contiguous_copies(emu):
    """Where the library refuses group_norm's channels-last backward (more channels than its CTA
    covers), the backward takes contiguous copies of x and dy and the channels-first kernel,
    without a warning; the gradients are float64 autograd's. A channel form's refusal is no
    such fallback: its nhwc kernel is the row kernel, and it warns with the library's message."""
    message = "unsupported channels 8: emulated refusal of the channels-last kernel"
    refused = []

    def refuse(spec):
        if spec.endswith("layout=nhwc backward=true"):
            refused.append(spec)
            raise normjit.UnsupportedError(int(normjit.Status.ERROR_UNSUPPORTED), "unsupported",
                                           message)

    emu.refuse = refuse
    torch.manual_seed(12)
    x = torch.randn(2, 8, 3, 5).to(memory_format=torch.channels_last).requires_grad_()
    w = (1 + 0.3 * torch.randn(8)).requires_grad_()
    b = torch.randn(8, requires_grad=True)
    dy = torch.randn(2, 8, 3, 5).to(memory_format=torch.channels_last)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        njt.group_norm(x, 4, w, b, 1e-5).backward(dy)
    assert len(refused) == 1 and refused[0].startswith("op=groupnorm "), refused
    assert "layout" not in emu.specs[-1] and emu.specs[-1].endswith(" backward=true")
    call = emu.last("launch_backward")
    assert call["x"] != x.data_ptr() and call["dy"] != dy.data_ptr()  # contiguous copies
    ref = reference_grads("group_norm", x, w, b, 1e-5, dy, 4)
    for got, r in zip((x.grad, w.grad, b.grad), ref):
        close(got, r, 1e-5)
    x2 = x.detach().clone().requires_grad_()
    w2 = w.detach().clone().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        njt.rms_norm_channels(x2, w2, 1e-5).backward(dy)
    assert any(message in str(c.message) for c in caught), [str(c.message) for c in caught]
    ref = reference_grads("rms_norm_channels", x2, w2, None, 1e-5, dy, 4)
    close(x2.grad, ref[0], 1e-5)
    close(w2.grad, ref[1], 1e-5)


def test_the_training_decision_tells_channels_last_from_other_strides(emu):
    """The training op called directly with a channels-last x, then with an x of the same shape
    and other non-contiguous strides: the second is not taken for channels last (PyTorch's
    result, with the reason), and both results are right."""
    torch.manual_seed(10)
    base = torch.randn(2, 6, 3, 4)
    last = base.to(memory_format=torch.channels_last)
    other = base.transpose(2, 3).contiguous().transpose(2, 3)  # strides of neither layout
    assert not other.is_contiguous() and other.stride() != last.stride()
    ref = F.group_norm(base.double(), 3, None, None, 1e-5)
    y, _, _ = torch.ops.normjit.group_norm_train(last, 3, None, None, 1e-5)
    close(y, ref, 1e-5)
    with pytest.warns(njt.NormjitFallbackWarning, match="non-contiguous input"):
        y, _, _ = torch.ops.normjit.group_norm_train(other, 3, None, None, 1e-5)
    close(y, ref, 1e-5)
    assert emu.kinds() == ["launch_ex"]


@pytest.mark.parametrize("op", OPS)
def test_a_call_with_an_activation_tells_channels_last_from_other_strides(emu, op):
    """Inference with an activation (the decision cached with the variant): a channels-last x
    takes the layout=nhwc kernel; then an x of the same shape sliced from a wider tensor, and one
    with its spatial dims transposed, are not taken for channels last (PyTorch's result, with
    the reason), and every result is right (a kernel reading them as channels last would not
    be)."""
    torch.manual_seed(14)
    w = torch.randn(8)
    b = torch.randn(8) if op != "rms_norm_channels" else None
    last = torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last)
    sliced = torch.randn(2, 16, 6, 6)[:, :8]
    transposed = torch.randn(2, 8, 6, 6).transpose(2, 3)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        for x in (last, sliced, transposed):
            y = ours(op, x, w, b, 1e-5, 4, activation="silu")
            ref = torch_reference(op, x.double(), w.double(),
                                  b.double() if b is not None else None, 1e-5, 4)
            close(y, F.silu(ref), 1e-5)
    assert emu.kinds() == ["launch"]
    assert emu.specs[0].endswith(" activation=silu layout=nhwc"), emu.specs
    assert [m for m in fallbacks(caught) if "non-contiguous input" in m], fallbacks(caught)


@pytest.mark.parametrize("op", OPS)
def test_opcheck_of_a_channels_last_backward_through_the_kernel(emu, op):
    """The backward op of a channels-last x launches the layout=nhwc kernel, which writes dx
    channels last: the fake implementation says so too (torch.compile allocates and reads dx by
    it), and a refused kernel's PyTorch gradient is returned channels last as well."""
    torch.manual_seed(15)
    x, dy = channels_last(torch.randn(2, 8, 3, 5)), channels_last(torch.randn(2, 8, 3, 5))
    w, b = torch.randn(8), torch.randn(8)
    ops = torch.ops.normjit
    if op == "group_norm":
        _, mean, rstd = ops.group_norm_train(x, 4, w, b, 1e-5)
        backward, args = ops.group_norm_backward, (dy, x, mean, rstd, w, True, 4, 1e-5)
    elif op == "rms_norm_channels":
        _, rstd = ops.rms_norm_channels_train(x, w, 1e-5)
        backward, args = ops.rms_norm_channels_backward, (dy, x, rstd, w, 1e-5)
    else:
        _, mean, rstd = ops.layer_norm_channels_train(x, w, b, 1e-6)
        backward, args = ops.layer_norm_channels_backward, (dy, x, mean, rstd, w, True, 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        dx = backward(*args)[0]
        torch.library.opcheck(backward.default, args)
    assert emu.specs[-1].endswith(" layout=nhwc backward=true"), emu.specs
    assert dx.stride() == x.stride()
    with pytest.warns(njt.NormjitFallbackWarning, match="gradient dtype"):
        theirs = backward(dy.double(), *args[1:])[0]  # PyTorch's gradient, computed channels first
    assert theirs.stride() == x.stride()
    close(theirs, dx.double(), 1e-5)


def test_a_gradient_of_another_dtype_falls_back(emu):
    """The backward op called with a float32 dy for a bfloat16 input: PyTorch's gradient, in the
    input's dtype, with the reason."""
    torch.manual_seed(9)
    x = torch.randn(2, 6, 5, dtype=torch.bfloat16)
    dy = torch.randn(2, 6, 5)
    _, mean, rstd = torch.ops.normjit.group_norm_train(x, 2, None, None, 1e-5)
    with pytest.warns(njt.NormjitFallbackWarning, match=r"group_norm backward: gradient dtype "
                                                        r"torch.float32 differs from the "
                                                        r"input's torch.bfloat16"):
        dx, dw, db = torch.ops.normjit.group_norm_backward(dy, x, mean, rstd, None, False, 2,
                                                           1e-5)
    assert dx.dtype == torch.bfloat16 and dw.numel() == db.numel() == 0
    close(dx, reference_grads("group_norm", x, None, None, 1e-5, dy, 2)[0], 1e-2)
    assert emu.kinds() == ["launch_ex"]


def test_a_problem_without_a_backward_kernel_falls_back_with_the_librarys_message(emu):
    """The library refuses the backward spec (UnsupportedError at prepare): the forward is
    normjit's, PyTorch computes the gradient from the saved statistics, and the warning quotes
    the library's message."""
    message = "unsupported shape '2,8,5,5': backward=true emulated refusal"

    def refuse(spec):
        if spec.endswith("backward=true"):
            raise normjit.UnsupportedError(int(normjit.Status.ERROR_UNSUPPORTED), "unsupported",
                                           message)

    emu.refuse = refuse
    torch.manual_seed(10)
    x = torch.randn(2, 8, 5, 5, requires_grad=True)
    w = (1 + 0.3 * torch.randn(8)).requires_grad_()
    b = torch.randn(8, requires_grad=True)
    dy = torch.randn(2, 8, 5, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        njt.group_norm(x, 4, w, b, 1e-5).backward(dy)
    assert emu.kinds() == ["launch_ex"]
    assert fallbacks(caught) == [f"normjit.torch.group_norm backward: {message}; computing the "
                                 "gradient with PyTorch"]
    ref = reference_grads("group_norm", x, w, b, 1e-5, dy, 4)
    for got, r in zip((x.grad, w.grad, b.grad), ref):
        close(got, r, 1e-5)


def test_a_refused_training_forward_falls_back_to_pytorchs_values(emu):
    """The library refuses the save_stats spec: y and the statistics are PyTorch's, with the
    message; the backward kernel still runs from those statistics."""
    def refuse(spec):
        if spec.endswith("save_stats=true"):
            raise normjit.UnsupportedError(int(normjit.Status.ERROR_UNSUPPORTED), "unsupported",
                                           "emulated refusal of save_stats")

    emu.refuse = refuse
    torch.manual_seed(11)
    x = torch.randn(2, 6, 4, 3, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    dy = torch.randn(2, 6, 4, 3)
    with pytest.warns(njt.NormjitFallbackWarning, match="layer_norm_channels: emulated refusal"):
        y = njt.layer_norm_channels(x, w, b, 1e-6)
    y.backward(dy)
    assert emu.kinds() == ["launch_backward"]
    close(y.detach(), torch_reference("layer_norm_channels", x.double(), w.double(), b.double(),
                                      1e-6), 1e-6)
    ref = reference_grads("layer_norm_channels", x, w, b, 1e-6, dy)
    for got, r in zip((x.grad, w.grad, b.grad), ref):
        close(got, r, 1e-5)


def test_double_backward_is_pytorchs(emu):
    torch.manual_seed(12)
    x = torch.randn(2, 6, 5, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    dy = torch.randn(2, 6, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        y = njt.group_norm(x, 3, w, b, 1e-5)
        gx, gw = torch.autograd.grad(y, (x, w), dy, create_graph=True)
        (gx.square().sum() + gw.sum()).backward()
    assert [m for m in fallbacks(caught) if "group_norm backward: a double backward" in m]
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ry = F.group_norm(leaves[0], 3, leaves[1], leaves[2], 1e-5)
    rgx, rgw = torch.autograd.grad(ry, leaves[:2], dy.double(), create_graph=True)
    (rgx.square().sum() + rgw.sum()).backward()
    close(x.grad, leaves[0].grad, 1e-4)
    close(w.grad, leaves[1].grad, 1e-4)
    # dx and dweight take no bias (PyTorch leaves the float64 bias's grad None or zero)
    assert b.grad is None
    assert leaves[2].grad is None or leaves[2].grad.abs().max() == 0


needs_2_15 = pytest.mark.skipif(
    tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15),
    reason="with PyTorch before 2.15 (2.11 on the GPU machine) dynamo raises an "
           "InternalTorchDynamoError tracing the emulated launch path; "
           "test_autograd_channels_gpu.py's fullgraph training step covers compile on the real "
           "one")


@needs_2_15
def test_compile_traces_forward_and_backward_ops_without_graph_breaks(emu):
    """torch.compile(fullgraph=True) of a training step: the forward graph has the _train ops,
    the backward graph the backward ops; the gradients are the eager ones."""
    graphs = {"fw": [], "bw": []}
    backend = keeping_backend(graphs)
    torch.manual_seed(13)
    gw, gb = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    rw = torch.randn(8, requires_grad=True)
    lw, lb = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    params = (gw, gb, rw, lw, lb)

    def step(x):
        h = F.silu(njt.group_norm(x, 4, gw, gb, 1e-5))
        h = njt.rms_norm_channels(h * 2, rw, 1e-5)
        return njt.layer_norm_channels(h + 1, lw, lb, 1e-6).square().sum()

    x = torch.randn(2, 8, 3, 5, requires_grad=True)
    torch._dynamo.reset()
    try:
        loss = torch.compile(step, fullgraph=True, backend=backend)(x)
        loss.backward()
    finally:
        torch._dynamo.reset()
    fw, bw = "\n".join(graphs["fw"]), "\n".join(graphs["bw"])
    for name in OPS:
        assert f"normjit.{name}_train" in fw, fw
        assert f"normjit.{name}_backward" in bw, bw
    assert emu.kinds().count("launch_backward") == 3
    compiled = [t.grad.clone() for t in (x,) + params]
    for t in (x,) + params:
        t.grad = None
    step(x).backward()
    for got, t in zip(compiled, (x,) + params):
        close(got, t.grad.double(), 1e-6)


@needs_2_15
@pytest.mark.parametrize("case", ["channels_last", "activation"])
def test_compile_of_channels_last_and_of_an_activation_train_through_normjit(emu, case):
    """Under torch.compile, a channels-last input that requires grad traces the training and
    backward ops (the forward with layout=nhwc), as in eager; so does group_norm with an
    activation (both kernels' specs with it, the backward given the bias)."""
    graphs = {"fw": [], "bw": []}
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    x = torch.randn(2, 8, 3, 5)
    activation = None
    if case == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    else:
        activation = "silu"
    x.requires_grad_()
    fn = lambda t: njt.group_norm(t, 4, w, b, 1e-5, activation=activation)  # noqa: E731
    torch._dynamo.reset()
    try:
        y = torch.compile(fn, fullgraph=True, backend=keeping_backend(graphs))(x)
        y.square().sum().backward()
    finally:
        torch._dynamo.reset()
    fw, bw = "\n".join(graphs["fw"]), "\n".join(graphs["bw"])
    if case == "channels_last":
        assert "normjit.group_norm_train" in fw and "normjit.group_norm_backward" in bw, fw + bw
        assert emu.kinds() == ["launch_ex", "launch_backward"]
        assert emu.specs[0].endswith(" layout=nhwc"), emu.specs
    else:
        assert "normjit.group_norm_train" in fw and "normjit.group_norm_backward" in bw, fw + bw
        assert emu.kinds() == ["launch_ex", "launch_backward"]
        assert all(" activation=silu" in spec for spec in emu.specs), emu.specs
        assert emu.last("launch_backward")["bias"] == b.data_ptr()
    xd = x.detach().double().requires_grad_()
    ref = F.group_norm(xd, 4, w.double(), b.double(), 1e-5)
    if activation:
        ref = F.silu(ref)
    close(y.detach(), ref.detach(), 1e-6)
    ref.square().sum().backward()
    close(x.grad, xd.grad, 1e-5)
