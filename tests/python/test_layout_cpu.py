"""Channels-last inputs of the channel ops (group_norm, rms_norm_channels, and the modules that
call them) without a GPU: which inputs count as channels last, the spec texts they prepare
(layout=nhwc) and that those compile for sm_90, and, with the library emulated on host memory,
that a channels-last input is launched in place (its own pointer: no copy) and its result
keeps the memory format, a contiguous input is unchanged, and other strides fall back with the
package's warning. The fake implementations promise the same layouts. Needs PyTorch; no GPU."""
import ctypes
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from normjit.torch import _ops  # noqa: E402
from conftest import launch_path_into  # noqa: E402

_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _cl(x: torch.Tensor) -> torch.Tensor:
    """x with its channels innermost, for any rank >= 3 (channels_last for 4-D)."""
    return x.movedim(1, -1).contiguous().movedim(-1, 1)


@pytest.mark.parametrize("make, expected", [
    (lambda: torch.randn(2, 8, 5, 7).to(memory_format=torch.channels_last), True),
    (lambda: torch.randn(2, 8, 3, 5, 7).to(memory_format=torch.channels_last_3d), True),
    (lambda: _cl(torch.randn(2, 8, 33)), True),                # [N, L, C] memory
    (lambda: _cl(torch.randn(2, 8, 2, 3, 4, 5)), True),       # any rank
    (lambda: torch.randn(2, 8, 5, 7), False),                 # contiguous
    (lambda: torch.randn(2, 8, 5, 7).transpose(2, 3), False),  # spatial dims swapped
    (lambda: _cl(torch.randn(2, 8, 5, 14))[..., ::2], False),  # a strided view
    (lambda: torch.randn(2, 8), False),                       # no spatial dims
], ids=["4d", "5d", "3d", "6d", "contiguous", "transposed", "sliced", "2d"])
def test_which_inputs_are_channels_last(make, expected):
    assert _ops._channels_last(make()) is expected


def test_empty_like_layout_keeps_channels_last_only():
    x = torch.randn(2, 8, 5, 7).to(memory_format=torch.channels_last)
    y = _ops._empty_like_layout(x)
    assert y.shape == x.shape and y.stride() == x.stride()
    assert y.is_contiguous(memory_format=torch.channels_last)
    c = torch.randn(2, 8, 5, 7)
    assert _ops._empty_like_layout(c).is_contiguous()
    # Both contiguous and channels last (one position): contiguous.
    one = torch.randn(2, 8, 1, 1).to(memory_format=torch.channels_last)
    assert _ops._empty_like_layout(one).is_contiguous()
    assert _ops._empty_like_layout(x, torch.float16).dtype == torch.float16


@pytest.mark.parametrize("spec", [
    _ops._channels_spec("groupnorm", (2, 320, 64, 64), 32, torch.float16, True, True, 1e-5,
                        nhwc=True),
    _ops._channels_spec("groupnorm", (1, 96, 3, 5, 7), 3, torch.bfloat16, False, False, 1e-6,
                        nhwc=True),
    _ops._channels_spec("rmsnorm", (8, 96, 56, 56), 0, torch.float32, True, False, 1e-6,
                        nhwc=True),
], ids=["gn-sd", "gn-3d", "rms-convnext"])
def test_the_nhwc_spec_texts_it_prepares_compile(spec, tmp_path):
    assert spec.endswith(" layout=nhwc")
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        assert engine.precompile(spec, arch="sm_90") is True


def test_a_contiguous_input_keeps_todays_spec_text():
    spec = _ops._channels_spec("groupnorm", (2, 64, 8, 8), 8, torch.float32, True, True, 1e-5)
    assert "layout" not in spec


# ---------------------------------------------------------------------------------------
# The library emulated: CPU tensors take the launch path; the emulator reads x in the memory
# order the spec names and writes y in it.
# ---------------------------------------------------------------------------------------

def memory(pointer, n, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * (n * size)).from_address(pointer), dtype=dtype)


class Emulator:
    def __init__(self):
        self.specs, self.launches, self.by_handle = [], [], {}

    def prepare(self, spec):
        self.specs.append(spec)
        handle = 0x7F0000002000 + 0x100 * len(self.specs)
        fields = dict(f.split("=", 1) for f in spec.split())
        self.by_handle[handle] = {
            "op": fields["op"], "shape": [int(s) for s in fields["shape"].split(",")],
            "groups": int(fields.get("groups", 0)), "dtype": _DT[fields["dtype"]],
            "nhwc": fields.get("layout") == "nhwc", "eps": float(fields["eps"])}
        return handle

    def launch(self, kernel, x, y, weight, bias, batch, eps, stream):
        self.launches.append(dict(kernel=kernel, x=x, y=y, batch=batch))
        s = self.by_handle[kernel]
        shape = [batch] + s["shape"][1:]
        c = shape[1]
        n = 1
        for d in shape:
            n *= d
        if s["nhwc"]:
            physical = shape[:1] + shape[2:] + [c]
            xd = memory(x, n, s["dtype"]).double().view(physical).movedim(-1, 1)
        else:
            xd = memory(x, n, s["dtype"]).double().view(shape)
        w = memory(weight, c, s["dtype"]).double() if weight is not None else None
        b = memory(bias, c, s["dtype"]).double() if bias is not None else None
        if s["op"] == "groupnorm":
            yd = F.group_norm(xd, s["groups"], w, b, eps)
        else:
            yd = xd * torch.rsqrt(xd.square().mean(1, keepdim=True) + eps)
            if w is not None:
                yd = yd * w.view(1, c, *([1] * (len(shape) - 2)))
        out = yd.movedim(1, -1) if s["nhwc"] else yd
        memory(y, n, s["dtype"]).copy_(out.reshape(-1))
        return 0


