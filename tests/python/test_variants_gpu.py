"""normjit.torch's variants of issue 18 on a GPU, against float64 references of the PyTorch
expressions their docstrings give: add_rms_norm and add_layer_norm (h bit-exact, y from the
rounded h; in place), weight_offset, out_dtype (fp8 within one fp8 step of the scaled
reference, saturated), return_stats, weight/bias of another dtype (PyTorch's result dtype, or
PyTorch's exception), strided rows (q/k slices of a qkv tensor viewed [tokens, heads, 128],
read where they are: the library is called with the view's pointer and row strides, and nothing
outside the rows is written), on LLM shapes (tokens 1, 7, 128, 1000 x hidden 2048, 4096, 5120,
4097) and every dtype; torch.compile(fullgraph=True) of a decoder-layer-like function, and
torch.cuda.graph capture on a fresh stream. Skips with a reason without PyTorch or a CUDA device.
"""
import warnings

import pytest

from gpu_common import DEV, DTYPES, randn, torch  # skips without PyTorch or a GPU
import torch.nn.functional as F

import normjit.torch as njt
from normjit.torch import _ops

pytestmark = pytest.mark.usefixtures("no_fallback")

TOKENS = [1, 7, 128, 1000]
HIDDEN = [2048, 4096, 5120, 4097]
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_OK = torch.cuda.get_device_capability() >= (8, 9)
# Elementwise tolerance against float64: one rounding to the dtype (its eps, relative) on top
# of float32 statistics.
RTOL = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def ref_norm(op, h, k, weight=None, bias=None, eps=1e-6, offset=0.0):
    """(n, mean, rstd) in float64 from h as stored: n = normalized * (offset + weight) + bias."""
    hd = h.double()
    dims = tuple(range(h.dim() - k, h.dim()))
    if op == "rms":
        mean = None
        rstd = torch.rsqrt(hd.pow(2).mean(dims, keepdim=True) + eps)
        n = hd * rstd
    else:
        mean = hd.mean(dims, keepdim=True)
        rstd = torch.rsqrt((hd - mean).pow(2).mean(dims, keepdim=True) + eps)
        n = (hd - mean) * rstd
    if weight is not None:
        n = n * (offset + weight.double())
    if bias is not None:
        n = n + bias.double()
    return n, mean, rstd


def check(y, ref, dtype, what=""):
    """y (of `dtype`) within one rounding of the float64 reference."""
    assert y.dtype == dtype, (y.dtype, dtype, what)
    assert torch.isfinite(y.double()).all(), f"non-finite values {what}"
    tol = RTOL[dtype]
    err = ((y.double() - ref).abs() - tol * ref.abs()).max().item()
    assert err <= tol, f"{what}: max error beyond {tol:g} relative: {err:.3e} absolute"


def check_fp8(y, n, scale, dtype, what=""):
    """Dequantized fp8 y within one fp8 step of saturate(n * scale), plus what float32 math
    may be off by where the affine step cancels (n near 0, where fp8's subnormal steps are
    finer than float32's rounding of terms of magnitude 1: 2e-6 before scaling)."""
    assert y.dtype == dtype
    fi = torch.finfo(dtype)
    mantissa = 3 if dtype == E4M3 else 2
    ref = (n * scale).clamp(-fi.max, fi.max)
    step = torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(fi.smallest_normal)))
                      - mantissa)
    err = (y.double() - ref).abs() - step - 2e-6 * scale
    assert err.max().item() <= 0, f"{what}: beyond one fp8 step: {err.max().item():.3e}"


