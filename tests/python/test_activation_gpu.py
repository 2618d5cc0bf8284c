"""normjit.torch's activation keyword (issue 19) on a GPU: group_norm, rms_norm_channels,
rms_norm, layer_norm and the modules with activation='silu'/'gelu' against float64 (the norm,
then the activation, in float64) over diffusion and odd shapes, dtypes and adversarial inputs
(poisoned outputs must be fully written); fp8 output scaled after the activation; patch() of
an ldm-style UNet (GroupNorm32 -> SiLU fused) and of a diffusers-style ResnetBlock2D (the pairs
in its forward's code fused) against the unpatched model and float64;
torch.compile(fullgraph=True); a CUDA-graph capture on a fresh stream; training through
normjit's backward kernels with the activation (against float64 autograd, bits, a captured
graph of forward and backward). Skips with a reason without PyTorch or a CUDA device."""
import copy

import pytest

from gpu_common import DEV, DTYPES, randn, rel_err, torch  # skips without PyTorch or a GPU
import torch.nn.functional as F
from torch import nn

import normjit.torch as njt

pytestmark = pytest.mark.usefixtures("no_fallback")

# ||y - ref|| / ||ref||: f32 as test_torch_gpu.py's (the activation adds at most 2e-6 of
# |act(v)| + 1e-6, tests/gpu/variants_test.cpp's kActivationError); 16-bit outputs: their
# rounding.
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
ACTS = ["silu", "gelu"]


def act64(v, name):
    v = v.double()
    if name == "silu":
        return v / (1 + torch.exp(-v))
    return 0.5 * v * torch.special.erfc(-v / 2 ** 0.5)


def check(y, ref, x, dtype):
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    err = rel_err(y, ref)
    assert err < TOL[dtype], f"rel. err {err:.2e} against float64"
    return err


GROUPS = [((2, 320, 64, 64), 32), ((2, 640, 32, 32), 32), ((1, 1280, 8, 8), 32),
          ((3, 96, 7, 9), 8), ((2, 8, 3), 4), ((2, 64, 256, 256), 4), ((1, 3, 5, 5, 5), 3)]
DISTS = [(0.0, 1.0), (100.0, 1.0), (0.0, 1e-3), (-3.0, 5.0)]  # (mean, std)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", GROUPS, ids=str)
def test_group_norm_activation_against_float64(shape, groups, dtype, act):
    w, b = randn(shape[1:2], dtype, 1.0, 0.5), randn(shape[1:2], dtype, 0.0, 1.0)
    module = njt.GroupNorm(groups, shape[1], activation=act, device=DEV, dtype=dtype)
    with torch.no_grad():
        module.weight.copy_(w)
        module.bias.copy_(b)
    for mean, std in DISTS:
        x = randn(shape, dtype, mean, std)
        ref = act64(F.group_norm(x.double(), groups, w.double(), b.double(), 1e-5), act)
        check(njt.group_norm(x, groups, w, b, 1e-5, activation=act), ref, x, dtype)
        with torch.no_grad():
            check(module(x), ref, x, dtype)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_and_channel_forms_against_float64(dtype, act):
    for shape in [(7, 4096), (3, 4097), (2, 3, 127), (5, 1), (2, 1 << 20)]:
        n = shape[-1]
        x = randn(shape, dtype, 0.5, 2.0)
        w, b = randn((n,), dtype, 1.0, 0.5), randn((n,), dtype)
        ref = act64(F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5), act)
        check(njt.layer_norm(x, n, w, b, activation=act), ref, x, dtype)
        ref = act64(F.rms_norm(x.double(), (n,), w.double(), 1e-6), act)
        check(njt.rms_norm(x, n, w, 1e-6, activation=act), ref, x, dtype)
        with torch.no_grad():
            m = njt.RMSNorm(n, eps=1e-6, activation=act, device=DEV, dtype=dtype)
            m.weight.copy_(w)
            check(m(x), ref, x, dtype)
    for shape in [(2, 64, 33, 17), (3, 5, 7), (1, 4099, 4)]:
        x = randn(shape, dtype, -1.0, 3.0)
        w = randn(shape[1:2], dtype, 1.0, 0.5)
        x64 = x.double()
        n = x64 * torch.rsqrt(x64.square().mean(1, keepdim=True) + 1e-5)
        ref = act64(n * w.double().view(1, -1, *([1] * (x.dim() - 2))), act)
        check(njt.rms_norm_channels(x, w, 1e-5, activation=act), ref, x, dtype)


