"""normjit.torch on a GPU: modules and functions against a float64 reference across shapes,
dtypes and adversarial inputs (poisoned outputs must be fully written), the fallbacks and
argument errors on CUDA tensors, torch.compile(fullgraph=True), CUDA-graph capture on a fresh
stream with replay on new inputs, and patch() on a transformers Llama and on timm models,
compared with the unpatched model against a wider-dtype run of the same model.
Skips with a reason without PyTorch or without a CUDA device."""
import copy
import math
import warnings

import pytest

from gpu_common import DEV, DTYPES, randn, rel_err, torch  # skips without PyTorch or a GPU
import torch.nn.functional as F

import normjit.torch as njt

pytestmark = pytest.mark.usefixtures("no_fallback")

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def poison_next_allocation(like):
    """Fills a freed block of the caching allocator with NaN, so the next allocation of that
    size (normjit's output) starts poisoned; returns the block's address."""
    p = torch.full_like(like, math.nan)
    ptr = p.data_ptr()
    del p
    return ptr


def check(y, ref, x, dtype, poisoned=None):
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    if poisoned is not None and y.data_ptr() == poisoned:
        assert torch.isfinite(y).all(), "elements left unwritten (NaN poison survived)"
    err = rel_err(y, ref)
    assert err < TOL[dtype], f"rel. err {err:.2e} against float64"
    return err


# ---------------------------------------------------------------------------------------
# Against float64, across shapes and dtypes
# ---------------------------------------------------------------------------------------

ROW_SHAPES = [  # (x shape, normalized_shape)
    ((1, 1), (1,)), ((3, 3), (3,)), ((5, 7), (7,)), ((2, 65), (65,)), ((7, 1000), (1000,)),
    ((1, 4096), (4096,)), ((3, 4097), (4097,)), ((2, 3, 127), (127,)), ((4, 13, 17), (13, 17)),
    ((2, 64, 16, 16), (64, 16, 16)), ((31, 8192), (8192,)), ((2, 1 << 20), (1 << 20,)),
]
DISTS = [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3), (-3.0, 5.0)]  # (mean, std)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, normalized", ROW_SHAPES, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_module_against_float64(shape, normalized, dtype, affine):
    torch.manual_seed(hash((shape, affine)) % 2**31)
    ours = njt.LayerNorm(normalized, eps=1e-5, elementwise_affine=affine != "none",
                         bias=affine == "both", device=DEV, dtype=dtype)
    theirs = torch.nn.LayerNorm(normalized, eps=1e-5, elementwise_affine=affine != "none",
                                bias=affine == "both", device=DEV, dtype=dtype)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(randn(p.shape, dtype, 1.0, 0.5))
    ours.load_state_dict(theirs.state_dict())
    w64 = theirs.weight.double() if theirs.weight is not None else None
    b64 = theirs.bias.double() if theirs.bias is not None else None
    for mean, std in DISTS:
        x = randn(shape, dtype, mean, std)
        with torch.no_grad():
            poisoned = poison_next_allocation(x)
            y = ours(x)
            ref = F.layer_norm(x.double(), normalized, w64, b64, 1e-5)
            err = check(y, ref, x, dtype, poisoned)
            torch_err = rel_err(theirs(x), ref)
        # No worse than PyTorch's own module by more than the tolerance.
        assert err <= max(4 * torch_err, TOL[dtype] / 4), (err, torch_err, mean, std)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, normalized", ROW_SHAPES[:-1], ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_module_against_float64(shape, normalized, dtype, weight):
    ours = njt.RMSNorm(normalized, eps=1e-6, elementwise_affine=weight, device=DEV, dtype=dtype)
    if weight:
        with torch.no_grad():
            ours.weight.copy_(randn(normalized, dtype, 1.0, 0.5))
    w64 = ours.weight.double() if weight else None
    for mean, std in [(0.0, 1.0), (1.0, 2.0), (0.0, 1e-3), (0.0, 1e-20)]:
        x = randn(shape, dtype, mean, std)
        with torch.inference_mode():
            poisoned = poison_next_allocation(x)
            y = ours(x)
        ref = F.rms_norm(x.double(), normalized, w64, 1e-6)
        if std == 1e-20 and dtype != torch.float32:
            continue  # underflows to zero in f16/bf16: compared below only for finiteness
        check(y, ref, x, dtype, poisoned)


