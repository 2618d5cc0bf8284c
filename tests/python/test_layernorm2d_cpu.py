"""normjit.torch's LayerNorm over channels (layer_norm_channels, the module LayerNorm2d, patched
LayerNorm2d layers of timm, SAM, torchvision) where there is no GPU: the fallback on CPU tensors
(timm's permute + layer_norm + permute, with one warning) and its autograd, argument errors,
timm's constructor and state_dict compatibility, patch()'s choices and report, and, with the
library emulated on host memory, the spec, batch and pointers of its launches, channels_last
inputs falling back, and torch.compile tracing the op (training through normjit's kernels:
test_autograd_channels_cpu.py). Needs PyTorch; no GPU."""
import ctypes
import math
import sys
import types
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from normjit.torch import _ops  # noqa: E402
from conftest import launch_path_into  # noqa: E402

# fresh_warnings: conftest.py; each test starts with no fallback warning given yet.
pytestmark = pytest.mark.usefixtures("fresh_warnings")


def timm_layer_norm_2d(x, weight, bias, eps):
    """timm's LayerNorm2d.forward (the reference every LayerNorm2d computes)."""
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), weight, bias, eps).permute(0, 3, 1, 2)


def float64_reference(x, weight, bias, eps):
    xd = x.double()
    mean = xd.mean(1, keepdim=True)
    var = (xd - mean).pow(2).mean(1, keepdim=True)
    y = (xd - mean) / torch.sqrt(var + eps)
    view = (1, -1) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.double().view(view)
    if bias is not None:
        y = y + bias.double().view(view)
    return y


def test_cpu_tensors_fall_back_to_timms_function_with_one_warning():
    x, w, b = torch.randn(2, 6, 4, 5), torch.randn(6), torch.randn(6)
    with pytest.warns(njt.NormjitFallbackWarning, match=r"layer_norm_channels: input on cpu"):
        y = njt.layer_norm_channels(x, w, b, 1e-6)
    assert torch.equal(y, timm_layer_norm_2d(x, w, b, 1e-6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason warns once
        y = njt.layer_norm_channels(x, w, b)  # eps defaults to timm's 1e-6
    assert torch.equal(y, timm_layer_norm_2d(x, w, b, 1e-6))


@pytest.mark.parametrize("shape", [(3, 5), (2, 7, 9), (2, 4, 3, 5), (1, 3, 2, 3, 4)],
                         ids=["no-spatial", "1d", "2d", "3d"])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_any_spatial_rank_is_the_float64_layer_norm_over_dim_1(shape, affine, quiet):
    x = torch.randn(*shape, dtype=torch.float64) * 3 + 5
    w = torch.randn(shape[1], dtype=torch.float64) if affine != "none" else None
    b = torch.randn(shape[1], dtype=torch.float64) if affine == "both" else None
    y = njt.layer_norm_channels(x, w, b, 1e-5)
    torch.testing.assert_close(y, float64_reference(x, w, b, 1e-5), rtol=1e-12, atol=1e-12)
    assert y.shape == x.shape


def test_training_runs_pytorchs_autograd_with_the_reason(quiet):
    x = torch.randn(2, 6, 3, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    _ops._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = njt.layer_norm_channels(x, w, b, 1e-6)
    # On CPU the device is the first reason; the grad reason is checked with the emulator.
    assert any("layer_norm_channels" in str(c.message) for c in caught)
    dy = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, w, b), dy)
    want = torch.autograd.grad(timm_layer_norm_2d(x, w, b, 1e-6), (x, w, b), dy)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r)
    assert torch.autograd.gradcheck(lambda *a: njt.layer_norm_channels(*a, 1e-6), (x, w, b))


@pytest.mark.parametrize("call, error, match", [
    (lambda: njt.layer_norm_channels(torch.randn(2, 6, 3), torch.randn(5)), ValueError,
     r"layer_norm_channels: weight has shape \[5\]; expected \[6\] \(the input's channels\)"),
    (lambda: njt.layer_norm_channels(torch.randn(2, 6, 3), torch.randn(6), torch.randn(6, 1)),
     ValueError, r"bias has shape \[6, 1\]; expected \[6\]"),
    (lambda: njt.layer_norm_channels(torch.randn(6)), ValueError,
     r"layer_norm_channels: input of shape \[6\]; expected \[N, C, \*spatial\]"),
    (lambda: njt.layer_norm_channels([1.0, 2.0]), TypeError,
     r"layer_norm_channels: input must be a torch.Tensor, not list"),
])
def test_bad_arguments_name_argument_and_value(call, error, match):
    with pytest.raises(error, match=match):
        call()


