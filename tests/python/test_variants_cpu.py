"""normjit.torch's variants of issue 18 where there is no GPU: add_rms_norm, add_layer_norm,
the keyword-only arguments of rms_norm and layer_norm (weight_offset, out_dtype with fp8 and a
scale, return_stats), parameters of another dtype than the input, strided rows. On CPU tensors
every call falls back to the PyTorch expression its docstring gives, with one warning per reason;
argument errors name the argument and its value; the custom ops' fake implementations give the
shapes and dtypes of the real ones. With the engine and the launch stubbed (CPU tensors then
take the launch path, nothing is launched), what reaches the library is checked: the spec texts
(which compile for sm_90 here), the pointers (a strided view is passed as it is, no copy), the
row strides and the outputs. Needs PyTorch; no GPU."""
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

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
LOW = [torch.float16, torch.bfloat16]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


# ---------------------------------------------------------------------------------------
# References, written out here independently of normjit.torch (float64)
# ---------------------------------------------------------------------------------------

def ref_norm(op, x, k, weight=None, bias=None, eps=1e-6, offset=0.0):
    """(normalized * (offset + weight) + bias, mean, rstd) in float64, from x as given."""
    xd = x.double()
    dims = tuple(range(x.dim() - k, x.dim()))
    if op == "rms":
        mean = None
        rstd = torch.rsqrt(xd.pow(2).mean(dims, keepdim=True) + eps)
        n = xd * rstd
    else:
        mean = xd.mean(dims, keepdim=True)
        rstd = torch.rsqrt((xd - mean).pow(2).mean(dims, keepdim=True) + eps)
        n = (xd - mean) * rstd
    if weight is not None:
        n = n * (offset + weight.double())
    if bias is not None:
        n = n + bias.double()
    return n, mean, rstd


def fp8(n, dtype, scale):
    big = torch.finfo(dtype).max
    return (n * scale).clamp(-big, big).to(dtype)


def close(got, ref, dtype):
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------
# Fallback on CPU tensors: the documented expression, one warning per reason
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_weight_offset_out_dtype_and_stats_on_cpu(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64).to(dtype)
    w = (0.1 * torch.randn(64)).to(dtype)
    with pytest.warns(njt.NormjitFallbackWarning, match=r"rms_norm: input on cpu"):
        y = njt.rms_norm(x, 64, w, 1e-6, weight_offset=1.0)
    n, _, rstd = ref_norm("rms", x, 1, w, eps=1e-6, offset=1.0)
    assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    close(y, n, dtype)
    y32, r = njt.rms_norm(x, (64,), w, 1e-6, out_dtype=torch.float32, return_stats=True)
    assert y32.dtype == torch.float32 and r.dtype == torch.float32 and r.shape == (2, 3, 1)
    close(y32, ref_norm("rms", x, 1, w, eps=1e-6)[0], torch.float32)
    close(r, rstd, torch.float32)


