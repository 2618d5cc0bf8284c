"""Training through normjit.torch on a GPU (issue 20): the gradients of x, weight and bias that
normjit's backward kernels give, against float64 autograd of PyTorch's reference, across row
lengths, batches, dtypes, affine forms and adversarial values (large mean, tiny variance); the
training forward's y bit for bit the inference y; determinism (two backward passes bitwise
equal); a directional-derivative check; the backward's fallbacks on CUDA tensors (strided
input, rows without a backward kernel, forward-only functions); torch.compile(fullgraph=True)
of a training step; a CUDA-graph capture of forward and backward on a fresh stream replayed on
new data; weight_offset (Gemma's RMSNorm, zero-centred LayerNorm) against float64; and one
training step each of a small transformers Llama and Gemma (random weights) patched with
normjit.torch.patch(), their gradients against the unpatched model's (float64 as the bar).
Skips with a reason without PyTorch or without a CUDA device."""
import copy
import re

import pytest

from gpu_common import (DEV, DTYPES, assert_directional_derivative, grads_of, leaf, randn,
                        rel_err, torch)  # skips without PyTorch or a GPU
import torch.nn.functional as F

import normjit.torch as njt

pytestmark = pytest.mark.usefixtures("no_fallback")

# Relative error of a gradient against float64: f32 gradients come from f32 statistics and
# f32 sums over up to 1000 rows; f16/bf16 ones are rounded once to their dtype.
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1.6e-2}
HIDDEN = [1, 3, 7, 65, 1000, 4097, 8192]
BATCHES = [1, 3, 1000]


def scales(op, x, shape, weight, dy, offset=0.0):
    """The size of the terms each gradient is a sum of, in float64: rstd * |dy * weight| for
    dx (whose terms cancel to almost nothing where a row's values are nearly equal, e.g. a
    row of one element), the sums of |dy * xhat| and |dy| over the rows for dweight and
    dbias. A float32 computation errs by a few ulps of these, whatever the result's size."""
    k = len(shape)
    dims = tuple(range(x.dim() - k, x.dim()))
    xd, dyd = x.double(), dy.double()
    if op == "rms":
        rstd = torch.rsqrt(xd.square().mean(dims, keepdim=True) + 1e-6)
        xhat = xd * rstd
    else:
        var, mean = torch.var_mean(xd, dims, correction=0, keepdim=True)
        rstd = torch.rsqrt(var + 1e-5)
        xhat = (xd - mean) * rstd
    g = dyd * (weight.double() + offset) if weight is not None else dyd
    lead = tuple(range(x.dim() - k))
    rows = (lambda t: t.sum(lead)) if lead else (lambda t: t)
    return [(rstd * g.abs()).norm().item(), rows((dyd * xhat).abs()).norm().item(),
            rows(dyd.abs()).norm().item()]


def check_grads(op, x, shape, weight, bias, eps, dy, dtype, what="", offset=0.0):
    """normjit's gradients against float64 autograd of F.rms_norm/F.layer_norm: within the
    tolerance relative to the gradient plus 1e-5 of the size of its terms (scales), or no
    worse than twice PyTorch's own in x's dtype. offset: normjit's weight_offset, against
    PyTorch's function of the weight used, offset + weight (PyTorch's own: in float32, as
    transformers' GemmaRMSNorm computes it, the result cast to x's dtype)."""
    kw = {"weight_offset": offset} if offset else {}

    def ours(x, w, b):
        if op == "rms":
            return njt.rms_norm(x, shape, w, eps, **kw)
        return njt.layer_norm(x, shape, w, b, eps, **kw)

    def theirs(x, w, b):  # PyTorch's function of the weight used, in the inputs' dtype
        w = w + offset if offset else w
        if op == "rms":
            return F.rms_norm(x, shape, w, eps)
        return F.layer_norm(x, shape, w, b, eps)

    def own(x, w, b):  # PyTorch's own in x's dtype (with an offset: in float32, then cast)
        if not offset:
            return theirs(x, w, b)
        return theirs(x.float(), w.float(), b.float() if b is not None else None).to(x.dtype)

    _, got = grads_of(ours, (x, weight, bias), dy)
    _, ref = grads_of(theirs, [t.double() if t is not None else None
                               for t in (x, weight, bias)], dy.double())
    _, torch_own = grads_of(own, (x, weight, bias), dy)
    for name, g, r, t, inp, scale in zip(("dx", "dweight", "dbias"), got, ref, torch_own,
                                         (x, weight, bias),
                                         scales(op, x, shape, weight, dy, offset)):
        if inp is None:
            continue
        assert g.dtype == inp.dtype and g.shape == inp.shape, (name, g.dtype, g.shape)
        assert torch.isfinite(g).all(), f"{what} {name}: not finite"
        diff = (g.double() - r).norm().item()
        torch_diff = (t.double() - r).norm().item()
        bound = TOL[dtype] * r.norm().item() + 1e-5 * scale
        assert diff <= bound or diff <= 2 * torch_diff, \
            (f"{what} {name}: |error| {diff:.3e}, bound {bound:.3e} (|gradient| "
             f"{r.norm().item():.3e}, terms {scale:.3e}), PyTorch's own {torch_diff:.3e}")