@pytest.mark.parametrize("act", ACTS)
def test_residual_h_unchanged_and_fp8_scaled_after_the_activation(act):
    x, r = randn((64, 4096), torch.bfloat16), randn((64, 4096), torch.bfloat16)
    w = randn((4096,), torch.float32, 1.0, 0.5)
    y, h = njt.add_rms_norm(x, r, 4096, w, 1e-6, activation=act)
    assert torch.equal(h, (x.float() + r.float()).to(torch.bfloat16))
    check(y, act64(F.rms_norm(h.double(), (4096,), w.double(), 1e-6), act), x, torch.bfloat16)
    scale = torch.tensor([4.0], device=DEV)
    y8 = njt.rms_norm(x, 4096, w, 1e-6, out_dtype=torch.float8_e4m3fn, scale=scale,
                      activation=act)
    n = act64(F.rms_norm(x.double(), (4096,), w.double(), 1e-6), act) * 4.0
    ref8 = n.clamp(-448, 448).to(torch.float8_e4m3fn)
    # Within one e4m3 step (3 mantissa bits) of the correctly rounded reference. The step is
    # built from its exponent bits, exactly: CUDA's float64 pow gave 2.0 ** -4.0 as
    # 0.06249999999999999, failing a y8 one step from a reference near a rounding midpoint
    # (about one element in 100000, with either activation: the check repeated over 40 seeds
    # on the H200, 2026-11-29).
    exponent = torch.floor(torch.log2(n.abs().clamp_min(2 ** -6))).long() - 3
    step = torch.where(n.abs() < 2 ** -6, torch.full_like(n, 2 ** -9),
                       ((exponent + 1023) << 52).view(torch.float64))
    assert ((y8.double() - ref8.double()).abs() <= step).all()
    assert (y8.double() != ref8.double()).double().mean() < 0.01  # nearly all exact