@pytest.mark.parametrize("out", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_fp8_output_scales_and_saturates_on_cpu(out):
    torch.manual_seed(1)
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    w = torch.randn(256, dtype=torch.bfloat16)
    big = torch.finfo(out).max
    for s in (0.5, big):  # big: every value of magnitude > 1 beyond the range, saturated
        scale = torch.tensor([s])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
            y = njt.rms_norm(x, 256, w, 1e-6, out_dtype=out, scale=scale)
        assert y.dtype == out and y.shape == x.shape
        assert torch.isfinite(y.float()).all()
        expected = fp8(ref_norm("rms", x, 1, w, eps=1e-6)[0].float(), out, s)
        assert (y.float() - expected.float()).abs().max() <= 2 * torch.finfo(out).eps * max(
            expected.float().abs().max().item(), 1.0)
        if s == big:
            assert y.float().abs().max().item() == big


def test_layer_norm_stats_match_native_layer_norm_on_cpu(quiet):
    torch.manual_seed(2)
    x = torch.randn(3, 5, 4, 16)
    w, b = torch.randn(4, 16), torch.randn(4, 16)
    y, mean, rstd = njt.layer_norm(x, (4, 16), w, b, 1e-5, return_stats=True)
    ty, tmean, trstd = torch.ops.aten.native_layer_norm(x, [4, 16], w, b, 1e-5)
    assert mean.shape == tmean.shape == rstd.shape == trstd.shape == (3, 5, 1, 1)
    assert mean.dtype == rstd.dtype == torch.float32
    torch.testing.assert_close(y, ty)
    torch.testing.assert_close(mean, tmean)
    torch.testing.assert_close(rstd, trstd)
    # bf16 input: statistics still float32 (as native_layer_norm on CUDA), y bf16
    y, mean, rstd = njt.layer_norm(x.bfloat16(), (4, 16), return_stats=True)
    assert y.dtype == torch.bfloat16 and mean.dtype == rstd.dtype == torch.float32
    y, rstd = njt.rms_norm(x, (16,), return_stats=True)
    assert rstd.shape == (3, 5, 4, 1)


@pytest.mark.parametrize("op", ["add_rms_norm", "add_layer_norm"])
@pytest.mark.parametrize("dtype, rdtype", [(torch.float32, torch.float32),
                                           (torch.bfloat16, torch.bfloat16),
                                           (torch.bfloat16, torch.float32),
                                           (torch.float16, torch.float32)], ids=str)
def test_add_norm_is_the_documented_expression_on_cpu(op, dtype, rdtype, quiet):
    torch.manual_seed(3)
    x = (3 * torch.randn(5, 96)).to(dtype)
    r = (3 * torch.randn(5, 96)).to(rdtype)
    w = torch.randn(96).to(dtype)
    b = torch.randn(96).to(dtype) if op == "add_layer_norm" else None
    fn = getattr(njt, op)
    args = (w, b, 1e-5) if b is not None else (w, 1e-5)
    y, h = fn(x, r, 96, *args)
    h_ref = (x.float() + r.float()).to(rdtype)  # float32 math, one rounding
    assert torch.equal(h, h_ref) and h.dtype == rdtype
    assert y.dtype == dtype
    close(y, ref_norm("rms" if op == "add_rms_norm" else "ln", h_ref, 1, w, b, 1e-5)[0], dtype)
    # in place: h into residual, y into x, the same tensors returned
    x2, r2 = x.clone(), r.clone()
    out = fn(x2, r2, 96, *args, inplace=True)
    assert out[0] is x2 and out[1] is r2
    assert torch.equal(r2, h) and torch.equal(x2, y)


def test_one_warning_per_reason_and_function(quiet):
    x = torch.randn(2, 8)
    r = torch.randn(2, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        for _ in range(3):
            njt.add_rms_norm(x, r, 8)
            njt.rms_norm(x, 8, torch.ones(8), weight_offset=1.0)
    texts = [str(w.message) for w in caught if issubclass(w.category, njt.NormjitFallbackWarning)]
    assert len(texts) == 2, texts
    assert any(t.startswith("normjit.torch.add_rms_norm: input on cpu") for t in texts)


def test_float64_is_computed_in_float64(quiet):
    x = torch.randn(3, 16, dtype=torch.float64)
    r = torch.randn(3, 16, dtype=torch.float64)
    y, h = njt.add_rms_norm(x, r, 16, torch.ones(16, dtype=torch.float64), 1e-6)
    assert y.dtype == h.dtype == torch.float64
    torch.testing.assert_close(y, ref_norm("rms", x + r, 1, eps=1e-6)[0])


# ---------------------------------------------------------------------------------------
# Parameters of another dtype: PyTorch's result dtype, or PyTorch's exception
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("xd", DTYPES, ids=str)
@pytest.mark.parametrize("wd", DTYPES, ids=str)
def test_mixed_dtypes_on_cpu_are_pytorchs(xd, wd, quiet):
    """weight/bias of another dtype: on CPU tensors, PyTorch's result (its dtype: the
    input's) or PyTorch's exception, the variant arguments included; normjit's rule for CUDA
    (rms_norm: any; layer_norm: what CUDA's F.layer_norm takes) is checked against PyTorch on
    the GPU machine (test_variants_gpu.py)."""
    x = torch.randn(2, 32).to(xd)
    w, b = torch.randn(32).to(wd), torch.randn(32).to(wd)
    rms = F.rms_norm(x, (32,), w, 1e-6)
    assert rms.dtype == xd and _ops._params_ok("rms_norm", x, w, None)
    assert torch.equal(njt.rms_norm(x, 32, w, 1e-6), rms)
    assert njt.rms_norm(x, 32, w, 1e-6, weight_offset=1.0).dtype == xd
    try:
        expected = F.layer_norm(x, (32,), w, b)
    except RuntimeError as e:
        expected = e
    if isinstance(expected, torch.Tensor):
        assert expected.dtype == xd
        assert torch.equal(njt.layer_norm(x, (32,), w, b), expected)
        y, _, _ = njt.layer_norm(x, (32,), w, b, return_stats=True)
        close(y, ref_norm("ln", x, 1, w, b, 1e-5)[0], xd)
    else:
        for kwargs in ({}, {"return_stats": True}, {"out_dtype": torch.float32}):
            with pytest.raises(RuntimeError) as ours:
                njt.layer_norm(x, (32,), w, b, **kwargs)
            assert str(ours.value) == str(expected)


def test_weight_and_bias_of_two_dtypes_fall_back():
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    assert not _ops._params_ok("add_layer_norm", x, torch.ones(8), torch.ones(8, dtype=x.dtype))
    assert not _ops._params_ok("rms_norm", x, torch.ones(8, dtype=torch.float64), None)
    assert _ops._params_ok("add_layer_norm", x, torch.ones(8, dtype=torch.float16),
                           torch.ones(8, dtype=torch.float16))
    assert not _ops._params_ok("group_norm", x, torch.ones(8), None)


# ---------------------------------------------------------------------------------------
# Argument errors
# ---------------------------------------------------------------------------------------

X = lambda: torch.randn(2, 8)  # noqa: E731


@pytest.mark.parametrize("call, error, match", [
    (lambda: njt.add_rms_norm(X(), torch.randn(2, 7), 8), ValueError,
     r"add_rms_norm: residual has shape \[2, 7\]; expected the input's, \[2, 8\]"),
    (lambda: njt.add_rms_norm(X(), torch.randn(2, 8, dtype=torch.float16), 8), ValueError,
     r"residual has dtype torch.float16; expected the input's \(torch.float32\) or "
     r"torch.float32"),
    (lambda: njt.add_layer_norm(X().bfloat16(), torch.randn(2, 8, dtype=torch.float16), 8),
     ValueError, r"residual has dtype torch.float16"),
    (lambda: njt.add_rms_norm(X(), torch.randn(2, 8, device="meta"), 8), ValueError,
     r"residual is on meta, the input on cpu"),
    (lambda: njt.add_layer_norm(X(), [0.0] * 8, 8), TypeError,
     r"residual must be a torch.Tensor, not list"),
    (lambda: njt.rms_norm(X(), 8, out_dtype=torch.int8), ValueError,
     r"out_dtype torch.int8 is not one of torch.float32"),
    (lambda: njt.layer_norm(X(), 8, out_dtype="bf16"), TypeError,
     r"out_dtype must be a torch.dtype or None, not str \('bf16'\)"),
    (lambda: njt.rms_norm(X(), 8, out_dtype=E4M3), ValueError,
     r"out_dtype torch.float8_e4m3fn needs scale"),
    (lambda: njt.add_rms_norm(X(), X(), 8, out_dtype=E5M2), ValueError,
     r"add_rms_norm: out_dtype torch.float8_e5m2 needs scale"),
    (lambda: njt.rms_norm(X(), 8, scale=torch.ones(1)), ValueError,
     r"scale is for an fp8 out_dtype .*, and out_dtype is None; pass scale=None"),
    (lambda: njt.layer_norm(X(), 8, out_dtype=torch.bfloat16, scale=torch.ones(1)), ValueError,
     r"and out_dtype is torch.bfloat16"),
    (lambda: njt.rms_norm(X(), 8, out_dtype=E4M3, scale=torch.ones(1, dtype=torch.float16)),
     ValueError, r"scale has dtype torch.float16; expected torch.float32"),
    (lambda: njt.rms_norm(X(), 8, out_dtype=E4M3, scale=torch.ones(2)), ValueError,
     r"scale has shape \[2\]; expected one element"),
    (lambda: njt.rms_norm(X(), 8, out_dtype=E4M3, scale=torch.ones(1, device="meta")),
     ValueError, r"scale is on meta, the input on cpu"),
    (lambda: njt.rms_norm(X(), 8, out_dtype=E4M3, scale=0.5), TypeError,
     r"scale must be a torch.Tensor, not float"),
    (lambda: njt.rms_norm(X(), 8, weight_offset=1.0), ValueError,
     r"rms_norm: weight_offset 1.0 needs a weight"),
    (lambda: njt.add_layer_norm(X(), X(), 8, None, torch.ones(8), weight_offset=1.0),
     ValueError, r"weight_offset 1.0 needs a weight"),
    (lambda: njt.rms_norm(X(), 8, torch.ones(8), weight_offset="1"), TypeError,
     r"weight_offset must be a float, not str \('1'\)"),
    (lambda: njt.rms_norm(X(), 8, torch.ones(8), weight_offset=True), TypeError,
     r"weight_offset must be a float, not bool"),
    (lambda: njt.rms_norm(X(), 8, torch.ones(8), weight_offset=float("nan")), ValueError,
     r"rms_norm: weight_offset must be finite, not nan"),
    (lambda: njt.add_rms_norm(X(), X(), 8, torch.ones(8), weight_offset=-float("inf")),
     ValueError, r"add_rms_norm: weight_offset must be finite, not -inf"),
    (lambda: njt.add_rms_norm(X(), X(), 8, out_dtype=torch.bfloat16, inplace=True), ValueError,
     r"inplace=True writes y into x, so out_dtype must be None or the input's dtype "
     r"\(torch.float32\), not torch.bfloat16"),
    (lambda: njt.add_rms_norm(X(), X(), 8, torch.ones(7)), ValueError,
     r"weight has shape \[7\]; expected \[8\]"),
    (lambda: njt.add_layer_norm(X(), X(), 9), ValueError,
     r"normalized_shape \[9\] is not the trailing shape of the input, \[2, 8\]"),
])
def test_bad_variant_arguments_name_argument_and_value(call, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)  # raised before any fallback
        with pytest.raises(error, match=match):
            call()


def test_signatures():
    import inspect
    for fn in (njt.rms_norm, njt.layer_norm):
        params = inspect.signature(fn).parameters
        for name in ("weight_offset", "out_dtype", "scale", "return_stats"):
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fn, name)
    for fn in (njt.add_rms_norm, njt.add_layer_norm):
        params = inspect.signature(fn).parameters
        assert list(params)[:4] == ["x", "residual", "normalized_shape", "weight"]
        for name in ("weight_offset", "out_dtype", "scale", "inplace"):
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fn, name)
    assert {"add_rms_norm", "add_layer_norm"} <= set(njt.__all__) & set(_ops.__all__)