class TimmLayerNorm2d(torch.nn.LayerNorm):
    """timm.layers.norm.LayerNorm2d as timm writes it (fast_norm off)."""

    def __init__(self, num_channels: int, eps: float = 1e-6, affine: bool = True, **kwargs):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine, **kwargs)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class SamLayerNorm2d(torch.nn.Module):
    """segment_anything.modeling.common.LayerNorm2d: its own parameters, mean/var over dim 1."""

    def __init__(self, num_channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(num_channels))
        self.bias = torch.nn.Parameter(torch.zeros(num_channels))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


SamLayerNorm2d.__name__ = SamLayerNorm2d.__qualname__ = "LayerNorm2d"


@pytest.fixture
def timm_module(monkeypatch):
    """A module timm.layers.norm holding timm's LayerNorm2d and LayerNormExp2d."""
    m = types.ModuleType("timm.layers.norm")
    for name in ("LayerNorm2d", "LayerNormExp2d"):
        cls = type(name, (TimmLayerNorm2d,), {"__module__": m.__name__})
        setattr(m, name, cls)
    for name in ("timm", "timm.layers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, m.__name__, m)
    return m


def test_layer_norm_2d_takes_timms_arguments_and_loads_their_checkpoints(timm_module, quiet):
    import inspect
    theirs = timm_module.LayerNorm2d
    # timm's parameters, plus the keyword-only activation (before **kwargs).
    ours_params = dict(inspect.signature(njt.LayerNorm2d.__init__).parameters)
    activation = ours_params.pop("activation")
    assert activation.kind == inspect.Parameter.KEYWORD_ONLY and activation.default is None
    assert list(ours_params.values()) == list(
        inspect.signature(theirs.__init__).parameters.values())
    ours = njt.LayerNorm2d(6)
    assert isinstance(ours, torch.nn.LayerNorm) and ours.eps == 1e-6
    assert ours.normalized_shape == (6,) and ours.weight.shape == ours.bias.shape == (6,)
    t = theirs(6)
    with torch.no_grad():
        for p in t.parameters():
            p.normal_()
    assert list(ours.state_dict()) == list(t.state_dict()) == ["weight", "bias"]
    ours.load_state_dict(t.state_dict())
    x = torch.randn(3, 6, 5, 4)
    assert torch.equal(ours(x), t(x))
    sam = SamLayerNorm2d(6)
    sam.load_state_dict(ours.state_dict())  # SAM's keys are the same
    torch.testing.assert_close(sam(x), ours(x), rtol=1e-5, atol=1e-5)
    # affine=False and the keyword arguments that go to torch.nn.LayerNorm.
    assert njt.LayerNorm2d(4, affine=False).weight is None
    no_bias = njt.LayerNorm2d(4, eps=1e-5, bias=False, dtype=torch.float64)
    assert no_bias.bias is None and no_bias.weight.dtype == torch.float64
    assert list(no_bias.state_dict()) == ["weight"]
    assert repr(ours) == repr(t)


class Net(torch.nn.Module):
    def __init__(self, timm_module):
        super().__init__()
        self.stem = timm_module.LayerNorm2d(8)
        self.exp = timm_module.LayerNormExp2d(8, eps=1e-5)
        self.sam = SamLayerNorm2d(8)
        self.plain = TimmLayerNorm2d(8, affine=False)
        self.plain.__class__ = type("LayerNorm2d", (TimmLayerNorm2d,), {})
        self.bad = SamLayerNorm2d(8)
        self.bad.eps = 1  # an int eps: not recognised
        self.odd = SamLayerNorm2d(8)
        self.odd.bias = torch.nn.Parameter(torch.zeros(8, 1))

    def forward(self, x):
        return self.bad(self.plain(self.sam(self.exp(self.stem(x)))))  # odd: reported only


def test_patch_recognises_layer_norm_2d_by_class_name_and_reports_it(timm_module, quiet):
    torch.manual_seed(0)
    model = Net(timm_module)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    x = torch.randn(2, 8, 5, 6)
    with torch.no_grad():
        before = model(x)
    report = njt.patch(model)
    replaced = dict(report.replaced)
    assert sorted(replaced) == ["exp", "plain", "sam", "stem"], report
    assert replaced["stem"] == "timm.layers.norm.LayerNorm2d"
    assert replaced["sam"].endswith("LayerNorm2d")
    skipped = {name: why for name, _, why in report.skipped}
    assert "its eps is 1, not a float" in skipped["bad"]
    assert "weight of shape [8], bias of shape [8, 1]" in skipped["odd"]
    assert type(model.stem).__name__ == "NormjitLayerNorm2d"
    assert isinstance(model.stem, timm_module.LayerNorm2d)
    with torch.no_grad():  # CPU: each layer's own forward
        torch.testing.assert_close(model(x), before)
    assert njt.unpatch(model) == 4 and type(model.stem) is timm_module.LayerNorm2d


# ---------------------------------------------------------------------------------------
# The launch path, with the library emulated on host memory
# ---------------------------------------------------------------------------------------

_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def memory(pointer, n, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * (n * size)).from_address(pointer), dtype=dtype)