class GroupNorm32(nn.GroupNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.in_layers = nn.Sequential(GroupNorm32(32, c), nn.SiLU(),
                                       nn.Conv2d(c, c, 3, padding=1))
        self.out_layers = nn.Sequential(GroupNorm32(32, c), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x):
        return x + self.out_layers(self.in_layers(x))


def test_patch_ldm_resblocks_against_unpatched_and_float64():
    """In float32 (ldm's float16 runs keep GroupNorm32's parameters in float32, which
    normjit.torch's group_norm does not take with a float16 input yet: it falls back)."""
    torch.manual_seed(0)
    model = nn.Sequential(ResBlock(320), ResBlock(320)).to(DEV).eval()
    for m in model.modules():
        if isinstance(m, nn.GroupNorm):
            with torch.no_grad():
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)
    x = randn((2, 320, 32, 32), torch.float32)
    # The convolutions in float32, not TF32 (cuDNN's default on the H100 gives both runs ~2e-4).
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        patched, unpatched, wide = run_ldm_resblocks(model, x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    err, err0 = rel_err(patched, wide), rel_err(unpatched, wide)
    assert err <= 2 * err0 + 1e-6, (err, err0)
    assert err < 1e-5


def run_ldm_resblocks(model, x):
    """(patched, unpatched, float64) outputs of the ResBlocks on x; patches the model."""
    with torch.no_grad():
        # float64: GroupNorm32 computes in float32 (x.float()), so the wide copy is plain GroupNorm.
        wide_model = copy.deepcopy(model)
        for m in wide_model.modules():
            if isinstance(m, GroupNorm32):
                m.__class__ = nn.GroupNorm
        wide = wide_model.double()(x.double())
        unpatched = model(x)
        report = njt.patch(model)
        assert sum("fused" in c for _, c in report.replaced) == 4, report
        before = njt.prepared_kernels()
        patched = model(x)
        assert njt.prepared_kernels() - before == 1  # one GroupNorm+SiLU kernel for all four
    return patched, unpatched, wide


class CodeResnetBlock(nn.Module):
    """diffusers' ResnetBlock2D's statements (GroupNorm -> SiLU in code, one SiLU module also
    applied to the time embedding; 'scale_shift' scales norm2's output before the SiLU)."""

    def __init__(self, c, temb, mode):
        super().__init__()
        self.mode = mode
        self.norm1 = nn.GroupNorm(32, c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, 2 * c if mode == "scale_shift" else c)
        self.norm2 = nn.GroupNorm(32, c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.nonlinearity = nn.SiLU()

    def forward(self, input_tensor, temb):
        hidden_states = self.norm1(input_tensor)
        hidden_states = self.nonlinearity(hidden_states)
        hidden_states = self.conv1(hidden_states)
        temb = self.time_emb_proj(self.nonlinearity(temb))[:, :, None, None]
        if self.mode == "default":
            hidden_states = self.norm2(hidden_states + temb)
        else:
            time_scale, time_shift = torch.chunk(temb, 2, dim=1)
            hidden_states = self.norm2(hidden_states)
            hidden_states = hidden_states * (1 + time_scale) + time_shift
        hidden_states = self.nonlinearity(hidden_states)
        return input_tensor + self.conv2(hidden_states)


@pytest.mark.parametrize("mode", ["default", "scale_shift"])
def test_patch_fuses_group_norm_silu_in_a_forward_against_unpatched_and_float64(mode):
    """patch() rewrites the block's forward (normjit.torch._fuse_code): its GroupNorm -> SiLU
    pairs each one kernel, norm2 of 'scale_shift' plain; float32, as the ldm test."""
    torch.manual_seed(0)
    block = CodeResnetBlock(96, 40, mode).to(DEV).eval()
    for m in block.modules():
        if isinstance(m, nn.GroupNorm):
            with torch.no_grad():
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)
    # A map size of each mode's own, which no other test prepares: the kernel count below.
    side = 12 if mode == "default" else 10
    x, temb = randn((3, 96, side, side), torch.float32), randn((3, 40), torch.float32)
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            wide = copy.deepcopy(block).double()(x.double(), temb.double())
            unpatched = block(x, temb)
            report = njt.patch(block)
            # (The class's code: both pairs, whichever branch this block's mode takes.)
            assert ("fused in its forward (norm1 -> nonlinearity, norm2 -> nonlinearity;"
                    in report.replaced[0][1]), report
            before = njt.prepared_kernels()
            patched = block(x, temb)
            # default: one GroupNorm + SiLU kernel for both; scale_shift: that and plain norm2.
            assert njt.prepared_kernels() - before == (1 if mode == "default" else 2)
            torch._dynamo.reset()
            compiled = torch.compile(block, fullgraph=True)(x, temb)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    err, err0 = rel_err(patched, wide), rel_err(unpatched, wide)
    assert err <= 2 * err0 + 1e-6, (err, err0)
    assert err < 1e-5
    assert rel_err(compiled, patched) < 1e-5


def test_patch_fuses_a_diffusers_vae_against_unpatched_and_float64():
    """diffusers' own AutoencoderKL (tiny, random weights): every ResnetBlock2D's and the
    Encoder's and Decoder's GroupNorm -> SiLU pairs fused in their forwards, the output against
    the unpatched model's and float64's."""
    diffusers = pytest.importorskip(
        "diffusers", reason="diffusers is not installed (scripts/gpu_suite.sh unpacks the wheels "
                            "of WHEELS, .whl: pip download --no-deps diffusers importlib_metadata "
                            "zipp)")
    from diffusers.models.resnet import ResnetBlock2D
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(block_out_channels=(64, 128),
                                  down_block_types=("DownEncoderBlock2D",) * 2,
                                  up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                                  norm_num_groups=32, sample_size=32).to(DEV).eval()
    img = randn((2, 3, 32, 32), torch.float32)
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            wide = copy.deepcopy(vae).double()(img.double(), sample_posterior=False).sample
            unpatched = vae(img, sample_posterior=False).sample
            report = njt.patch(vae)
            fused = [name for name, text in report.replaced if "fused in its forward" in text]
            blocks = [n for n, m in vae.named_modules() if isinstance(m, ResnetBlock2D)]
            assert set(fused) == set(blocks) | {"encoder", "decoder"}, report
            patched = vae(img, sample_posterior=False).sample
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    err, err0 = rel_err(patched, wide), rel_err(unpatched, wide)
    assert err <= 2 * err0 + 1e-6, (err, err0)


def test_compile_fullgraph_and_cuda_graph_with_an_activation():
    m = njt.GroupNorm(32, 320, activation="silu", device=DEV, dtype=torch.float16)
    x = randn((2, 320, 16, 16), torch.float16)
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True)
    with torch.no_grad():
        assert rel_err(compiled(x), m(x)) < 1e-3
    static_x = randn((2, 320, 16, 16), torch.float16)
    njt.warmup(m, static_x)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        static_y = m(static_x)
    for _ in range(3):
        new = randn((2, 320, 16, 16), torch.float16, -1.0, 2.0)
        static_x.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            assert rel_err(static_y, m(new)) < 1e-6