# ---------------------------------------------------------------------------------------
# Custom ops: schemas, fake implementations
# ---------------------------------------------------------------------------------------

OPS = [
    ("rms_norm_ex", lambda: (torch.randn(3, 8, dtype=torch.bfloat16), [8], torch.randn(8), 1e-6,
                             1.0, None, None)),
    ("rms_norm_ex", lambda: (torch.randn(3, 8), [8], torch.randn(8), 1e-6, 0.0, E4M3,
                             torch.tensor([2.0]))),
    ("rms_norm_stats", lambda: (torch.randn(2, 3, 8), [3, 8], None, 1e-6, 0.0, torch.float16,
                                None)),
    ("layer_norm_ex", lambda: (torch.randn(3, 8, dtype=torch.float16), [8], torch.randn(8),
                               torch.randn(8), 1e-5, 0.0, torch.float32, None)),
    ("layer_norm_stats", lambda: (torch.randn(4, 2, 8), [8], torch.randn(8), None, 1e-5, 1.0,
                                  E5M2, torch.tensor(0.25))),
    ("add_rms_norm", lambda: (torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(3, 8), [8],
                              torch.randn(8, dtype=torch.bfloat16), 1e-6, 0.0, None, None)),
    ("add_rms_norm", lambda: (torch.randn(3, 8), torch.randn(3, 8), [8], None, 1e-6, 0.0, E4M3,
                              torch.tensor([1.0]))),
    ("add_rms_norm_inplace", lambda: (torch.randn(3, 8), torch.randn(3, 8), [8], torch.randn(8),
                                      1e-6, 1.0)),
    ("add_layer_norm", lambda: (torch.randn(3, 8, dtype=torch.float16), torch.randn(3, 8), [8],
                                torch.randn(8), torch.randn(8), 1e-5, 0.0, None, None)),
    ("add_layer_norm_inplace", lambda: (torch.randn(2, 3, 8), torch.randn(2, 3, 8), [3, 8],
                                        None, None, 1e-5, 0.0)),
]