class Emulator:
    """prepare records spec texts; launch computes LayerNorm over dim 1 into y's memory."""

    def __init__(self):
        self.specs, self.launches, self.by_handle = [], [], {}

    def prepare(self, spec):
        self.specs.append(spec)
        handle = 0x7F0000001000 + 0x100 * len(self.specs)
        fields = dict(f.split("=", 1) for f in spec.split())
        self.by_handle[handle] = fields
        return handle

    def launch(self, kernel, x, y, weight, bias, batch, eps, stream):
        self.launches.append((kernel, x, y, weight, bias, batch, eps))
        f = self.by_handle[kernel]
        assert f["op"] == "layernorm" and f["normalized_dims"] == "0"
        shape = [int(s) for s in f["shape"].split(",")]
        shape[0] = batch
        dtype = _DT[f["dtype"]]
        n = math.prod(shape)
        nhwc = f.get("layout") == "nhwc"  # memory [N, *spatial, C]
        stored = [shape[0], *shape[2:], shape[1]] if nhwc else shape
        xt = memory(x, n, dtype).view(stored)
        if nhwc:
            xt = xt.movedim(-1, 1)
        w = memory(weight, shape[1], dtype) if weight else None
        b = memory(bias, shape[1], dtype) if bias else None
        yt = float64_reference(xt, w, b, eps)
        memory(y, n, dtype).view(stored).copy_(yt.movedim(1, -1) if nhwc else yt)
        return 0


@pytest.fixture
def emu(monkeypatch):
    e = Emulator()
    with launch_path_into(monkeypatch, e):
        yield e


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_calls_launch_the_channel_form_of_layernorm(emu, dtype):
    x = torch.randn(3, 8, 5, 7, dtype=dtype)
    w, b = torch.randn(8, dtype=dtype), torch.randn(8, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        y = njt.layer_norm_channels(x, w, b, 1e-6)
        with torch.no_grad():  # its parameters require grad
            y2 = njt.LayerNorm2d(8, dtype=dtype)(torch.randn(2, 8, 5, 7, dtype=dtype))
    name = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    assert emu.specs == [f"op=layernorm shape=3,8,5,7 dtype={name} normalized_dims=0 "
                         "affine=both eps=1e-06"]  # one kernel for both batches
    (k1, xp, yp, wp, bp, batch, eps), second = emu.launches
    assert (xp, yp, wp, bp) == (x.data_ptr(), y.data_ptr(), w.data_ptr(), b.data_ptr())
    assert batch == 3 and second[5] == 2 and eps == pytest.approx(1e-6) and second[0] == k1
    assert y.is_contiguous() and y.shape == x.shape and y2.shape == (2, 8, 5, 7)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(y.double(), float64_reference(x, w, b, 1e-6), rtol=tol, atol=tol)


def test_weight_only_and_no_affine_are_their_own_kernels(emu):
    x = torch.randn(2, 4, 3)
    njt.layer_norm_channels(x, torch.randn(4), None, 1e-5)
    njt.layer_norm_channels(x)
    assert [s.split(" affine=")[1] for s in emu.specs] == ["weight eps=1e-05", "none eps=1e-06"]


def test_channels_last_reads_in_place_and_other_strides_fall_back(emu):
    # channels_last: the layout=nhwc kernel on the input's own memory, the result channels last.
    x = torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)
    w, b = torch.randn(8), torch.randn(8)
    y = njt.layer_norm_channels(x, w, b)
    assert len(emu.launches) == 1 and "layout=nhwc" in emu.specs[-1], emu.specs
    assert emu.launches[0][1] == x.data_ptr()
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    torch.testing.assert_close(y, timm_layer_norm_2d(x, w, b, 1e-6), rtol=1e-5, atol=1e-5)
    # Any other stride falls back, naming it.
    s = torch.randn(2, 8, 4, 8)[..., ::2]
    with pytest.warns(njt.NormjitFallbackWarning, match=r"layer_norm_channels: non-contiguous "
                                                        r"input \(shape \[2, 8, 4, 4\]"):
        y = njt.layer_norm_channels(s, w, b)
    assert torch.equal(y, timm_layer_norm_2d(s, w, b, 1e-6)) and len(emu.launches) == 1
    emu.launches.clear()
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    with torch.no_grad():  # inference of a tensor that requires grad launches
        njt.layer_norm_channels(x, w, b)
    assert len(emu.launches) == 1


