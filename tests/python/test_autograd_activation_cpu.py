"""Training a norm with an activation (issue 19's GroupNorm -> SiLU, LayerNorm -> GELU) through
normjit.torch where there is no GPU: the training and backward ops take the activation, and the
backward kernel's spec carries it (activation=... backward=true), reading the forward's bias
for the activation's input. On CPU tensors the ops fall back to PyTorch's forward and
gradient (dy through the activation's derivative at xhat * w + b), which gradcheck and
gradgradcheck verify in float64; with the library emulated (tests/python/emulator.py: the
kernels' arithmetic in float64 on the memory behind the pointers), the whole path of rms_norm,
layer_norm and add_layer_norm is checked end to end: the specs prepared, the launches and their
pointers (the bias), and the gradients against float64 autograd of PyTorch's norm followed by
F.silu or F.gelu. The spec texts of every backward form with an activation compile for sm_90.
Needs PyTorch; no GPU."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from conftest import keeping_backend, launch_path_into  # noqa: E402
from emulator import Emulator  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_warnings")

ACTIVATIONS = ["silu", "gelu"]
ACT = {"silu": F.silu, "gelu": F.gelu}


@pytest.fixture
def emu(monkeypatch):
    """CPU tensors take the launch path into the emulator (test_autograd_cpu.py's)."""
    e = Emulator()
    with launch_path_into(monkeypatch, e):
        yield e


def close(got, ref, rtol):
    assert got is not None and ref is not None
    diff = (got.double() - ref).norm().item()
    assert diff <= rtol * ref.norm().item() + 1e-6, (diff, ref.norm().item())


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("form", ["layer_norm", "rms_norm", "group_norm", "layer_norm_channels",
                                  "rms_norm_channels", "add_layer_norm"])
def test_gradcheck_of_the_train_ops_with_an_activation(form, activation, quiet):
    """The training ops with an activation on CPU float64 (forward and backward fall back to
    PyTorch): gradcheck and gradgradcheck against finite differences, for x, the weight and
    the bias (the bias enters the activation's input, so its gradient and x's depend on it)."""
    torch.manual_seed(7)
    ops = torch.ops.normjit

    def t(*shape):
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    if form in ("layer_norm", "rms_norm", "add_layer_norm"):
        x, w, b = t(3, 2, 9), t(2, 9), t(2, 9)
    else:
        x, w, b = t(2, 6, 3, 2), t(6), t(6)
    fns = {
        "layer_norm": (lambda x, w, b: ops.layer_norm_train(x, [2, 9], w, b, 1e-5, 0.0,
                                                            activation)[0], (x, w, b)),
        "rms_norm": (lambda x, w: ops.rms_norm_train(x, [2, 9], w, 1e-6, 1.0, activation)[0],
                     (x, w)),
        "group_norm": (lambda x, w, b: ops.group_norm_train(x, 3, w, b, 1e-5, activation)[0],
                       (x, w, b)),
        "layer_norm_channels": (lambda x, w, b: ops.layer_norm_channels_train(
            x, w, b, 1e-5, activation)[0], (x, w, b)),
        "rms_norm_channels": (lambda x, w: ops.rms_norm_channels_train(x, w, 1e-6,
                                                                       activation)[0], (x, w)),
    }
    if form == "add_layer_norm":
        r = t(3, 2, 9)

        def fn(x, r, w, b):
            out = ops.add_layer_norm_train(x, r, [2, 9], w, b, 1e-5, 0.0, activation)
            return out[0], out[1]
        inputs = (x, r, w, b)
    else:
        fn, inputs = fns[form]
    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_train_ops_forward_is_the_norm_then_the_activation(activation, quiet):
    """y of a training op with an activation is PyTorch's norm followed by the activation (the
    fallback's); the statistics are the norm's (the backward reads them)."""
    torch.manual_seed(8)
    x, w, b = torch.randn(2, 8, 3, 3), torch.randn(8), torch.randn(8)
    y, mean, rstd = torch.ops.normjit.group_norm_train(x, 4, w, b, 1e-5, activation)
    torch.testing.assert_close(y, ACT[activation](F.group_norm(x, 4, w, b, 1e-5)))
    plain = torch.ops.normjit.group_norm_train(x, 4, w, b, 1e-5)
    torch.testing.assert_close(mean, plain[1])
    torch.testing.assert_close(rstd, plain[2])


@pytest.mark.parametrize("spec", [
    "op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 affine=both eps=1e-05 activation=silu "
    "backward=true",
    "op=groupnorm shape=2,320,64,64 dtype=f16 groups=32 affine=both eps=1e-05 activation=silu "
    "layout=nhwc backward=true",
    "op=layernorm shape=32,768,7,7 dtype=bf16 normalized_dims=0 affine=both eps=1e-06 "
    "activation=gelu backward=true",
    "op=layernorm shape=8,1000 dtype=f32 normalized_dims=1 affine=both eps=1e-05 "
    "activation=gelu backward=true",
    "op=rmsnorm shape=4,65537 dtype=bf16 normalized_dims=1 affine=weight eps=1e-06 "
    "activation=silu backward=true",
], ids=["gn-silu", "gn-nhwc-silu", "ln2d-gelu", "ln-gelu", "rms-split-silu"])
def test_the_backward_spec_texts_with_an_activation_compile(spec, tmp_path):
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        assert engine.precompile(spec, arch="sm_90") is True


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("op", ["ln", "rms", "add_ln"])
def test_a_norm_with_an_activation_trains_through_normjit(emu, op, activation):
    """layer_norm, rms_norm and add_layer_norm with an activation train through the training
    and backward ops: the activation in both kernels' specs, the backward given the forward's
    bias (for the activation's input), and the gradients those of PyTorch's norm followed by
    the activation, in float64."""
    torch.manual_seed(21)
    x = (torch.randn(6, 64) * 2 + 1).requires_grad_()
    r = torch.randn(6, 64, requires_grad=True) if op == "add_ln" else None
    w = (1 + 0.3 * torch.randn(64)).requires_grad_()
    b = torch.randn(64, requires_grad=True) if op != "rms" else None
    dy = torch.randn(6, 64)
    eps = 1e-6 if op == "rms" else 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        if op == "rms":
            y = njt.rms_norm(x, 64, w, eps, activation=activation)
        elif op == "ln":
            y = njt.layer_norm(x, 64, w, b, eps, activation=activation)
        else:
            y, h = njt.add_layer_norm(x, r, 64, w, b, eps, activation=activation)
        assert y.grad_fn is not None
        y.backward(dy)
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert [f"activation={activation}" in s for s in emu.specs] == [True, True]
    assert emu.specs[0].endswith(" save_stats=true") and emu.specs[1].endswith(" backward=true")
    bwd = emu.last("launch_backward")
    assert bwd["bias"] == (b.data_ptr() if b is not None else None)
    leaves = [t.detach().double().requires_grad_() if t is not None else None
              for t in (x, r, w, b)]
    xx = leaves[0] if r is None else leaves[0] + leaves[1]
    if op == "rms":
        ref = ACT[activation](F.rms_norm(xx, (64,), leaves[2], eps))
    else:
        ref = ACT[activation](F.layer_norm(xx, (64,), leaves[2], leaves[3], eps))
    close(y.detach(), ref.detach(), 1e-6)
    ref.backward(dy.double())
    for got, leaf in zip((x, r, w, b), leaves):
        if got is not None:
            close(got.grad, leaf.grad, 1e-5)


def test_the_channel_functions_with_an_activation_train_on_cpu_as_pytorch(quiet):
    """group_norm with activation='silu' on CPU tensors: the training op (its fallback), the
    gradients PyTorch's of F.silu(F.group_norm(...))."""
    torch.manual_seed(4)
    x = torch.randn(2, 8, 5, 5, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    y = njt.group_norm(x, 4, w, b, 1e-5, activation="silu")
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref = F.silu(F.group_norm(leaves[0], 4, leaves[1], leaves[2], 1e-5))
    refs = torch.autograd.grad(ref, leaves, dy.double())
    for got, want in zip(grads, refs):
        close(got, want, 1e-5)


@pytest.mark.skipif(
    tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15),
    reason="with PyTorch before 2.15 dynamo raises an InternalTorchDynamoError tracing the "
           "emulated launch path (test_autograd_channels_gpu.py's compile covers the real one)")
@pytest.mark.parametrize("op", ["ln", "rms"])
def test_compile_of_a_row_norm_with_an_activation_traces_the_training_ops(emu, op):
    """torch.compile(fullgraph=True) of layer_norm / rms_norm with activation='gelu': the
    forward graph calls the training op with the activation, the backward graph the backward
    op (with the bias for layer_norm); the gradients are float64 autograd's."""
    torch.manual_seed(31)
    x = (torch.randn(4, 64) + 2).requires_grad_()
    w = (1 + 0.2 * torch.randn(64)).requires_grad_()
    b = torch.randn(64, requires_grad=True) if op == "ln" else None
    if op == "ln":
        def fn(t):
            return njt.layer_norm(t, 64, w, b, 1e-5, activation="gelu")
    else:
        def fn(t):
            return njt.rms_norm(t, 64, w, 1e-6, activation="gelu")
    graphs = {"fw": [], "bw": []}
    torch._dynamo.reset()
    try:
        y = torch.compile(fn, fullgraph=True, backend=keeping_backend(graphs))(x)
        dy = torch.randn_like(y)
        y.backward(dy)
    finally:
        torch._dynamo.reset()
    name = "layer_norm" if op == "ln" else "rms_norm"
    fw, bw = "\n".join(graphs["fw"]), "\n".join(graphs["bw"])
    assert f"normjit.{name}_train" in fw and "'gelu'" in fw, fw
    assert f"normjit.{name}_backward" in bw and "'gelu'" in bw, bw
    assert emu.kinds() == ["launch_ex", "launch_backward"]
    assert emu.last("launch_backward")["bias"] == (b.data_ptr() if b is not None else None)
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    if op == "ln":
        ref = F.gelu(F.layer_norm(leaves[0], (64,), leaves[1], leaves[2], 1e-5))
    else:
        ref = F.gelu(F.rms_norm(leaves[0], (64,), leaves[1], 1e-6))
    ref.backward(dy.double())
    for got, leaf in zip((x, w, b), leaves):
        if got is not None:
            close(got.grad, leaf.grad, 1e-5)