GROUP_SHAPES = [  # (x shape, groups)
    ((1, 1, 1), 1), ((1, 3, 5), 3), ((3, 6, 1, 1), 2), ((2, 64, 7, 7), 8), ((2, 32, 31, 17), 32),
    ((1, 7, 1000), 7), ((4, 64, 64, 64), 8), ((2, 2048, 7, 7), 32), ((2, 320, 64, 64), 32),
    ((5, 12), 4),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", GROUP_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_module_against_float64(shape, groups, dtype, affine):
    ours = njt.GroupNorm(groups, shape[1], eps=1e-5, affine=affine, device=DEV, dtype=dtype)
    if affine:
        with torch.no_grad():
            ours.weight.copy_(randn(shape[1:2], dtype, 1.0, 0.5))
            ours.bias.copy_(randn(shape[1:2], dtype, 0.0, 1.0))
    w64 = ours.weight.double() if affine else None
    b64 = ours.bias.double() if affine else None
    if math.prod(shape) == groups:  # one value per group: F.group_norm refuses, and so do we
        theirs = torch.nn.GroupNorm(groups, shape[1], eps=1e-5, affine=affine, device=DEV,
                                    dtype=dtype)
        x = randn(shape, dtype)
        match = "Expected more than 1 value per channel"
        with torch.no_grad(), pytest.raises(ValueError, match=match):
            theirs(x)
        with torch.no_grad(), pytest.raises(ValueError, match=match):
            ours(x)
        with pytest.raises(ValueError, match=match):
            njt.group_norm(x, groups)
        return
    for mean, std in DISTS:
        x = randn(shape, dtype, mean, std)
        with torch.no_grad():
            poisoned = poison_next_allocation(x)
            y = ours(x)
        check(y, F.group_norm(x.double(), groups, w64, b64, 1e-5), x, dtype, poisoned)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 7, 5), (2, 64, 32, 32), (4, 64, 64, 64),
                                   (2, 3, 1000), (1, 65, 3, 3)], ids=str)
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_channels_against_float64(shape, dtype, weight):
    w = randn(shape[1:2], dtype, 1.0, 0.5) if weight else None
    for mean, std in [(1.0, 2.0), (0.0, 1e-3)]:
        x = randn(shape, dtype, mean, std)
        with torch.no_grad():
            poisoned = poison_next_allocation(x)
            y = njt.rms_norm_channels(x, w, eps=1e-5)
        xd = x.double()
        ref = xd / torch.sqrt(xd.pow(2).mean(dim=1, keepdim=True) + 1e-5)
        if w is not None:
            ref = ref * w.double().view(1, -1, *([1] * (x.dim() - 2)))
        check(y, ref, x, dtype, poisoned)


def test_functional_matches_torch_functional_defaults():
    x = randn((8, 4096), torch.bfloat16)
    w = randn((4096,), torch.bfloat16, 1.0, 0.5)
    with torch.no_grad():
        # eps None: torch.finfo(dtype).eps, as F.rms_norm.
        ref = F.rms_norm(x.double(), (4096,), w.double(), torch.finfo(torch.bfloat16).eps)
        check(njt.rms_norm(x, 4096, w), ref, x, torch.bfloat16)
        check(njt.layer_norm(x, [4096]), F.layer_norm(x.double(), (4096,)), x, torch.bfloat16)


def test_one_kernel_serves_every_batch():
    before = njt.prepared_kernels()
    w = randn((768,), torch.float16, 1.0, 0.5)
    with torch.no_grad():
        for rows in (1, 2, 3, 17, 1000, 4096):
            x = randn((rows, 768), torch.float16)
            check(njt.rms_norm(x, (768,), w, 1e-6),
                  F.rms_norm(x.double(), (768,), w.double(), 1e-6), x, torch.float16)
        x = randn((2, 5, 768), torch.float16)
        check(njt.rms_norm(x, (768,), w, 1e-6), F.rms_norm(x.double(), (768,), w.double(), 1e-6),
              x, torch.float16)
    assert njt.prepared_kernels() - before <= 1