def test_patched_timm_layer_launches_channels_last_too_and_falls_back_to_its_own_forward(
        emu, timm_module):
    layer = timm_module.LayerNorm2d(8)
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    layer.requires_grad_(False)
    x = torch.randn(2, 8, 3, 3)
    want = layer(x)
    njt.patch(layer)
    with torch.no_grad():
        got = layer(x)
    assert len(emu.launches) == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    y = layer(x.to(memory_format=torch.channels_last))  # the nhwc kernel, in place
    assert len(emu.launches) == 2 and "layout=nhwc" in emu.specs[-1]
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    with pytest.warns(njt.NormjitFallbackWarning, match="non-contiguous"):
        y = layer(torch.randn(2, 8, 3, 6)[..., ::2])  # timm's own forward
    assert len(emu.launches) == 2


def test_compile_traces_the_op_without_graph_breaks(emu):
    w, b = torch.randn(8), torch.randn(8)
    fn = torch.compile(lambda x: njt.layer_norm_channels(x, w, b, 1e-6) * 2, fullgraph=True,
                       backend="aot_eager")
    x = torch.randn(2, 8, 3, 3)
    y = fn(x)
    assert len(emu.launches) == 1
    torch.testing.assert_close(y, 2 * float64_reference(x, w, b, 1e-6).float(), rtol=1e-5,
                               atol=1e-5)


def test_custom_op_and_fake_implementation(quiet):
    torch.library.opcheck(torch.ops.normjit.layer_norm_channels.default,
                          (torch.randn(2, 6, 5), torch.randn(6), torch.randn(6), 1e-6),
                          test_utils=("test_schema", "test_faketensor"))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        y = torch.ops.normjit.layer_norm_channels(torch.empty(2, 6, 4, 4), None, None, 1e-6)
    assert y.shape == (2, 6, 4, 4) and y.is_contiguous()


@pytest.mark.parametrize("spec", [
    _ops._channels_spec("layernorm", (32, 96, 56, 56), 0, torch.float32, True, True, 1e-6),
    _ops._channels_spec("layernorm", (1, 768, 7, 7), 0, torch.bfloat16, True, True, 1e-6),
    _ops._channels_spec("layernorm", (2, 256, 64, 64), 0, torch.float16, True, False, 1e-6),
    _ops._channels_spec("layernorm", (3, 5, 7, 3, 2), 0, torch.float32, False, False, 1e-5),
], ids=["convnext-stem", "convnext-head", "sam-neck", "3d-odd"])
def test_the_spec_texts_it_prepares_compile(spec, tmp_path):
    """What layer_norm_channels hands to normjit_prepare is a spec the library compiles."""
    try:
        engine = normjit.Engine(cache_dir=str(tmp_path))
    except ImportError as e:
        pytest.skip(f"libnormjit.so is not loadable: {e}")
    with engine:
        assert engine.precompile(spec, arch="sm_90") is True


class GroupNormLayerNorm2d(torch.nn.GroupNorm):
    """The LayerNorm2d of many repositories built on nn.GroupNorm with one group: C and the
    positions normalized together, not C at each position."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__(1, num_channels, eps=eps, affine=affine)


GroupNormLayerNorm2d.__name__ = GroupNormLayerNorm2d.__qualname__ = "LayerNorm2d"


class SpecRecorder:
    """prepare records the spec texts; launches write nothing."""

    def __init__(self):
        self.specs = []

    def prepare(self, spec):
        self.specs.append(spec)
        return 0x7F0000001000 + 0x100 * len(self.specs)

    def launch(self, *args):
        return 0


def test_patch_takes_a_layer_norm_2d_built_on_group_norm_for_a_group_norm(monkeypatch, quiet):
    """Its class name is LayerNorm2d, but it computes GroupNorm of one group: patched as a
    GroupNorm, it launches groupnorm groups=1, not the channel LayerNorm, and on CPU its result
    is the layer's own."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), GroupNormLayerNorm2d(8))
    with torch.no_grad():
        for p in model[1].parameters():
            p.normal_()
    x = torch.randn(2, 3, 4, 5)
    with torch.no_grad():
        before = model(x)
    report = njt.patch(model)
    assert [name for name, _ in report.replaced] == ["1"], report
    with torch.no_grad():
        torch.testing.assert_close(model(x), before)
    recorder = SpecRecorder()
    with launch_path_into(monkeypatch, recorder), torch.no_grad():
        model(x)
    assert recorder.specs == ["op=groupnorm shape=2,8,4,5 dtype=f32 groups=1 affine=both "
                              "eps=1e-05"], recorder.specs