@pytest.mark.parametrize("op, args", OPS, ids=[op for op, _ in OPS])
def test_custom_ops_and_fake_implementations(op, args, quiet):
    torch.library.opcheck(getattr(torch.ops.normjit, op).default, args(),
                          test_utils=("test_schema", "test_faketensor"))


def test_fake_shapes_and_dtypes_under_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    ops = torch.ops.normjit
    with FakeTensorMode():
        x = torch.empty(7, 4, 128, dtype=torch.bfloat16)
        r = torch.empty(7, 4, 128, dtype=torch.float32)
        w = torch.empty(128, dtype=torch.float32)
        s = torch.empty(1, dtype=torch.float32)
        y = ops.rms_norm_ex(x, [128], w, 1e-6, 1.0, E4M3, s)
        assert y.shape == x.shape and y.dtype == E4M3
        y, rstd = ops.rms_norm_stats(x, [4, 128], w.new_empty(4, 128), 1e-6, 0.0, None, None)
        assert y.dtype == torch.bfloat16 and rstd.shape == (7, 1, 1) and rstd.dtype == torch.float32
        y, mean, rstd = ops.layer_norm_stats(x, [128], w, w, 1e-5, 0.0, torch.float32, None)
        assert y.dtype == torch.float32 and mean.shape == rstd.shape == (7, 4, 1)
        y, h = ops.add_rms_norm(x, r, [128], w, 1e-6, 0.0, None, None)
        assert y.dtype == torch.bfloat16 and h.dtype == torch.float32 and h.shape == r.shape
        y, h = ops.add_layer_norm(x, x, [128], None, None, 1e-5, 0.0, E5M2, s)
        assert y.dtype == E5M2 and h.dtype == torch.bfloat16
        assert ops.add_rms_norm_inplace(x, r, [128], w, 1e-6, 0.0) is None


# ---------------------------------------------------------------------------------------
# What reaches the library (engine and launch stubbed)
# ---------------------------------------------------------------------------------------

class Stub:
    """Records the spec texts prepared and the launches (function, arguments); launches
    return `status` (0: OK) and write nothing."""

    def __init__(self):
        self.specs, self.launches, self.status = [], [], 0

    def prepare(self, spec):
        self.specs.append(spec)
        return 0x7F0000001000 + 0x100 * len(self.specs)

    def launch(self, *args):
        self.launches.append(("launch", args))
        return self.status

    def launch_ex(self, *args):
        self.launches.append(("launch_ex", args))
        return self.status

    def ex(self, i=-1):
        """The last launch_ex's arguments by name."""
        kind, args = self.launches[i]
        assert kind == "launch_ex", kind
        names = ("kernel", "x", "y", "weight", "bias", "batch", "eps", "residual",
                 "residual_out", "scale", "mean", "rstd", "stream", "rows")
        return dict(zip(names, args))


@pytest.fixture
def stub(monkeypatch):
    """CPU tensors take the launch path (as tests/python/bench_host_path.py does)."""
    s = Stub()
    real_why_not = _ops._why_not

    def why_not_on_cpu(x, *args):
        why = real_why_not(x, *args)
        return None if why == "device" else why

    monkeypatch.setattr(_ops, "_why_not", why_not_on_cpu)
    with launch_path_into(monkeypatch, s, take_cpu=False):
        yield s