def test_on_a_side_stream_and_another_thread():
    import threading
    x = randn((64, 1024), torch.float32)
    ref = F.layer_norm(x.double(), (1024,))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        y = njt.layer_norm(x, (1024,))
    s.synchronize()
    check(y, ref, x, torch.float32)
    out = {}

    def work():
        with torch.no_grad():
            out["y"] = njt.layer_norm(x, (1024,))
        torch.cuda.synchronize()
    t = threading.Thread(target=work)
    t.start()
    t.join()
    check(out["y"], ref, x, torch.float32)


# ---------------------------------------------------------------------------------------
# Fallbacks and errors on CUDA tensors
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, reason", [
    (lambda: (randn((64, 32), torch.float32).t(), None), "non-contiguous input"),
    (lambda: (randn((4, 32), torch.float64), None), "input dtype torch.float64"),
    (lambda: (randn((4 * 32 + 1,), torch.float32)[1:].view(4, 32), None), "16-byte aligned"),
    (lambda: (randn((4, 32), torch.bfloat16), randn((32,), torch.float32)), "weight/bias dtype"),
    (lambda: (randn((0, 32), torch.float32), None), "empty input"),
])
def test_fallbacks_warn_once_and_compute_what_torch_does(make, reason):
    """A fallback is PyTorch's implementation: the same result, or the same exception where
    PyTorch raises (F.layer_norm on CUDA refuses a bf16 input with a float32 weight); the
    warning comes first, once per reason."""
    x, w = make()
    n = x.shape[-1]
    try:
        with torch.no_grad():
            expected = F.layer_norm(x, (n,), w)
    except Exception as e:  # noqa: BLE001 - whatever PyTorch raises, normjit must raise too
        expected = e
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", njt.NormjitFallbackWarning)
        for _ in range(2):
            try:
                results.append(njt.layer_norm(x, (n,), w))
            except Exception as e:  # noqa: BLE001 - compared with PyTorch's below
                results.append(e)
    fallbacks = [w_ for w_ in caught if issubclass(w_.category, njt.NormjitFallbackWarning)]
    assert len(fallbacks) == 1 and reason in str(fallbacks[0].message), \
        [str(w_.message) for w_ in fallbacks]
    for got in results:
        if isinstance(expected, Exception):
            assert type(got) is type(expected), (got, expected)
            assert str(got) == str(expected)
        else:
            assert isinstance(got, torch.Tensor), got
            with torch.no_grad():
                assert torch.equal(got, expected)


def test_requires_grad_trains_through_normjit_and_forward_only_ops_fall_back():
    """rms_norm and GroupNorm train through normjit's backward (no warning;
    test_autograd_gpu.py and test_autograd_channels_gpu.py check the gradients); add_rms_norm
    with an fp8 or other output dtype has no normjit backward: PyTorch's, with the graph
    kept."""
    m = njt.RMSNorm(64, device=DEV)
    x = randn((8, 64), torch.float32).requires_grad_()
    y = m(x)
    y.backward(torch.ones_like(y))
    assert x.grad is not None and m.weight.grad is not None
    with torch.no_grad():  # the same module in inference: normjit, no warning
        check(m(x), F.rms_norm(x.double(), (64,), m.weight.double()), x, torch.float32)
    g = njt.GroupNorm(2, 4, device=DEV)
    x = randn((2, 4, 8), torch.float32).requires_grad_()
    y = g(x)
    y.backward(torch.ones_like(y))
    assert x.grad is not None and g.weight.grad is not None
    x = randn((2, 8), torch.float32).requires_grad_()
    with pytest.warns(njt.NormjitFallbackWarning, match="requires grad"):
        y, _ = njt.add_rms_norm(x, torch.ones_like(x), 8, None, 1e-6, out_dtype=torch.float16)
    y.sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("call, match", [
    (lambda: njt.rms_norm(randn((2, 8), torch.float32), (8,), torch.ones(8)),
     r"weight is on cpu, the input on cuda:0"),
    (lambda: njt.layer_norm(randn((2, 8), torch.float32), (8,), None, torch.ones(8)),
     r"bias is on cpu"),
    (lambda: njt.rms_norm(randn((2, 8), torch.float32), (8,), randn((2, 4), torch.float32)),
     r"weight has shape \[2, 4\]; expected \[8\]"),
    (lambda: njt.group_norm(randn((2, 6, 4), torch.float32), 4), r"num_groups 4"),
    (lambda: njt.layer_norm(randn((2, 8), torch.float32), (4,)), r"normalized_shape \[4\]"),
])
def test_bad_arguments_on_cuda(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, dim=256, channels=32):
        super().__init__()
        self.lin = torch.nn.Linear(dim, dim)
        self.ln = njt.LayerNorm(dim)
        self.rms = njt.RMSNorm(dim, eps=1e-6)
        self.gn = njt.GroupNorm(8, channels)
        self.channels = channels

    def forward(self, x):
        h = self.rms(torch.nn.functional.silu(self.lin(self.ln(x))))
        g = h.reshape(h.shape[0], self.channels, -1)
        g = self.gn(g) + njt.rms_norm_channels(g, None, 1e-5)
        return g.reshape(h.shape) + njt.layer_norm(h, (h.shape[-1],), None, None, 1e-6)