F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# (op, shape, groups, channels last, dtypes): each dtype a kernel pair to compile per
# activation, so the large shapes take one or two.
TRAIN_CASES = [
    ("group_norm", (2, 320, 16, 16), 32, False, (F32, F16, BF16)),
    ("group_norm", (2, 320, 16, 16), 32, True, (BF16,)),
    ("group_norm", (3, 96, 7, 9), 8, False, (F32, F16)),
    ("group_norm", (2, 8, 3), 4, False, (F32,)),
    ("group_norm", (1, 96, 5, 5, 5), 3, True, (BF16,)),
    ("layer_norm_channels", (2, 96, 7, 7), 0, False, (F32, BF16)),
    ("layer_norm_channels", (2, 96, 7, 7), 0, True, (BF16,)),
    ("rms_norm_channels", (3, 65, 3, 3), 0, False, (F16,)),
    ("layer_norm", (33, 1000), 0, False, (F32, F16, BF16)),
    ("layer_norm", (3, 16384), 0, False, (BF16,)),
    ("layer_norm", (2, 65537), 0, False, (F32, BF16)),
    ("rms_norm", (7, 4096), 0, False, (F16, BF16)),
    ("add_layer_norm", (5, 2048), 0, False, (BF16,)),
]
TRAIN_PARAMS = [(op, shape, groups, last, dtype) for op, shape, groups, last, dtypes in TRAIN_CASES
                for dtype in dtypes]


def _train_call(op, x, w, b, groups, act, r=None):
    if op == "group_norm":
        return njt.group_norm(x, groups, w, b, 1e-5, activation=act)
    if op == "layer_norm_channels":
        return njt.layer_norm_channels(x, w, b, 1e-6, activation=act)
    if op == "rms_norm_channels":
        return njt.rms_norm_channels(x, w, 1e-6, activation=act)
    if op == "layer_norm":
        return njt.layer_norm(x, x.shape[-1:], w, b, 1e-5, activation=act)
    if op == "rms_norm":
        return njt.rms_norm(x, x.shape[-1:], w, 1e-6, activation=act)
    return njt.add_layer_norm(x, r, x.shape[-1:], w, b, 1e-5, activation=act)[0]


def _reference(op, x, w, b, groups, act, r=None, dtype=None):
    """PyTorch's norm then the activation, in float64 (add_layer_norm: of h rounded to dtype)."""
    f = F.silu if act == "silu" else F.gelu
    if op == "group_norm":
        return f(F.group_norm(x, groups, w, b, 1e-5))
    if op == "layer_norm_channels":
        return f(F.layer_norm(x.movedim(1, -1), x.shape[1:2], w, b, 1e-6).movedim(-1, 1))
    if op == "rms_norm_channels":
        return f(x * torch.rsqrt(x.square().mean(1, keepdim=True) + 1e-6)
                 * w.view((1, -1) + (1,) * (x.dim() - 2)))
    if op == "layer_norm":
        return f(F.layer_norm(x, x.shape[-1:], w, b, 1e-5))
    if op == "rms_norm":
        return f(F.rms_norm(x, x.shape[-1:], w, 1e-6))
    # h = x + residual rounded once to the residual's dtype (add_layer_norm's expression),
    # its gradient passed through unchanged.
    h = x + r
    h = h + (h.detach().to(dtype).double() - h.detach())
    return f(F.layer_norm(h, x.shape[-1:], w, b, 1e-5))