# ---------------------------------------------------------------------------------------
# Against float64 autograd
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_gradients_against_float64(hidden, batch, dtype, affine):
    torch.manual_seed(hidden * 7 + batch)
    w = randn((hidden,), dtype, 1.0, 0.5) if affine != "none" else None
    b = randn((hidden,), dtype, 0.0, 0.3) if affine == "both" else None
    for mean, std in [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3), (-3.0, 5.0)]:
        x = randn((batch, hidden), dtype, mean, std)
        dy = randn((batch, hidden), dtype)
        check_grads("ln", x, (hidden,), w, b, 1e-5, dy, dtype, f"mean {mean} std {std}")


# (x dtype, weight): the weight in x's dtype, in f32 (not for f32 x: the same as "same"), none.
RMS_WEIGHTS = [(dtype, weight) for dtype in DTYPES for weight in ("same", "f32", "none")
               if not (weight == "f32" and dtype == torch.float32)]


@pytest.mark.parametrize("dtype, weight", RMS_WEIGHTS,
                         ids=[f"{d}-{w}" for d, w in RMS_WEIGHTS])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_rms_norm_gradients_against_float64(hidden, batch, dtype, weight):
    torch.manual_seed(hidden * 11 + batch)
    wdtype = torch.float32 if weight == "f32" else dtype
    w = randn((hidden,), wdtype, 1.0, 0.5) if weight != "none" else None
    for mean, std in [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3)]:
        x = randn((batch, hidden), dtype, mean, std)
        dy = randn((batch, hidden), dtype)
        check_grads("rms", x, (hidden,), w, None, 1e-6, dy, dtype, f"mean {mean} std {std}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch", [1, 1000])
@pytest.mark.parametrize("hidden", [1, 7, 65, 1000, 4097, 8192])
@pytest.mark.parametrize("op", ["rms", "ln"])
def test_weight_offset_gradients_against_float64(op, hidden, batch, dtype):
    """weight_offset=1 trains through normjit's kernels: Gemma's RMSNorm (weights near 0, kept
    in float32 beside a 16-bit x as transformers keeps them) and a zero-centred LayerNorm
    (weight and bias in x's dtype)."""
    torch.manual_seed(hidden * 13 + batch)
    w = randn((hidden,), torch.float32 if op == "rms" else dtype, 0.0, 0.2)
    b = randn((hidden,), dtype, 0.0, 0.3) if op == "ln" else None
    eps = 1e-6 if op == "rms" else 1e-5
    for mean, std in [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3)]:
        x = randn((batch, hidden), dtype, mean, std)
        dy = randn((batch, hidden), dtype)
        check_grads(op, x, (hidden,), w, b, eps, dy, dtype, f"mean {mean} std {std}", 1.0)


# add_rms_norm / add_layer_norm: (op, x dtype, residual dtype)
ADD = [(op, dtype, rdtype) for op in ("rms", "ln") for dtype in DTYPES
       for rdtype in (dtype, torch.float32) if not (rdtype != dtype and dtype == torch.float32)]


