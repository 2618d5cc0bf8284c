"""normjit.torch's LayerNorm over channels on a GPU: layer_norm_channels and LayerNorm2d against
float64 across ConvNeXt/SAM shapes, odd sizes, 1-D and 3-D spatial dims, dtypes and affine forms
with adversarial inputs (outputs poisoned first must be fully written); timm's LayerNorm2d and
the patched layer; what falls back (channels_last) and that it still computes PyTorch's result,
training through normjit; torch.compile(fullgraph=True); a CUDA-graph capture; patch() on timm's
ConvNeXt against the unpatched model run in a wider dtype. Skips with a reason without PyTorch or
a CUDA device."""
import copy
import math
import warnings

import pytest

from gpu_common import DEV, DTYPES, randn, rel_err, torch  # skips without PyTorch or a GPU
import torch.nn.functional as F

import normjit.torch as njt

pytestmark = pytest.mark.usefixtures("no_fallback")

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def reference(x, weight, bias, eps):
    """LayerNorm over dim 1 in float64, two-pass."""
    xd = x.double()
    mean = xd.mean(1, keepdim=True)
    y = (xd - mean) / torch.sqrt((xd - mean).pow(2).mean(1, keepdim=True) + eps)
    view = (1, -1) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.double().view(view)
    if bias is not None:
        y = y + bias.double().view(view)
    return y


def timm_style(x, weight, bias, eps):
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), weight, bias, eps).permute(0, 3, 1, 2)