def spy_launches(monkeypatch):
    """Records what normjit_launch and normjit_launch_ex are called with (by name; rows None
    for normjit_launch: contiguous) and calls the real ones."""
    _ops._prepare(("rmsnorm", (8,), torch.float32, False, False, torch.cuda.current_device()),
                  "op=rmsnorm shape=1,8 dtype=f32 normalized_dims=1 affine=none eps=1e-05", 8)
    seen = []
    names = ("kernel", "x", "y", "weight", "bias", "batch", "eps", "residual", "residual_out",
             "scale", "mean", "rstd", "stream", "rows")
    plain = ("kernel", "x", "y", "weight", "bias", "batch", "eps", "stream")

    def spy(real, names):
        def launch(*args):
            seen.append({"rows": None, **dict(zip(names, args))})
            return real(*args)
        return launch
    monkeypatch.setattr(_ops, "_launch_ex", spy(_ops._launch_ex, names))
    monkeypatch.setattr(_ops, "_launch", spy(_ops._launch, plain))
    return seen


# ---------------------------------------------------------------------------------------
# add_rms_norm / add_layer_norm on LLM shapes
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("residual_f32", [False, True], ids=["r-x", "r-f32"])
def test_add_rms_norm_against_float64(hidden, dtype, residual_f32):
    rdtype = torch.float32 if residual_f32 else dtype
    w = randn((hidden,), torch.float32 if residual_f32 else dtype, 1.0, 0.3)
    for tokens in TOKENS:
        x = randn((tokens, hidden), dtype, 0.0, 2.0)
        r = randn((tokens, hidden), rdtype, 0.5, 3.0)
        x0, r0 = x.clone(), r.clone()
        with torch.inference_mode():
            y, h = njt.add_rms_norm(x, r, hidden, w, 1e-6)
        h_ref = (x.float() + r.float()).to(rdtype)
        assert h.dtype == rdtype and torch.equal(h, h_ref), f"h of {tokens} tokens"
        assert torch.equal(x, x0) and torch.equal(r, r0)  # inputs untouched
        assert y.is_contiguous() and h.is_contiguous()
        check(y, ref_norm("rms", h_ref, 1, w, eps=1e-6)[0], dtype, f"{tokens} tokens")
        # in place (vLLM's fused_add_rms_norm): the same results, written into x and r
        out = njt.add_rms_norm(x, r, hidden, w, 1e-6, inplace=True)
        assert out[0] is x and out[1] is r
        assert torch.equal(r, h) and torch.equal(x, y)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [4096, 4097])
@pytest.mark.parametrize("params", ["x", "f32"])
def test_add_layer_norm_against_float64(hidden, dtype, params):
    pd = dtype if params == "x" else torch.float32
    w, b = randn((hidden,), pd, 1.0, 0.3), randn((hidden,), pd, 0.0, 0.5)
    for tokens in TOKENS:
        x = randn((tokens, hidden), dtype, 3.0, 2.0)
        r = randn((tokens, hidden), torch.float32, -1.0, 1.0)
        with torch.inference_mode():
            y, h = njt.add_layer_norm(x, r, hidden, w, b, 1e-5)
        h_ref = (x.float() + r).to(torch.float32)
        assert torch.equal(h, h_ref)
        check(y, ref_norm("ln", h_ref, 1, w, b, 1e-5)[0], dtype, f"{tokens} tokens")
        x2, r2 = x.clone(), r.clone()
        njt.add_layer_norm(x2, r2, hidden, w, b, 1e-5, inplace=True)
        assert torch.equal(r2, h) and torch.equal(x2, y)


# ---------------------------------------------------------------------------------------
# weight_offset, return_stats, out_dtype
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_rms_norm_gemma_offset_and_stats(hidden, dtype):
    w = randn((hidden,), dtype, 0.0, 0.2)  # Gemma's weights are near 0: 1 + w is used
    for tokens in TOKENS:
        x = randn((tokens, hidden), dtype, 0.0, 3.0)
        with torch.inference_mode():
            y, rstd = njt.rms_norm(x, hidden, w, 1e-6, weight_offset=1.0, return_stats=True)
        n, _, rstd_ref = ref_norm("rms", x, 1, w, eps=1e-6, offset=1.0)
        check(y, n, dtype, f"{tokens} tokens")
        assert rstd.shape == (tokens, 1) and rstd.dtype == torch.float32
        torch.testing.assert_close(rstd.double(), rstd_ref, rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [2048, 4097])