@pytest.mark.parametrize("dist", [(0.0, 1.0), (100.0, 1.0), (-3.0, 5.0)], ids=str)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("op, shape, groups, last, dtype", TRAIN_PARAMS, ids=str)
def test_training_with_an_activation_runs_normjits_backward(op, shape, groups, last, dtype, act,
                                                            dist):
    """A norm with an activation trains through normjit's kernels (no fallback warning: the
    backward kernel of the spec with the activation, given the bias): dx, dweight and dbias
    against float64 autograd of PyTorch's norm followed by the activation, channels-last inputs
    in place (dx channels last), adversarial means and scales, biases that push the
    activation's input far negative and positive."""
    gen = torch.Generator(device=DEV).manual_seed(hash((op, shape, act)) % 2**31)
    x = randn(shape, dtype, *dist, gen=gen)
    if last:
        x = x.movedim(1, -1).contiguous().movedim(-1, 1)
    x.requires_grad_()
    c = shape[1] if op in ("group_norm", "layer_norm_channels", "rms_norm_channels") \
        else shape[-1]
    w = (1 + 0.5 * randn((c,), torch.float64, gen=gen)).to(dtype).requires_grad_()
    b = None if op in ("rms_norm", "rms_norm_channels") else \
        (4 * randn((c,), torch.float64, gen=gen)).to(dtype).requires_grad_()
    r = randn(shape, dtype, gen=gen).requires_grad_() if op == "add_layer_norm" else None
    y = _train_call(op, x, w, b, groups, act, r)
    dy = randn(shape, dtype, gen=gen)
    y.backward(dy)
    if last:
        assert x.grad.is_contiguous(memory_format=torch.channels_last if x.dim() == 4 else
                                    torch.channels_last_3d) or x.dim() == 3
    leaves = [t.detach().double().requires_grad_() if t is not None else None
              for t in (x, w, b, r)]
    ref = _reference(op, leaves[0], leaves[1], leaves[2], groups, act, leaves[3], dtype)
    ref.backward(dy.double())
    tol = TOL[dtype] * (4 if dtype != torch.float32 else 10)
    for name, got, leaf in (("dx", x, leaves[0]), ("dweight", w, leaves[1]),
                            ("dbias", b, leaves[2]), ("dresidual", r, leaves[3])):
        if got is not None:
            err = rel_err(got.grad, leaf.grad)
            assert err < tol, f"{name}: rel. err {err:.2e} against float64"


def test_training_with_an_activation_is_deterministic_and_captures():
    """Two backward passes give the same bits; a CUDA graph of the forward and backward of
    GroupNorm -> SiLU on a fresh stream replays with new inputs."""
    m = njt.GroupNorm(8, 64, activation="silu", device=DEV)
    x = randn((2, 64, 9, 9), torch.float32).requires_grad_()
    grads = []
    for _ in range(2):
        x.grad = m.weight.grad = m.bias.grad = None
        m(x).square().sum().backward()
        grads.append((x.grad.clone(), m.weight.grad.clone(), m.bias.grad.clone()))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    static_x = x.detach().clone().requires_grad_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture
        m(static_x).square().sum().backward()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    static_x.grad = m.weight.grad = m.bias.grad = None
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        m(static_x).square().sum().backward()
    new = randn((2, 64, 9, 9), torch.float32)
    with torch.no_grad():
        static_x.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    x2 = new.clone().requires_grad_()
    ref = nn.GroupNorm(8, 64, device=DEV)
    F.silu(ref(x2)).square().sum().backward()
    assert rel_err(static_x.grad, x2.grad) < 1e-5