SHAPES = [
    (32, 96, 56, 56), (32, 768, 7, 7), (2, 256, 64, 64),   # ConvNeXt-T stem and head, SAM neck
    (1, 1, 1, 1), (3, 3, 5, 7), (2, 17, 9, 11), (5, 130, 3, 3), (2, 1024, 7, 7),
    (4, 7, 33),                                            # one spatial dim
    (2, 24, 5, 6, 7),                                      # a volume
    (7, 48),                                               # no spatial dim
]
DISTS = [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3), (-3.0, 5.0)]  # (mean, std)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_channels_against_float64(shape, dtype, affine):
    c = shape[1]
    w = randn((c,), dtype, 1.0, 0.5) if affine != "none" else None
    b = randn((c,), dtype, 0.0, 1.0) if affine == "both" else None
    for mean, std in DISTS:
        x = randn(shape, dtype, mean, std)
        p = torch.full_like(x, math.nan)  # the next allocation of this size starts poisoned
        poisoned = p.data_ptr()
        del p
        y = njt.layer_norm_channels(x, w, b, 1e-6)
        assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
        if y.data_ptr() == poisoned:
            assert torch.isfinite(y).all(), "elements left unwritten (NaN poison survived)"
        ref = reference(x, w, b, 1e-6)
        err = rel_err(y, ref)
        assert err < TOL[dtype], (err, mean, std)
        if x.dim() == 4:  # no worse than timm's permute + F.layer_norm by more than tolerance
            assert err <= max(4 * rel_err(timm_style(x, w, b, 1e-6), ref), TOL[dtype] / 4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layer_norm_2d_module_is_timms_function(dtype):
    m = njt.LayerNorm2d(96, device=DEV, dtype=dtype).requires_grad_(False)
    with torch.no_grad():
        m.weight.copy_(randn((96,), dtype, 1.0, 0.5))
        m.bias.copy_(randn((96,), dtype))
    x = randn((8, 96, 28, 28), dtype, 3.0, 1.5)
    y = m(x)
    assert rel_err(y, reference(x, m.weight, m.bias, 1e-6)) < TOL[dtype]
    assert rel_err(y, timm_style(x, m.weight, m.bias, 1e-6)) < TOL[dtype]


def test_one_kernel_serves_every_batch():
    w, b = randn((64,), torch.float32), randn((64,), torch.float32)
    before = njt.prepared_kernels()
    for n in (1, 3, 64):
        x = randn((n, 64, 14, 14), torch.float32)
        assert rel_err(njt.layer_norm_channels(x, w, b), reference(x, w, b, 1e-6)) < 1e-5
    assert njt.prepared_kernels() - before <= 1


def test_channels_last_falls_back_and_grad_trains_through_normjit():
    """Until the channels-last layout is in the package, a channels_last input falls back with
    its reason (or, once it is, is served): either way the result is LayerNorm over dim 1.
    An input that requires grad trains through normjit's backward kernel, without a warning
    (test_autograd_channels_gpu.py checks it across shapes)."""
    w, b = randn((32,), torch.float32, 1.0, 0.5), randn((32,), torch.float32)
    x = randn((4, 32, 10, 10), torch.float32, 2.0).to(memory_format=torch.channels_last)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        y = njt.layer_norm_channels(x, w, b)
    for c in caught:
        assert "non-contiguous input" in str(c.message), str(c.message)
    assert rel_err(y, reference(x, w, b, 1e-6)) < 1e-5
    xg = x.contiguous().requires_grad_()
    wg, bg = w.clone().requires_grad_(), b.clone().requires_grad_()
    y = njt.layer_norm_channels(xg, wg, bg)
    assert "layer_norm_channels_train" in y.grad_fn.name()  # normjit's training op
    dy = torch.randn_like(y)
    got = torch.autograd.grad(y, (xg, wg, bg), dy)
    x64 = xg.detach().double().requires_grad_()
    w64, b64 = wg.detach().double().requires_grad_(), bg.detach().double().requires_grad_()
    want = torch.autograd.grad(reference(x64, w64, b64, 1e-6), (x64, w64, b64), dy.double())
    for g, r in zip(got, want):
        assert rel_err(g, r) < 1e-4


def test_compile_fullgraph_matches_eager():
    m = njt.LayerNorm2d(64, device=DEV).requires_grad_(False)
    with torch.no_grad():
        m.weight.copy_(randn((64,), torch.float32, 1.0, 0.5))
    f = lambda x: F.silu(m(x)) * 2  # noqa: E731
    compiled = torch.compile(f, fullgraph=True)
    x = randn((4, 64, 16, 16), torch.float32)
    with torch.no_grad():
        assert rel_err(compiled(x), f(x)) < 1e-6
    explanation = torch._dynamo.explain(f)(x)
    assert explanation.graph_break_count == 0, explanation


def test_cuda_graph_capture_on_fresh_stream_and_replay():
    w, b = randn((96,), torch.float32), randn((96,), torch.float32)
    fn = lambda t: njt.layer_norm_channels(t, w, b)  # noqa: E731
    static_x = randn((2, 96, 56, 56), torch.float32)
    njt.warmup(fn, static_x)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        static_y = fn(static_x)
    for _ in range(3):
        new = randn(static_x.shape, torch.float32, 1.0, 2.0)
        static_x.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(static_y, reference(new, w, b, 1e-6)) < 1e-5


@pytest.mark.parametrize("dtype, wide", [(torch.float32, torch.float64),
                                         (torch.bfloat16, torch.float32)], ids=["f32", "bf16"])
def test_patch_timm_convnext(dtype, wide):
    """timm's ConvNeXt-atto: LayerNorm2d in its stem, downsampling and head, LayerNorm2d (or
    LayerNorm, by timm version) in its blocks; every one is replaced and the patched model is
    as close to the wide-dtype model as the original."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=10)
    model = model.to(DEV, dtype).eval().requires_grad_(False)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm) and mod.weight is not None:
                mod.weight.copy_(1 + 0.3 * torch.randn_like(mod.weight))
                mod.bias.copy_(0.1 * torch.randn_like(mod.bias))
    norms = [n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    ln2d = [n for n, m in model.named_modules() if type(m).__name__ == "LayerNorm2d"]
    assert ln2d, "convnext_atto has LayerNorm2d layers"
    x = torch.randn(2, 3, 64, 64, device=DEV).to(dtype)
    wide_model = copy.deepcopy(model).to(wide)
    with torch.no_grad():
        ref = wide_model(x.to(wide)).double()
        orig = model(x).double()
        report = njt.patch(model)
        patched = model(x).double()
    replaced = {name for name, _ in report.replaced}
    assert set(norms) <= replaced and set(ln2d) <= replaced, str(report)
    err_orig, err_patched = rel_err(orig, ref), rel_err(patched, ref)
    assert err_patched <= 1.5 * err_orig + TOL[dtype] / 10, (err_orig, err_patched, str(report))