@pytest.fixture
def emu(monkeypatch):
    e = Emulator()
    with launch_path_into(monkeypatch, e, clear_warned=True):
        yield e


@pytest.mark.parametrize("shape, groups", [((2, 32, 7, 9), 8), ((2, 96, 3, 5, 7), 3),
                                           ((3, 12, 33), 4), ((1, 65, 1, 2), 5)],
                         ids=["4d", "5d", "3d", "65"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm_reads_channels_last_in_place_and_keeps_it(emu, shape, groups, dtype):
    x = _cl(torch.randn(shape).to(dtype))
    w, b = torch.randn(shape[1]).to(dtype), torch.randn(shape[1]).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        y = njt.group_norm(x, groups, w, b, 1e-5)
    assert emu.specs[-1].endswith(" layout=nhwc"), emu.specs[-1]
    launch = emu.launches[-1]
    assert launch["x"] == x.data_ptr(), "x launched where it lies: no copy"
    assert launch["batch"] == shape[0]
    assert y.stride() == x.stride(), "the result keeps the input's memory format"
    assert _ops._channels_last(y)
    ref = F.group_norm(x.double(), groups, w.double(), b.double(), 1e-5)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(y.double(), ref.to(dtype).double(), rtol=tol, atol=tol)
    # The module, as the function; the same call again: one kernel, the cached decision.
    with torch.no_grad():
        assert _ops._channels_last(njt.GroupNorm(groups, shape[1]).to(dtype)(x))
    count = len(emu.specs)
    njt.group_norm(x, groups, w, b, 1e-5)
    assert len(emu.specs) == count


def test_rms_norm_channels_reads_channels_last_in_place_and_keeps_it(emu):
    x = torch.randn(2, 16, 5, 7).to(memory_format=torch.channels_last)
    w = torch.randn(16)
    y = njt.rms_norm_channels(x, w, 1e-6)
    assert "op=rmsnorm" in emu.specs[-1] and emu.specs[-1].endswith(" layout=nhwc")
    assert emu.launches[-1]["x"] == x.data_ptr()
    assert y.is_contiguous(memory_format=torch.channels_last)
    ref = x.double() * torch.rsqrt(x.double().square().mean(1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y.double(), (ref * w.double().view(1, 16, 1, 1)).float().double())


def test_a_contiguous_input_is_unchanged(emu):
    x = torch.randn(2, 16, 5, 7)
    y = njt.group_norm(x, 4)
    assert "layout" not in emu.specs[-1]
    assert y.is_contiguous()
    torch.testing.assert_close(y, F.group_norm(x, 4))
    # The same shape channels last is another kernel (and another decision).
    y = njt.group_norm(x.to(memory_format=torch.channels_last), 4)
    assert emu.specs[-1].endswith(" layout=nhwc") and len(emu.specs) == 2
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_other_strides_fall_back_with_the_warning(emu):
    x = torch.randn(2, 16, 7, 5).transpose(2, 3)
    with pytest.warns(njt.NormjitFallbackWarning, match="group_norm: non-contiguous input"):
        y = njt.group_norm(x, 4)
    assert not emu.launches
    torch.testing.assert_close(y, F.group_norm(x, 4))


def test_fake_implementations_promise_the_input_layout():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(2, 16, 5, 7).to(memory_format=torch.channels_last)
        y = torch.ops.normjit.group_norm(x, 4, None, None, 1e-5)
        assert y.stride() == x.stride()
        y = torch.ops.normjit.rms_norm_channels(x, None, 1e-5)
        assert y.stride() == x.stride()
        c = torch.empty(2, 16, 5, 7)
        assert torch.ops.normjit.group_norm(c, 4, None, None, 1e-5).is_contiguous()
        # The training ops: y in the input's layout, the statistics contiguous.
        y, mean, rstd = torch.ops.normjit.group_norm_train(x, 4, None, None, 1e-5)
        assert y.stride() == x.stride() and rstd.is_contiguous() and rstd.shape == (2, 4, 1, 1, 1)
        y, rstd = torch.ops.normjit.rms_norm_channels_train(x, None, 1e-5)
        assert y.stride() == x.stride() and rstd.shape == (2, 1, 5, 7)
        y, _, _ = torch.ops.normjit.layer_norm_channels_train(c, None, None, 1e-5)
        assert y.is_contiguous()


def test_a_fallback_inside_the_op_keeps_the_layout_the_fake_promised():
    # On CPU the op itself falls back (PyTorch computes); its result is laid out as promised.
    x = torch.randn(2, 16, 5, 7).to(memory_format=torch.channels_last)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.ops.normjit.group_norm(x, 4, None, None, 1e-5)
    assert y.stride() == x.stride()
    torch.testing.assert_close(y, F.group_norm(x, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, _, _ = torch.ops.normjit.group_norm_train(x, 4, None, None, 1e-5)
    assert y.stride() == x.stride()
    torch.testing.assert_close(y, F.group_norm(x, 4))