def test_layer_norm_stats_and_out_dtype(hidden, dtype):
    w, b = randn((hidden,), dtype, 1.0, 0.3), randn((hidden,), dtype)
    for tokens in TOKENS:
        x = randn((2, tokens, hidden), dtype, 5.0, 2.0)
        with torch.inference_mode():
            y, mean, rstd = njt.layer_norm(x, hidden, w, b, 1e-5, return_stats=True,
                                           out_dtype=torch.float32)
            _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [hidden], w, b, 1e-5)
        n, mean_ref, rstd_ref = ref_norm("ln", x, 1, w, b, 1e-5)
        torch.testing.assert_close(y.double(), n, rtol=2e-5, atol=2e-5)  # f32 out: no rounding
        assert mean.shape == tmean.shape == rstd.shape == trstd.shape == (2, tokens, 1)
        assert mean.dtype == tmean.dtype == torch.float32
        torch.testing.assert_close(mean.double(), mean_ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(rstd.double(), rstd_ref, rtol=1e-5, atol=0)
        # out_dtype a 16-bit type from float32 (and bf16 from f16)
        out = torch.bfloat16 if dtype != torch.bfloat16 else torch.float16
        with torch.inference_mode():
            y16 = njt.layer_norm(x, hidden, w, b, 1e-5, out_dtype=out)
        check(y16, n, out, f"{tokens} tokens, out {out}")


@pytest.mark.skipif(not FP8_OK, reason="fp8 output needs sm_89 or later")
@pytest.mark.parametrize("out", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [2048, 4096, 4097])
def test_fp8_output_against_float64(hidden, dtype, out):
    w = randn((hidden,), torch.float32, 1.0, 0.3)
    for tokens in TOKENS:
        x = randn((tokens, hidden), dtype, 0.0, 2.0)
        r = randn((tokens, hidden), dtype)
        for s in (0.37, 40.0):  # 40: e4m3's values beyond 448 saturate
            scale = torch.tensor([s], device=DEV)
            with torch.inference_mode():
                y = njt.rms_norm(x, hidden, w, 1e-6, out_dtype=out, scale=scale)
                y2, h = njt.add_rms_norm(x, r, hidden, w, 1e-6, out_dtype=out, scale=scale)
            check_fp8(y, ref_norm("rms", x, 1, w, eps=1e-6)[0], s, out, f"{tokens} tokens")
            h_ref = (x.float() + r.float()).to(dtype)
            assert torch.equal(h, h_ref)
            check_fp8(y2, ref_norm("rms", h_ref, 1, w, eps=1e-6)[0], s, out, "add")
        wx = w.to(dtype)  # F.layer_norm on CUDA takes parameters of the input's dtype only
        with torch.inference_mode():
            y = njt.layer_norm(x, hidden, wx, wx, 1e-5, out_dtype=out, scale=scale)
        check_fp8(y, ref_norm("ln", x, 1, wx, wx, 1e-5)[0], 40.0, out, "layer_norm")


def test_fp8_scale_is_read_at_launch():
    """The scale is a device tensor read by the kernel: changing it in place changes y."""
    if not FP8_OK:
        pytest.skip("fp8 output needs sm_89 or later")
    x = randn((4, 1024), torch.bfloat16)
    scale = torch.tensor([1.0], device=DEV)
    with torch.inference_mode():
        a = njt.rms_norm(x, 1024, out_dtype=E4M3, scale=scale)
        scale.fill_(0.5)
        b = njt.rms_norm(x, 1024, out_dtype=E4M3, scale=scale)
    check_fp8(b, ref_norm("rms", x, 1, eps=torch.finfo(torch.bfloat16).eps)[0], 0.5, E4M3)
    assert not torch.equal(a.float(), b.float())


def test_fp8_before_sm89_falls_back_with_the_librarys_reason():
    if FP8_OK:
        pytest.skip("this GPU has fp8 conversions (sm_89 or later)")
    x = randn((4, 1024), torch.bfloat16)
    with pytest.warns(njt.NormjitFallbackWarning, match="out_dtype"):
        y = njt.rms_norm(x, 1024, out_dtype=E4M3, scale=torch.ones(1, device=DEV))
    assert y.dtype == E4M3


# ---------------------------------------------------------------------------------------
# Parameters of another dtype: PyTorch's result dtype, or PyTorch's exception (on CUDA)
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("xd", DTYPES, ids=str)
@pytest.mark.parametrize("wd", DTYPES, ids=str)
def test_mixed_parameters_follow_pytorch_on_cuda(xd, wd):
    if xd == wd:
        pytest.skip("one dtype")
    x = randn((7, 4096), xd)
    w, b = randn((4096,), wd, 1.0, 0.3), randn((4096,), wd)
    with torch.inference_mode():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # PyTorch's own note on the mismatch
            theirs = F.rms_norm(x, (4096,), w, 1e-6)
        y = njt.rms_norm(x, 4096, w, 1e-6)  # served: no fallback warning (an error here)
    assert y.dtype == theirs.dtype == xd
    check(y, ref_norm("rms", x, 1, w, eps=1e-6)[0], xd)
    try:
        with torch.inference_mode():
            expected = F.layer_norm(x, (4096,), w, b)
    except RuntimeError as e:
        expected = e
    assert _ops._params_ok("layer_norm", x, w, b) == isinstance(expected, torch.Tensor), expected
    if isinstance(expected, torch.Tensor):
        with torch.inference_mode():
            y = njt.layer_norm(x, 4096, w, b)
        assert y.dtype == expected.dtype
        check(y, ref_norm("ln", x, 1, w, b, 1e-5)[0], xd)
    else:
        with pytest.warns(njt.NormjitFallbackWarning, match="weight/bias dtype"):
            with pytest.raises(RuntimeError) as ours, torch.inference_mode():
                njt.layer_norm(x, 4096, w, b)
        assert str(ours.value) == str(expected)
    # add_layer_norm is normjit's own: any one parameter dtype
    with torch.inference_mode():
        y, h = njt.add_layer_norm(x, x, 4096, w, b)
    check(y, ref_norm("ln", (x.float() * 2).to(xd), 1, w, b, 1e-5)[0], xd)


# ---------------------------------------------------------------------------------------
# Strided rows: q/k of a qkv projection, read in place
# ---------------------------------------------------------------------------------------

def qkv_views(tokens, heads, kv_heads, dtype, dim=128):
    qkv = randn((tokens, (heads + 2 * kv_heads) * dim), dtype)
    q = qkv[:, :heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    return qkv, q, k


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens", TOKENS)
def test_qk_norm_of_qkv_views_without_a_copy(tokens, dtype, monkeypatch):
    seen = spy_launches(monkeypatch)
    heads, kv_heads = 32, 8
    qkv, q, k = qkv_views(tokens, heads, kv_heads, dtype)
    before = qkv.clone()
    wq, wk = randn((128,), dtype, 1.0, 0.3), randn((128,), dtype, 1.0, 0.3)
    with torch.inference_mode():
        qn = njt.rms_norm(q, 128, wq, 1e-6)
        kn, kstats = njt.rms_norm(k, 128, wk, 1e-6, return_stats=True)
    assert torch.equal(qkv, before)  # read only
    for view, y, call, heads_ in ((q, qn, seen[-2], heads), (k, kn, seen[-1], kv_heads)):
        assert call["x"] == view.data_ptr()  # the view itself, inside qkv: no copy
        if view.is_contiguous():  # one token: its heads are adjacent
            assert tokens == 1 and call["rows"] is None
        else:
            assert call["rows"][:3] == (heads_, qkv.stride(0), 128)
        assert call["batch"] == tokens * heads_
        assert y.is_contiguous() and y.shape == view.shape and y.dtype == dtype
    check(qn, ref_norm("rms", q, 1, wq, eps=1e-6)[0], dtype, "q")
    check(kn, ref_norm("rms", k, 1, wk, eps=1e-6)[0], dtype, "k")
    torch.testing.assert_close(kstats.double(), ref_norm("rms", k, 1, eps=1e-6)[2],
                               rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_layer_norm_and_slices(dtype, monkeypatch):
    seen = spy_launches(monkeypatch)
    wide = randn((128, 3 * 2048), dtype, 1.0, 2.0)
    x = wide[:, 2048:4096]  # the middle third: one level of row stride
    with torch.inference_mode():
        y = njt.layer_norm(x, 2048)
    assert seen[-1]["x"] == x.data_ptr() and seen[-1]["rows"][:2] == (1, 3 * 2048)
    check(y, ref_norm("ln", x, 1, eps=1e-5)[0], dtype)
    # [batch, tokens, 3, heads, dim]: q of shape [batch, tokens, heads, dim]
    qkv = randn((2, 7, 3, 8, 128), dtype)
    q = qkv[:, :, 0]
    with torch.inference_mode():
        y = njt.rms_norm(q, 128, None, 1e-6)
    assert seen[-1]["rows"][:3] == (8, 3 * 8 * 128, 128)
    check(y, ref_norm("rms", q, 1, eps=1e-6)[0], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_in_place_add_rms_norm_on_a_qkv_view_writes_only_its_rows(dtype):
    tokens, heads, kv_heads = 7, 16, 4
    qkv, q, _ = qkv_views(tokens, heads, kv_heads, dtype)
    r = randn((tokens, heads, 128), torch.float32)
    w = randn((128,), torch.float32, 1.0, 0.3)
    before, q0, r0 = qkv.clone(), q.clone(), r.clone()
    with torch.inference_mode():
        out = njt.add_rms_norm(q, r, 128, w, 1e-6, inplace=True)
    assert out[0] is q and out[1] is r
    h_ref = (q0.float() + r0).to(torch.float32)
    assert torch.equal(r, h_ref)
    check(q, ref_norm("rms", h_ref, 1, w, eps=1e-6)[0], dtype, "in place into q")
    assert torch.equal(qkv[:, heads * 128:], before[:, heads * 128:])  # k and v untouched


def test_strides_the_kernel_refuses_fall_back_once():
    """A row stride that is no multiple of the kernel's vector width (here 100 bf16 elements
    with 8-element vectors, if the plan takes 8): the library names it, the call falls back
    (warned once), the result is still PyTorch's."""
    wide = randn((16, 100), torch.bfloat16)
    x = wide[:, :64]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        with torch.inference_mode():
            for _ in range(2):
                y = njt.rms_norm(x, 64, None, 1e-6)
    check(y, ref_norm("rms", x, 1, eps=1e-6)[0], torch.bfloat16)
    texts = [str(w.message) for w in caught if issubclass(w.category, njt.NormjitFallbackWarning)]
    assert len(texts) <= 1 and all("rows.outer" in t for t in texts), texts


def test_batch_invariance_of_variant_rows():
    """A row's bits do not depend on how many rows the launch has."""
    w = randn((4096,), torch.float32, 1.0, 0.3)
    x = randn((1000, 4096), torch.bfloat16)
    r = randn((1000, 4096), torch.float32)
    with torch.inference_mode():
        y_all, h_all = njt.add_rms_norm(x, r, 4096, w, 1e-6, weight_offset=1.0)
        for tokens in (1, 7, 128):
            y, h = njt.add_rms_norm(x[:tokens], r[:tokens], 4096, w, 1e-6, weight_offset=1.0)
            assert torch.equal(y, y_all[:tokens]) and torch.equal(h, h_all[:tokens])


# ---------------------------------------------------------------------------------------
# patch(): Gemma's RMSNorm with weight_offset=1
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patch_gemma(dtype):
    transformers = pytest.importorskip("transformers")
    from normjit.torch import _patch
    config = transformers.GemmaConfig(hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=1, head_dim=64, vocab_size=1000,
                                      max_position_embeddings=256, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = transformers.GemmaForCausalLM(config).to(DEV, dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, 1000, (2, 37), device=DEV)
    norms = [m for m in model.modules() if type(m).__name__ == "GemmaRMSNorm"]
    x = randn((3, 256), dtype, 0.0, 2.0)
    with torch.no_grad():
        before_logits = model(input_ids=ids).logits.float()
        before = [m(x) for m in norms]
        report = njt.patch(model)
        replaced = [type(m).__name__ for m in model.modules()
                    if type(m).__name__.startswith("Normjit")]
        assert replaced == ["NormjitGemmaRMSNorm"] * len(norms) and norms, str(report)
        for m, b in zip(norms, before):
            y = m(x)
            assert y.dtype == b.dtype
            check(y, ref_norm("rms", x, 1, m.weight, eps=1e-6, offset=1.0)[0], dtype, "gemma")
            torch.testing.assert_close(y, b, rtol=RTOL[dtype], atol=RTOL[dtype])
        logits = model(input_ids=ids).logits.float()
    err = ((logits - before_logits).norm() / before_logits.norm()).item()
    assert err < (1e-5 if dtype == torch.float32 else 2e-2), err
    assert _patch._is_gemma_rms_norm(type(norms[0])._normjit_original_class) is True


# ---------------------------------------------------------------------------------------
# torch.compile and CUDA graphs
# ---------------------------------------------------------------------------------------

HID = 1024


def decoder_layer(x, residual, w1, w2, proj, wq, scale):
    """A decoder layer's norms around stand-ins for attention and the MLP."""
    y, h = njt.add_rms_norm(x, residual, HID, w1, 1e-6)
    qkv = y @ proj  # [T, 3 * HID]
    q = qkv[:, :HID].view(-1, 8, HID // 8)
    qn = njt.rms_norm(q, HID // 8, wq, 1e-6, weight_offset=1.0)
    a = qn.reshape(-1, HID) + qkv[:, 2 * HID:]
    y2, h2 = njt.add_rms_norm(a, h, HID, w2, 1e-6)
    y8 = njt.rms_norm(y2, HID, w2, 1e-6, out_dtype=E4M3, scale=scale) if FP8_OK else y2
    return y2, h2, y8


def layer_inputs(tokens=16, dtype=torch.bfloat16):
    torch.manual_seed(3)
    return (randn((tokens, HID), dtype), randn((tokens, HID), torch.float32),
            randn((HID,), torch.float32, 1.0, 0.3), randn((HID,), dtype, 1.0, 0.3),
            randn((HID, 3 * HID), dtype, 0.0, HID ** -0.5), randn((HID // 8,), dtype, 0.0, 0.2),
            torch.tensor([4.0], device=DEV))


def test_compile_fullgraph_decoder_layer():
    args = layer_inputs()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with torch.no_grad():
        eager = decoder_layer(*args)
        torch._dynamo.reset()
        traced = torch.compile(decoder_layer, fullgraph=True, backend=capture)(*args)
        code = "\n".join(g.code for g in graphs)
        assert "normjit.add_rms_norm" in code and "normjit.rms_norm_ex" in code, code
        for a, b in zip(traced, eager):
            assert torch.equal(a.float(), b.float())
        torch._dynamo.reset()
        compiled = torch.compile(decoder_layer, fullgraph=True)
        for tokens in (16, 9):
            args = layer_inputs(tokens)
            got, ref = compiled(*args), decoder_layer(*args)
            for a, b in zip(got, ref):
                assert a.dtype == b.dtype and a.shape == b.shape
                torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    torch._dynamo.reset()


def test_compile_in_place_add_rms_norm():
    def fn(x, r, w):
        njt.add_rms_norm(x, r, HID, w, 1e-6, inplace=True)
        return x * 2, r

    x, r = randn((8, HID), torch.bfloat16), randn((8, HID), torch.bfloat16)
    w = randn((HID,), torch.bfloat16, 1.0, 0.3)
    x1, r1, x2, r2 = x.clone(), r.clone(), x.clone(), r.clone()
    with torch.no_grad():
        torch._dynamo.reset()
        got = torch.compile(fn, fullgraph=True)(x1, r1, w)
        ref = fn(x2, r2, w)
    torch._dynamo.reset()
    assert torch.equal(x1, x2) and torch.equal(r1, r2)  # the mutation reached the inputs
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_cuda_graph_capture_on_a_fresh_stream_and_replay():
    static = list(layer_inputs())
    fn = decoder_layer
    njt.warmup(fn, *static)
    stream = torch.cuda.Stream()  # fresh: first used inside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        static_out = fn(*static)
    for seed in range(3):
        torch.manual_seed(10 + seed)
        static[0].copy_(randn(static[0].shape, static[0].dtype))
        static[1].copy_(randn(static[1].shape, static[1].dtype))
        static[6].fill_(0.5 + seed)  # the fp8 scale, read by the kernel at replay
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            expected = fn(*static)
        for a, b in zip(static_out, expected):
            assert torch.equal(a.float(), b.float())


def test_cuda_graph_of_in_place_add():
    x, r = randn((4, 4096), torch.bfloat16), randn((4, 4096), torch.float32)
    w = randn((4096,), torch.bfloat16, 1.0, 0.3)

    def step(x, r):
        return njt.add_rms_norm(x, r, 4096, w, 1e-6, inplace=True)

    njt.warmup(step, x.clone(), r.clone())
    graph = torch.cuda.CUDAGraph()
    x0, r0 = x.clone(), r.clone()
    with torch.no_grad(), torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        step(x, r)
    x.copy_(x0)
    r.copy_(r0)
    graph.replay()
    torch.cuda.synchronize()
    with torch.no_grad():
        y, h = njt.add_rms_norm(x0, r0, 4096, w, 1e-6)
    assert torch.equal(x, y) and torch.equal(r, h)


def test_opcheck_on_cuda():
    args = [
        ("rms_norm_ex", (randn((3, 256), torch.bfloat16), [256], randn((256,), torch.float32),
                         1e-6, 1.0, None, None)),
        ("rms_norm_stats", (randn((3, 2, 256), torch.float16), [256], None, 1e-6, 0.0,
                            torch.float32, None)),
        ("layer_norm_stats", (randn((3, 256), torch.float32), [256], randn((256,), torch.float32),
                              randn((256,), torch.float32), 1e-5, 0.0, None, None)),
        ("add_rms_norm", (randn((3, 256), torch.bfloat16), randn((3, 256), torch.float32), [256],
                          randn((256,), torch.bfloat16), 1e-6, 0.0, None, None)),
        ("add_layer_norm", (randn((3, 256), torch.float16), randn((3, 256), torch.float16),
                            [256], None, None, 1e-5, 0.0, None, None)),
        ("add_rms_norm_inplace", (randn((3, 256), torch.bfloat16),
                                  randn((3, 256), torch.bfloat16), [256], None, 1e-6, 0.0)),
    ]
    if FP8_OK:
        args.append(("rms_norm_ex", (randn((3, 256), torch.bfloat16), [256], None, 1e-6, 0.0,
                                     E4M3, torch.tensor([2.0], device=DEV))))
    for op, a in args:
        torch.library.opcheck(getattr(torch.ops.normjit, op).default, a,
                              test_utils=("test_schema", "test_faketensor"))


def test_no_math_on_the_host_path_between_calls():
    """A second call of the same kind reuses the decision: no new kernel, no new key."""
    x, r = randn((7, 2048), torch.bfloat16), randn((7, 2048), torch.bfloat16)
    w = randn((2048,), torch.float32, 1.0, 0.3)
    with torch.inference_mode():
        njt.add_rms_norm(x, r, 2048, w, 1e-6)
        kernels, calls = njt.prepared_kernels(), len(_ops._calls)
        for _ in range(3):
            njt.add_rms_norm(x, r, 2048, w, 1e-6)
    assert njt.prepared_kernels() == kernels and len(_ops._calls) == calls