def check_add_grads(op, x, r, w, b, eps, dy, dh, offset=0.0, what=""):
    """The fused residual add's training path: h bit for bit (x.float() + residual.float())
    rounded to the residual's dtype; the gradients of x, residual, weight and bias against
    float64 autograd of the norm of that h (the rounding passes the gradient through), with both
    y's and h's gradients given."""
    x, r, w, b = leaf(x), leaf(r), leaf(w), leaf(b)
    kw = {"weight_offset": offset} if offset else {}
    if op == "rms":
        y, h = njt.add_rms_norm(x, r, x.shape[-1], w, eps, **kw)
    else:
        y, h = njt.add_layer_norm(x, r, x.shape[-1], w, b, eps, **kw)
    assert torch.equal(h, (x.detach().float() + r.detach().float()).to(r.dtype)), what
    torch.autograd.backward([y, h], [dy, dh])
    # h's gradient added by the backward kernel of the spec with a residual (rows it holds)
    short = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[r.dtype]
    kernel = rf"^op=\w+ shape=\d+,{x.shape[-1]} dtype={short} .* residual={short} .*backward=true$"
    assert any(re.match(kernel, spec) for spec in njt.prepared_specs()), (what, kernel)
    hd, wd = leaf(h.detach().double()), leaf(w.detach().double())
    bd = leaf(b.detach().double()) if b is not None else None
    if op == "rms":
        yd = F.rms_norm(hd, (x.shape[-1],), wd + offset, eps)
    else:
        yd = F.layer_norm(hd, (x.shape[-1],), wd + offset, bd, eps)
    assert rel_err(y, yd) < (1e-5 if x.dtype == torch.float32 else 1e-2), (what, "y")
    torch.autograd.backward([yd, hd], [dy.double(), dh.double()])
    tol = 1e-4 if x.dtype == r.dtype == torch.float32 else 2e-2
    for name, got, want in (("dx", x.grad, hd.grad), ("dresidual", r.grad, hd.grad),
                            ("dweight", w.grad, wd.grad),
                            ("dbias", b.grad if b is not None else None,
                             bd.grad if bd is not None else None)):
        if want is None:
            continue
        assert got.dtype == {"dx": x, "dresidual": r, "dweight": w, "dbias": b}[name].dtype
        diff = (got.double() - want).norm().item()  # zero gradients (rows of one) within 1e-5
        assert diff <= tol * want.norm().item() + 1e-5, (what, name, diff, want.norm().item())


@pytest.mark.parametrize("op, dtype, rdtype", ADD, ids=[f"{o}-{d}-{r}" for o, d, r in ADD])
@pytest.mark.parametrize("batch", [1, 1000])
@pytest.mark.parametrize("hidden", [1, 7, 65, 1000, 4097, 8192])
def test_add_norm_gradients_against_float64(op, dtype, rdtype, hidden, batch):
    """add_rms_norm and add_layer_norm train through normjit's kernels (the forward with the
    residual saving h's statistics, the norm's backward kernel on h)."""
    torch.manual_seed(hidden * 17 + batch)
    w = randn((hidden,), dtype, 1.0, 0.5)
    b = randn((hidden,), dtype, 0.0, 0.3) if op == "ln" else None
    eps = 1e-6 if op == "rms" else 1e-5
    for mean, std in [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3)]:
        x = randn((batch, hidden), dtype, mean, std)
        r = randn((batch, hidden), rdtype, 0.0, std)
        dy, dh = randn((batch, hidden), dtype), randn((batch, hidden), rdtype)
        check_add_grads(op, x, r, w, b, eps, dy, dh, 0.0, f"mean {mean} std {std}")


@pytest.mark.parametrize("tokens", [1, 7, 1024])
def test_add_rms_norm_gemma_style_trains(tokens):
    """A Gemma-style decoder step: bf16 x, f32 residual, f32 weight near 0, weight_offset=1."""
    torch.manual_seed(tokens)
    x = randn((tokens, 2048), torch.bfloat16)
    r = randn((tokens, 2048), torch.float32)
    w = randn((2048,), torch.float32, 0.0, 0.2)
    dy, dh = randn((tokens, 2048), torch.bfloat16), randn((tokens, 2048), torch.float32)
    check_add_grads("rms", x, r, w, None, 1e-6, dy, dh, 1.0, f"tokens {tokens}")


@pytest.mark.parametrize("shape, normalized", [((2, 3, 64), (64,)), ((4, 13, 17), (13, 17)),
                                               ((2, 8, 16, 16), (8, 16, 16)), ((100,), (100,))],
                         ids=["3d", "two-dims", "three-dims", "no-batch"])