def qkv_views(tokens=5, heads=4, kv_heads=2, dim=128, dtype=torch.bfloat16):
    """The q and k slices of a qkv projection, viewed [tokens, heads, dim] (no copy)."""
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, dtype=dtype)
    q = qkv[:, :heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    return qkv, q, k


def test_plain_calls_keep_normjit_launch(stub):
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    w = torch.randn(64, dtype=torch.bfloat16)
    y = njt.rms_norm(x, 64, w, 1e-6)
    assert stub.launches[-1][0] == "launch" and y.shape == x.shape and y.dtype == x.dtype
    assert stub.specs == ["op=rmsnorm shape=3,64 dtype=bf16 normalized_dims=1 affine=weight "
                          "eps=1e-06"]


def test_mixed_parameters_reach_the_library_as_param_dtype(stub):
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    y = njt.rms_norm(x, 64, torch.randn(64), 1e-6)
    assert y.dtype == torch.bfloat16 and y.is_contiguous()
    assert stub.specs[-1].endswith("eps=1e-06 param_dtype=f32")
    a = stub.ex()
    assert a["x"] == x.data_ptr() and a["y"] == y.data_ptr() and a["rows"] is None
    y = njt.layer_norm(x.half(), 64, torch.randn(64), torch.randn(64))
    assert y.dtype == torch.float16
    assert stub.specs[-1] == ("op=layernorm shape=3,64 dtype=f16 normalized_dims=1 affine=both "
                              "eps=1e-05 param_dtype=f32")


def test_every_axis_reaches_the_library(stub):
    x = torch.randn(6, 256, dtype=torch.bfloat16)
    r = torch.randn(6, 256)
    w = torch.randn(256)
    scale = torch.tensor([0.5])
    y, h = njt.add_rms_norm(x, r, 256, w, 1e-6, weight_offset=1.0, out_dtype=E4M3, scale=scale)
    assert stub.specs[-1] == ("op=rmsnorm shape=6,256 dtype=bf16 normalized_dims=1 "
                              "affine=weight eps=1e-06 param_dtype=f32 out_dtype=e4m3 "
                              "residual=f32 weight_offset=1.0")
    a = stub.ex()
    assert y.dtype == E4M3 and h.dtype == torch.float32 and y.shape == h.shape == x.shape
    assert (a["x"], a["y"], a["weight"], a["bias"], a["residual"], a["residual_out"],
            a["scale"], a["mean"], a["rstd"], a["batch"], a["eps"]) == (
        x.data_ptr(), y.data_ptr(), w.data_ptr(), None, r.data_ptr(), h.data_ptr(),
        scale.data_ptr(), None, None, 6, 1e-6)
    y, mean, rstd = njt.layer_norm(x, 256, w, w, return_stats=True, out_dtype=torch.float32)
    assert stub.specs[-1].endswith("eps=1e-05 param_dtype=f32 out_dtype=f32 save_stats=true")
    a = stub.ex()
    assert a["mean"] == mean.data_ptr() and a["rstd"] == rstd.data_ptr()
    assert mean.shape == rstd.shape == (6, 1) and y.dtype == torch.float32
    y, rstd = njt.rms_norm(x, 256, return_stats=True)
    a = stub.ex()
    assert a["mean"] is None and a["rstd"] == rstd.data_ptr()


def test_in_place_writes_x_and_residual(stub):
    x = torch.randn(4, 128, dtype=torch.float16)
    r = torch.randn(4, 128, dtype=torch.float16)
    out = njt.add_layer_norm(x, r, 128, torch.randn(128, dtype=torch.float16),
                             torch.randn(128, dtype=torch.float16), inplace=True)
    a = stub.ex()
    assert out[0] is x and out[1] is r
    assert (a["x"], a["y"], a["residual"], a["residual_out"]) == (
        x.data_ptr(), x.data_ptr(), r.data_ptr(), r.data_ptr())
    assert stub.specs[-1].endswith("eps=1e-05 residual=f16")


def test_one_kernel_per_shape_class_and_one_decision_per_kind_of_call(stub):
    w = torch.randn(128)
    for tokens in (1, 7, 128, 1000):
        njt.add_rms_norm(torch.randn(tokens, 128, dtype=torch.bfloat16),
                         torch.randn(tokens, 128), 128, w, 1e-6)
        assert stub.ex()["batch"] == tokens
    assert len(stub.specs) == 1
    calls = len(_ops._calls)
    x, r = torch.randn(7, 128, dtype=torch.bfloat16), torch.randn(7, 128)
    njt.add_rms_norm(x, r, 128, w, 1e-6)
    assert len(_ops._calls) == calls  # a hit: nothing decided again


@pytest.mark.parametrize("which", ["q", "k"])
def test_per_head_slices_of_a_qkv_tensor_are_read_in_place(stub, which):
    """[tokens, heads, 128] views of a qkv projection: two levels of row strides, x's
    pointer is the view's own (inside qkv: no copy), y contiguous."""
    qkv, q, k = qkv_views()
    v = q if which == "q" else k
    w = torch.randn(128, dtype=torch.bfloat16)
    y = njt.rms_norm(v, 128, w, 1e-6)
    a = stub.ex()
    row = qkv.stride(0)
    assert a["x"] == v.data_ptr() and qkv.data_ptr() <= a["x"] < qkv.data_ptr() + qkv.nbytes
    assert a["rows"] == (v.shape[1], row, 128, 0, 0, 0, 0, 0, 0)
    assert a["batch"] == v.shape[0] * v.shape[1]
    assert y.is_contiguous() and y.shape == v.shape and y.dtype == v.dtype


def test_row_strides_of_common_views(stub):
    # a slice of a wider tensor: one level
    wide = torch.randn(6, 3 * 64)
    njt.layer_norm(wide[:, 64:128], 64)
    assert stub.ex()["rows"] == (1, 192, 0, 0, 0, 0, 0, 0, 0)
    # [batch, tokens, 3, heads, dim] -> q [batch, tokens, heads, dim]: batch and tokens
    # collapse into the outer level, heads is the inner one
    qkv5 = torch.randn(2, 5, 3, 4, 32)
    njt.rms_norm(qkv5[:, :, 0], 32)
    assert stub.ex()["rows"] == (4, 3 * 4 * 32, 32, 0, 0, 0, 0, 0, 0)
    assert stub.ex()["batch"] == 2 * 5 * 4
    # normalized over (heads, dim) of the same view: one level
    njt.rms_norm(qkv5[:, :, 1], (4, 32))
    assert stub.ex()["rows"] == (1, 3 * 4 * 32, 0, 0, 0, 0, 0, 0, 0)
    # size-1 dims are left out
    njt.rms_norm(torch.randn(1, 4, 1, 2 * 32)[..., :32], 32)
    assert stub.ex()["rows"] == (1, 64, 0, 0, 0, 0, 0, 0, 0)


def test_strided_residual_in_place_keeps_each_tensors_strides(stub):
    qkv, q, _ = qkv_views(dtype=torch.float32)
    r_wide = torch.randn(5, 4 * 2, 128)
    r = r_wide[:, ::2]  # [5, 4, 128], heads every other row of r_wide
    x_before = q.data_ptr()
    out = njt.add_rms_norm(q, r, 128, torch.randn(128), 1e-6, inplace=True)
    a = stub.ex()
    assert out[0] is q and out[1] is r
    assert a["x"] == a["y"] == x_before and a["residual"] == a["residual_out"] == r.data_ptr()
    assert a["rows"] == (4, qkv.stride(0), 128, qkv.stride(0), 128, 8 * 128, 256, 8 * 128, 256)
    # not in place: y and h fresh and contiguous
    y, h = njt.add_rms_norm(q, r, 128, torch.randn(128), 1e-6)
    assert stub.ex()["rows"] == (4, qkv.stride(0), 128, 0, 0, 8 * 128, 256, 0, 0)
    assert y.is_contiguous() and h.is_contiguous()


@pytest.mark.parametrize("make, match", [
    (lambda: torch.randn(64, 32).t(), r"non-contiguous input whose normalized dims are not "
                                      r"contiguous \(shape \[32, 64\], strides \[1, 32\]"),
    (lambda: torch.randn(1, 64).expand(4, 64), r"broadcasts dim 0"),
    (lambda: torch.randn(4, 6, 8, 64)[::2, ::2], r"leading dims do not collapse into two "
                                                 r"levels"),
])
def test_rows_normjit_cannot_address_fall_back(stub, make, match):
    x = make()
    with pytest.warns(njt.NormjitFallbackWarning, match=match):
        y = njt.rms_norm(x, x.shape[-1], None, 1e-6)
    assert not stub.launches
    torch.testing.assert_close(y, F.rms_norm(x, (x.shape[-1],), None, 1e-6))


def test_a_stride_the_kernel_refuses_falls_back_once(stub, monkeypatch):
    """The vector width is the library's decision: its InvalidArgumentError naming a row
    stride turns into a fallback (warned once), remembered for those strides."""
    message = ("invalid argument 'x_rows.outer' = 100: must be a multiple of 8 elements: the "
               "plan accesses 8 elements at a time, and every row must start aligned to that")
    lib = normjit._capi.library()
    monkeypatch.setattr(type(lib), "error", lambda self, status: normjit.InvalidArgumentError(
        status, "NORMJIT_ERROR_INVALID_ARGUMENT", message))
    stub.status = int(normjit.Status.ERROR_INVALID_ARGUMENT)
    x = torch.randn(4, 100)[:, :64]
    with pytest.warns(njt.NormjitFallbackWarning, match=r"x_rows.outer' = 100"):
        y = njt.rms_norm(x, 64, None, 1e-6)
    torch.testing.assert_close(y, F.rms_norm(x, (64,), None, 1e-6))
    assert len(stub.launches) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        njt.rms_norm(x, 64, None, 1e-6)
    assert len(stub.launches) == 1  # the strides' answer is remembered: no second try


def test_misaligned_views_fall_back(stub):
    x = torch.randn(4 * 64 + 1)[1:].view(4, 64)
    with pytest.warns(njt.NormjitFallbackWarning, match="16-byte aligned"):
        njt.add_rms_norm(x, torch.randn(4, 64), 64)
    assert not stub.launches


def test_other_library_errors_raise(stub, monkeypatch):
    stub.status = int(normjit.Status.ERROR_DRIVER)
    with pytest.raises(normjit.DriverError):
        njt.rms_norm(torch.randn(2, 64), 64, weight_offset=1.0, weight=torch.randn(64))


def test_compile_traces_the_variant_ops_without_graph_breaks(stub):
    """torch.compile(fullgraph=True) of a decoder-layer-like function: the variant calls are
    the custom ops in the graph (CPU tensors taking the launch path through the stub)."""
    w = torch.randn(64, dtype=torch.bfloat16)
    scale = torch.tensor([0.5])

    def layer(x, r, qkv):
        y, h = njt.add_rms_norm(x, r, 64, w, 1e-6)
        q = qkv[:, :128].view(-1, 2, 64)
        qn = njt.rms_norm(q, 64, w, 1e-6, weight_offset=1.0)
        y8 = njt.rms_norm(y, 64, w, 1e-6, out_dtype=E4M3, scale=scale)
        y2, mean, rstd = njt.layer_norm(h, 64, return_stats=True)
        x2, r2 = njt.add_layer_norm(y2.bfloat16(), h, 64, inplace=True)
        return qn, y8, mean, rstd, x2, r2

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(3, 64, dtype=torch.bfloat16)
    r = torch.randn(3, 64)
    qkv = torch.randn(3, 256, dtype=torch.bfloat16)
    torch._dynamo.reset()
    try:
        out = torch.compile(layer, fullgraph=True, backend=capture)(x, r, qkv)
    finally:
        torch._dynamo.reset()
    code = "\n".join(g.code for g in graphs)
    for op in ("add_rms_norm", "rms_norm_ex", "layer_norm_stats", "add_layer_norm_inplace"):
        assert f"normjit.{op}" in code, code
    qn, y8, mean, rstd, x2, r2 = out
    assert qn.shape == (3, 2, 64) and y8.dtype == E4M3 and mean.shape == rstd.shape == (3, 1)


@pytest.mark.parametrize("spec", [
    _ops._rows_spec("rmsnorm", (7, 4096), 1, torch.bfloat16, True, False, 1e-6, torch.float32),
    _ops._rows_spec("rmsnorm", (7, 4096), 1, torch.bfloat16, True, False, 1e-6, torch.float32,
                    E4M3, torch.float32, 1.0, False),
    _ops._rows_spec("rmsnorm", (7, 4, 128), 1, torch.float16, True, False, 1e-6, None, None,
                    torch.float16, 0.0, True),
    _ops._rows_spec("layernorm", (3, 4097), 1, torch.float16, True, True, 1e-5, torch.float32,
                    torch.float32, None, 0.0, True),
    _ops._rows_spec("layernorm", (3, 5120), 1, torch.float32, True, True, 1e-5, None, E5M2,
                    torch.float32, 1.0, True),
], ids=["param", "all-rms", "stats-residual", "ln-stats", "ln-all"])
def test_the_variant_spec_texts_it_prepares_compile(spec, tmp_path):
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        assert engine.precompile(spec, arch="sm_90") is True


# ---------------------------------------------------------------------------------------
# normjit_launch_ex from Python: the extension's launch_ex, and ctypes where it is missing
# ---------------------------------------------------------------------------------------

# kernel NULL: refused by the library (naming the kernel) before any device work
EX_ARGS = (0, 0x1000, 0x2000, None, None, 1, 1e-6, None, None, None, None, None, None, None)


def test_launch_ex_by_the_extension_returns_what_ctypes_returns():
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    from normjit import _capi
    launch_ex = _capi.launch_ex_function()
    by_ctypes = _capi._ctypes_launch_ex(_capi.library())
    assert launch_ex is normjit._launch.launch_ex
    rows = (4, 1024, 128, 0, 0, 0, 0, 0, 0)
    for args in (EX_ARGS, EX_ARGS[:13] + (rows,),
                 (0, 0x1000, 0x2000, 0x3000, 0x4000, 2**40, 1, 0x5000, 0x6000, 0x7000, 0x8000,
                  0x9000, 0xA000, rows)):
        status = launch_ex(*args)
        assert status == by_ctypes(*args) == _capi.Status.ERROR_INVALID_ARGUMENT
        assert "kernel" in _capi.library().error(status).message


@pytest.mark.parametrize("index, value, match", [
    (0, None, "kernel must be an int, not <class 'NoneType'>"),
    (1, 1.5, "x must be an int"),
    (2, None, "y must be an int, not"),
    (7, "r", "residual must be an int or None"),
    (9, b"s", "scale must be an int or None"),
    (11, [], "rstd must be an int or None"),
    (5, 1.0, "batch must be an int"),
    (6, "1e-6", "eps must be a float"),
    (12, object(), "stream must be an int or None"),
    (13, (1, 2, 3), r"rows must be None or a tuple of 9 ints"),
    (13, [1] * 9, r"rows must be None or a tuple of 9 ints"),
    (13, (1, 2, 3, 4, 5, 6, 7, 8, 9.0), "a value of rows must be an int"),
])
def test_launch_ex_by_the_extension_rejects_wrong_types(index, value, match):
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    from normjit import _capi
    args = list(EX_ARGS)
    args[index] = value
    with pytest.raises(TypeError, match=match):
        _capi.launch_ex_function()(*args)


def test_launch_ex_by_the_extension_rejects_a_wrong_count_and_unbound_use():
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    from normjit import _capi, _launch
    launch_ex = _capi.launch_ex_function()
    with pytest.raises(TypeError, match="takes 14 arguments"):
        launch_ex(*EX_ARGS[:13])
    with pytest.raises(OverflowError):
        launch_ex(*EX_ARGS[:5], 2**63, *EX_ARGS[6:])
    with pytest.raises(ValueError, match="address 0"):
        _launch.bind_ex(0, 1)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        _launch.bind_ex(1)


def test_launch_ex_through_ctypes_without_the_extension():
    """A fresh process where `import normjit._launch` fails: the ctypes function, filling a
    LaunchArgs with normjit_launch_args_init."""
    import os
    import subprocess
    import sys
    code = ("import sys; sys.modules['normjit._launch'] = None\n"
            "from normjit import _capi\n"
            "launch_ex = _capi.launch_ex_function()\n"
            "assert launch_ex.__name__ == 'launch', launch_ex\n"
            f"print(launch_ex(*{EX_ARGS[:13]!r}, (2, 64, 8, 0, 0, 0, 0, 0, 0)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == normjit.Status.ERROR_INVALID_ARGUMENT


# ---------------------------------------------------------------------------------------
# patch(): transformers' Gemma RMSNorm (a stand-in package of transformers' own code here:
# conftest.py's fake_transformers)
# ---------------------------------------------------------------------------------------

def test_patch_recognises_gemma_rms_norm(fake_transformers, stub):
    m = fake_transformers

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = m["gemma"].GemmaRMSNorm(64)
            self.b = m["gemma2"].Gemma2RMSNorm(64, eps=1e-5)
            self.c = m["gemma3"].Gemma3RMSNorm(64)
            self.d = m["other"].OtherRMSNorm(64)

    model = Model()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    before = [layer(x) for layer in (model.a, model.b, model.c, model.d)]
    report = njt.patch(model)
    assert sorted(n for n, _ in report.replaced) == ["a", "b", "c"], str(report)
    (name, cls, why), = report.skipped
    assert name == "d" and "neither LlamaRMSNorm's nor GemmaRMSNorm's" in why
    assert type(model.a).__name__ == "NormjitGemmaRMSNorm"
    y = model.b(x)  # the launch path (stubbed): Gemma's offset, x's dtype out
    assert stub.specs[-1] == ("op=rmsnorm shape=3,64 dtype=bf16 normalized_dims=1 affine=weight "
                              "eps=1e-05 param_dtype=f32 weight_offset=1.0")
    assert y.dtype == torch.bfloat16 and stub.ex()["weight"] == model.b.weight.data_ptr()
    assert njt.unpatch(model) == 3
    for layer, b in zip((model.a, model.b, model.c, model.d), before):
        assert torch.equal(layer(x), b)


@pytest.mark.parametrize("weight_dtype, x_dtype, served", [
    (torch.float32, torch.bfloat16, False),  # float32 out: the layer's own forward
    (torch.float16, torch.bfloat16, False),  # float32 out
    (torch.bfloat16, torch.bfloat16, True),
    (torch.float16, torch.float32, True),    # float32 out, x's: normjit (param_dtype=f16)
], ids=["f32-bf16", "f16-bf16", "bf16-bf16", "f16-f32"])
def test_patched_llama_rms_norm_keeps_the_dtype_of_its_result(fake_transformers, stub,
                                                              weight_dtype, x_dtype, served):
    """LlamaRMSNorm returns weight * normalized.to(x.dtype): the dtype weight and x promote to.
    Where that is not x's, the patched layer runs its own forward (the same result, with the
    warning); where it is, normjit's kernel."""
    import importlib
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    layer = llama.LlamaRMSNorm(64).to(weight_dtype)
    x = torch.randn(3, 64, dtype=x_dtype)
    with torch.no_grad():
        expected = layer(x)
        assert [n for n, _ in njt.patch(layer).replaced] == [""]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", njt.NormjitFallbackWarning)
            y = layer(x)
    assert y.dtype == expected.dtype
    warned = [str(w.message) for w in caught if w.category is njt.NormjitFallbackWarning]
    if served:
        assert len(stub.launches) == 1 and not warned, warned
    else:
        assert not stub.launches and torch.equal(y, expected)
        assert len(warned) == 1 and (f"weight dtype {weight_dtype} with input dtype {x_dtype} "
                                     "(LlamaRMSNorm returns") in warned[0], warned


def test_patched_gemma_falls_back_to_its_own_forward(fake_transformers, quiet):
    layer = fake_transformers["gemma3"].Gemma3RMSNorm(32)
    with torch.no_grad():
        layer.weight.normal_(0, 0.3)
    x = torch.randn(2, 5, 32, dtype=torch.bfloat16)
    expected = layer(x)
    njt.patch(layer)
    assert type(layer).__name__ == "NormjitGemma3RMSNorm"
    assert torch.equal(layer(x), expected)  # CPU: the layer's own forward
    close(layer(x), ref_norm("rms", x, 1, layer.weight, eps=1e-6, offset=1.0)[0], torch.bfloat16)