def make_block(dtype=torch.float32):
    torch.manual_seed(1)
    m = Block().to(DEV, dtype).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


def test_compile_fullgraph_no_graph_breaks_and_custom_ops_in_graph():
    m = make_block()
    x = randn((4, 16, 256), torch.float32)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with torch.no_grad():
        eager = m(x)
        torch._dynamo.reset()
        compiled = torch.compile(m, fullgraph=True, backend=capture)
        assert torch.allclose(compiled(x), eager, rtol=1e-5, atol=1e-5)
        code = "\n".join(g.code for g in graphs)
        for op in ("rms_norm", "layer_norm", "group_norm", "rms_norm_channels"):
            assert f"normjit.{op}" in code, code
        explanation = torch._dynamo.explain(m)(x)
        assert explanation.graph_break_count == 0, explanation


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_compile_inductor_fullgraph_matches_eager(dtype):
    m = make_block(dtype)
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True)
    with torch.no_grad():
        for rows in (4, 9):  # a second batch size: recompiles or dynamic, either way correct
            x = randn((rows, 16, 256), dtype)
            got, eager = compiled(x), m(x)
            assert rel_err(got, eager) < TOL[dtype], rel_err(got, eager)


@pytest.mark.parametrize("op, args", [
    ("rms_norm", lambda: (randn((3, 64), torch.bfloat16), [64], randn((64,), torch.bfloat16),
                          1e-6)),
    ("rms_norm_channels", lambda: (randn((2, 8, 5), torch.float32), None, 1e-5)),
    ("layer_norm", lambda: (randn((3, 2, 64), torch.float16), [2, 64], None, None, 1e-5)),
    ("group_norm", lambda: (randn((2, 16, 9), torch.float32), 4, randn((16,), torch.float32),
                            randn((16,), torch.float32), 1e-5)),
])
def test_opcheck_on_cuda(op, args):
    torch.library.opcheck(getattr(torch.ops.normjit, op).default, args(),
                          test_utils=("test_schema", "test_faketensor"))


# ---------------------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------------------

def capture_and_replay(fn, make_input, n_new=3):
    static_x = make_input()
    prepared = njt.warmup(fn, static_x)
    stream = torch.cuda.Stream()  # fresh: first used inside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        static_y = fn(static_x)
    for _ in range(n_new):
        new = make_input()
        static_x.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            expected = fn(new)
        assert rel_err(static_y, expected) < 1e-6, rel_err(static_y, expected)
    return prepared


def test_cuda_graph_capture_on_fresh_stream_and_replay():
    m = make_block()
    prepared = capture_and_replay(m, lambda: randn((4, 16, 256), torch.float32))
    assert prepared >= 0