@pytest.mark.parametrize("op", ["rms", "ln"])
def test_several_normalized_dims_and_leading_dims(shape, normalized, op):
    torch.manual_seed(1)
    w = randn(normalized, torch.float32, 1.0, 0.5)
    b = randn(normalized, torch.float32) if op == "ln" else None
    check_grads(op, randn(shape, torch.float32, 2.0, 3.0), normalized, w, b, 1e-5,
                randn(shape, torch.float32), torch.float32)


@pytest.mark.parametrize("op", ["rms", "ln"])
def test_directional_derivative(op):
    """<dx, v> + <dw, u> against the central difference of <y, dy> along (v, u), in float64
    from float32 evaluations (cheap gradcheck: normjit takes no float64)."""
    torch.manual_seed(2)
    x, w, b = randn((8, 65), torch.float32), randn((65,), torch.float32, 1.0, 0.5), None
    if op == "ln":
        b = randn((65,), torch.float32)
    dy = randn((8, 65), torch.float32)
    v, u = randn((8, 65), torch.float32), randn((65,), torch.float32)
    fn = (lambda x, w: njt.rms_norm(x, 65, w, 1e-6)) if op == "rms" else \
        (lambda x, w: njt.layer_norm(x, 65, w, b, 1e-5))
    assert_directional_derivative(fn, x, w, dy, v, u)


# ---------------------------------------------------------------------------------------
# The training forward, determinism
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["rms", "ln"])
@pytest.mark.parametrize("hidden", [7, 4096, 8192, 1 << 16])
def test_training_forward_gives_the_inference_bits(op, hidden, dtype):
    """The forward with save_stats (what training runs) writes the same y as without."""
    x = randn((33, hidden), dtype, 3.0, 2.0)
    w = randn((hidden,), dtype, 1.0, 0.5)
    b = randn((hidden,), dtype)
    fn = (lambda x, w: njt.rms_norm(x, hidden, w, 1e-6)) if op == "rms" else \
        (lambda x, w: njt.layer_norm(x, hidden, w, b, 1e-5))
    with torch.no_grad():
        inference = fn(x, w)
    training = fn(x, leaf(w))
    assert training.grad_fn is not None
    assert torch.equal(training.detach(), inference)