def test_cuda_graph_of_a_split_row_kernel():
    """Rows of 2^20 elements: the cooperative split kernel, whose workspace must exist
    before the capture."""
    capture_and_replay(lambda x: njt.layer_norm(x, (1 << 20,)),
                       lambda: randn((2, 1 << 20), torch.float32, 3.0, 1.5))


def test_warmup_prepares_kernels():
    x = randn((3, 333), torch.float32)
    assert njt.warmup(lambda t: njt.rms_norm(t, (333,)), x) == 1
    assert njt.warmup(lambda t: njt.rms_norm(t, (333,)), x) == 0


# ---------------------------------------------------------------------------------------
# patch() on models written by others
# ---------------------------------------------------------------------------------------

def compare_patched(model, inputs, wide_dtype, run=lambda m, x: m(x)):
    """(error of the original, error of the patched, report, fallback warnings) against the
    same model in wide_dtype."""
    wide = copy.deepcopy(model).to(wide_dtype)
    with torch.no_grad():
        ref = run(wide, inputs)
        orig = run(model, inputs)
        report = njt.patch(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", njt.NormjitFallbackWarning)
            patched = run(model, inputs)
    fallbacks = [str(w.message) for w in caught
                 if issubclass(w.category, njt.NormjitFallbackWarning)]
    return rel_err(orig, ref), rel_err(patched, ref), f"{report}\nfallbacks: {fallbacks}"


@pytest.mark.parametrize("dtype, wide", [(torch.float32, torch.float64),
                                         (torch.bfloat16, torch.float32)], ids=["f32", "bf16"])
def test_patch_llama(dtype, wide, out_dir):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=1000,
                                      max_position_embeddings=256, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(DEV, dtype).eval()
    with torch.no_grad():  # RMSNorm weights start at 1: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    ids = torch.randint(0, 1000, (2, 37), device=DEV)
    keys = list(model.state_dict())
    n_norms = sum(type(m).__name__.endswith("RMSNorm") for m in model.modules())
    err_orig, err_patched, text = compare_patched(
        model, ids, wide, run=lambda m, x: m(input_ids=x).logits.float())
    replaced = [type(m).__name__ for m in model.modules() if type(m).__name__.startswith("Normjit")]
    assert n_norms == 5 and replaced == ["NormjitLlamaRMSNorm"] * 5, text
    assert list(model.state_dict()) == keys
    msg = f"llama {dtype}: original {err_orig:.3e}, patched {err_patched:.3e}\n{text}"
    if out_dir:
        with open(out_dir / "patch.log", "a") as f:
            f.write(msg + "\n")
    print(msg)
    assert err_patched <= 1.5 * err_orig + TOL[dtype] / 10, msg


@pytest.mark.parametrize("name, kwargs, shape", [
    ("vit_tiny_patch16_224", {"img_size": 64}, (2, 3, 64, 64)),      # LayerNorm rows
    ("resnet50_gn", {}, (2, 3, 64, 64)),                               # GroupNorm, 32 groups
])
@pytest.mark.parametrize("dtype, wide", [(torch.float32, torch.float64),
                                         (torch.bfloat16, torch.float32)], ids=["f32", "bf16"])
def test_patch_timm(name, kwargs, shape, dtype, wide, out_dir):
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs).to(DEV, dtype)
    model.eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (torch.nn.LayerNorm, torch.nn.GroupNorm)) and mod.weight is not None:
                mod.weight.copy_(1 + 0.3 * torch.randn_like(mod.weight))
                mod.bias.copy_(0.1 * torch.randn_like(mod.bias))
    norms = sum(isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm)) for m in model.modules())
    x = torch.randn(shape, device=DEV).to(dtype)
    err_orig, err_patched, text = compare_patched(
        model, x, wide, run=lambda m, x: m(x.to(next(m.parameters()).dtype)).float())
    patched = sum(type(m).__name__.startswith("Normjit") for m in model.modules())
    assert patched == norms > 0, text
    msg = f"{name} {dtype}: original {err_orig:.3e}, patched {err_patched:.3e}\n{text}"
    if out_dir:
        with open(out_dir / "patch.log", "a") as f:
            f.write(msg + "\n")
    print(msg)
    assert err_patched <= 1.5 * err_orig + TOL[dtype] / 10, msg