@pytest.mark.parametrize("op", ["rms", "ln"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_two_backward_passes_are_bitwise_equal(op, dtype):
    torch.manual_seed(3)
    x = randn((1000, 4096), dtype, 1.0, 2.0)
    w = randn((4096,), dtype, 1.0, 0.5)
    b = randn((4096,), dtype) if op == "ln" else None
    dy = randn((1000, 4096), dtype)
    fn = (lambda x, w, b: njt.rms_norm(x, 4096, w, 1e-6)) if op == "rms" else \
        (lambda x, w, b: njt.layer_norm(x, 4096, w, b, 1e-5))
    runs = [grads_of(fn, (x, w, b), dy)[1] for _ in range(2)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # another stream, its own workspace
        runs.append(grads_of(fn, (x, w, b), dy)[1])
    torch.cuda.current_stream().wait_stream(side)
    for other in runs[1:]:
        for g, h in zip(runs[0], other):
            if g is not None:
                assert torch.equal(g, h)


# ---------------------------------------------------------------------------------------
# Fallbacks of the backward on CUDA tensors
# ---------------------------------------------------------------------------------------

def test_a_strided_input_trains_through_normjit():
    """A per-head view of a qkv projection: the forward reads it in place; the backward kernel
    reads a contiguous copy (no warning: the module's no_fallback fixture)."""
    torch.manual_seed(4)
    qkv = randn((5, 3 * 4 * 64), torch.bfloat16)
    w = randn((64,), torch.bfloat16, 1.0, 0.3)
    dy = randn((5, 4, 64), torch.bfloat16)

    def fn(qkv, w):
        return njt.rms_norm(qkv[:, :256].view(5, 4, 64), 64, w, 1e-6)

    _, (gq, gw) = grads_of(fn, (qkv, w), dy)
    _, (rq, rw) = grads_of(lambda q, w: F.rms_norm(q[:, :256].view(5, 4, 64), (64,), w, 1e-6),
                           (qkv.double(), w.double()), dy.double())
    assert rel_err(gq, rq) < TOL[torch.bfloat16] and rel_err(gw, rw) < TOL[torch.bfloat16]
    assert gq[:, 256:].abs().max().item() == 0


@pytest.mark.parametrize("op,shape,dtype,affine", [
    ("rms", (3, 16384), torch.float32, "weight"),
    ("rms", (64, 16384), torch.bfloat16, "weight"),  # LLM hidden 16384
    ("layer", (5, 65537), torch.float16, "both"),
    ("layer", (3, 2 ** 21), torch.bfloat16, "both"),  # streamed: past what the chip holds
    ("layer", (16, 64, 256, 256), torch.float32, "both"),  # the LayerNorm seed
], ids=["rms-f32-16384", "rms-bf16-16384", "ln-f16-65537", "ln-bf16-2M", "ln-f32-seed"])
def test_rows_longer_than_one_team_train_through_normjit(op, shape, dtype, affine):
    """Rows past 8192 elements: a team of 1024 threads (16-bit rows of up to 16384) or the split
    backward kernel, not PyTorch's gradient (the autouse fixture makes a fallback an error)."""
    torch.manual_seed(5)
    normalized = shape[1:]
    x, dy = randn(shape, dtype, 1.0, 2.0), randn(shape, dtype)
    w = randn(normalized, dtype, 1.0, 0.5)
    b = randn(normalized, dtype, 0.0, 0.5) if affine == "both" else None
    if op == "rms":
        fn = lambda x, w: njt.rms_norm(x, normalized, w, 1e-6)  # noqa: E731
        ref = lambda x, w: F.rms_norm(x, normalized, w, 1e-6)  # noqa: E731
        inputs = (x, w)
    else:
        fn = lambda x, w, b: njt.layer_norm(x, normalized, w, b, 1e-5)  # noqa: E731
        ref = lambda x, w, b: F.layer_norm(x, normalized, w, b, 1e-5)  # noqa: E731
        inputs = (x, w, b)
    _, grads = grads_of(fn, inputs, dy)
    _, refs = grads_of(ref, [t.double() for t in inputs], dy.double())
    tol = 1e-5 if dtype == torch.float32 else TOL[dtype]
    for name, got, want in zip(("dx", "dweight", "dbias"), grads, refs):
        assert rel_err(got, want) < tol, (name, rel_err(got, want))


@pytest.mark.parametrize("call", [
    lambda x, w: njt.add_rms_norm(x, x.detach() * 0.5, 128, w, 1e-6,
                                  out_dtype=torch.bfloat16)[0],
    lambda x, w: njt.rms_norm(x, 128, w, 1e-6, weight_offset=1.0, return_stats=True)[0],
], ids=["add_rms_norm-bf16-out", "weight_offset-and-stats"])
def test_forward_only_functions_fall_back_with_pytorchs_gradient(call):
    x = leaf(randn((4, 128), torch.float32))
    w = leaf(randn((128,), torch.float32, 1.0, 0.5))
    with pytest.warns(njt.NormjitFallbackWarning, match="is forward-only in normjit"):
        y = call(x, w)
    y.backward(torch.randn_like(y))
    assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()


def test_double_backward_is_pytorchs():
    torch.manual_seed(6)
    x, w = leaf(randn((3, 64), torch.float32)), leaf(randn((64,), torch.float32, 1.0, 0.5))
    dy = randn((3, 64), torch.float32)
    with pytest.warns(njt.NormjitFallbackWarning, match="double backward"):
        (gx,) = torch.autograd.grad(njt.rms_norm(x, 64, w, 1e-6), (x,), dy, create_graph=True)
        gx.square().sum().backward()
    x64, w64 = leaf(x.double()), leaf(w.double())
    (rx,) = torch.autograd.grad(F.rms_norm(x64, (64,), w64, 1e-6), (x64,), dy.double(),
                                create_graph=True)
    rx.square().sum().backward()
    assert rel_err(x.grad, x64.grad) < 1e-4 and rel_err(w.grad, w64.grad) < 1e-4


# ---------------------------------------------------------------------------------------
# torch.compile and CUDA graphs
# ---------------------------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.ln = njt.LayerNorm(hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.rms = njt.RMSNorm(hidden, eps=1e-6)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.out(self.rms(torch.nn.functional.gelu(self.proj(self.ln(x)))))


def make_block(hidden=256, dtype=torch.float32):
    torch.manual_seed(7)
    m = Block(hidden).to(DEV, dtype)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("ln.", "rms.")):
                p.add_(0.3 * torch.randn_like(p))
    return m


def step_grads(model, x, dy):
    model.zero_grad(set_to_none=True)
    x = leaf(x)
    model(x).backward(dy)
    return [x.grad] + [p.grad.clone() for p in model.parameters()]


def test_compile_fullgraph_training_step_matches_eager():
    eager = make_block()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, fullgraph=True)
    x, dy = randn((4, 33, 256), torch.float32), randn((4, 33, 256), torch.float32)
    torch._dynamo.reset()
    try:
        got = step_grads(compiled, x, dy)
        ref = step_grads(eager, x, dy)
    finally:
        torch._dynamo.reset()
    for g, r in zip(got, ref):
        assert rel_err(g, r) < 1e-5, rel_err(g, r)


def test_cuda_graph_capture_of_forward_and_backward_on_a_fresh_stream():
    """PyTorch's whole-network capture recipe: warm-up steps on a side stream (which prepares
    both kernels), then forward and backward captured on a stream first used inside the
    capture, replayed on new data written into the captured input."""
    model = make_block()
    reference = copy.deepcopy(model)
    static_x = leaf(randn((8, 256), torch.float32))
    static_dy = randn((8, 256), torch.float32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            static_x.grad = None
            model(static_x).backward(static_dy)
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    static_x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        model(static_x).backward(static_dy)
    for _ in range(3):
        new_x, new_dy = randn((8, 256), torch.float32, 1.0, 2.0), randn((8, 256), torch.float32)
        with torch.no_grad():
            static_x.copy_(new_x)
            static_dy.copy_(new_dy)
        graph.replay()
        torch.cuda.synchronize()
        ref = step_grads(reference, new_x, new_dy)
        got = [static_x.grad] + [p.grad for p in model.parameters()]
        for g, r in zip(got, ref):
            assert rel_err(g, r) < 1e-6, rel_err(g, r)


# ---------------------------------------------------------------------------------------
# A small transformers Llama and Gemma, patched, one training step
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_patched_training_step_gradients(family, out_dir):
    """One training step of a small model (random weights) patched with normjit.torch.patch():
    Llama's RMSNorm layers, and Gemma's, whose (1 + weight) trains as weight_offset=1."""
    transformers = pytest.importorskip("transformers")
    sizes = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                 max_position_embeddings=256, rms_norm_eps=1e-6)
    if family == "llama":
        config = transformers.LlamaConfig(**sizes)
        model_class, weight_mean = transformers.LlamaForCausalLM, 1.0
    else:
        config = transformers.GemmaConfig(head_dim=64, **sizes)
        model_class, weight_mean = transformers.GemmaForCausalLM, 0.0  # (1 + w) is used
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_class(config).to(DEV, torch.float32).train()
    with torch.no_grad():  # RMSNorm weights start at 1 (Gemma's at 0): make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(weight_mean + 0.3 * torch.randn_like(p))
    wide = copy.deepcopy(model).double()
    patched = copy.deepcopy(model)
    report = njt.patch(patched)
    assert len(report.replaced) == 5, str(report)
    ids = torch.randint(0, 1000, (2, 37), device=DEV)

    def grads(m):
        m.zero_grad(set_to_none=True)
        m(input_ids=ids, labels=ids).loss.backward()
        return {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    ref, orig, ours = grads(wide), grads(model), grads(patched)
    assert orig.keys() == ours.keys() == ref.keys() and len(ours) > 0
    worst, lines = 0.0, []
    for name in ref:
        e_orig, e_ours = rel_err(orig[name], ref[name]), rel_err(ours[name], ref[name])
        lines.append(f"{name}: original {e_orig:.2e}, patched {e_ours:.2e}")
        assert e_ours <= 2 * e_orig + 1e-5, lines[-1]
        worst = max(worst, rel_err(ours[name], orig[name]))
    msg = (f"{family} f32 training step: largest relative difference of a gradient, patched "
           f"vs original: {worst:.2e}\n" + "\n".join(lines))
    if out_dir:
        with open(out_dir / f"autograd-{family}.log", "w") as f:
            f.write(msg + "\n")
    print(msg)
    assert worst < 1e-4, msg
