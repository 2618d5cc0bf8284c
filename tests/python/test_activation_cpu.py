"""normjit.torch's activation keyword (issue 19) where there is no GPU: group_norm,
rms_norm_channels, rms_norm, layer_norm, add_rms_norm and add_layer_norm with activation='silu'
or 'gelu' and the modules' keyword. On CPU tensors every call falls back to PyTorch's norm then
F.silu / F.gelu (approximate='none'), with one warning per reason; bad values name the argument.
With the engine and the launch stubbed (CPU tensors then take the launch path, nothing is
launched), the spec texts that reach the library carry the activation (and compile for sm_90
here); an input that requires grad trains (on CPU tensors, PyTorch's gradient of norm and
activation).
patch() fuses an nn.Sequential's GroupNorm -> SiLU (ldm's ResBlock) and reports what it does
not fuse (a shared SiLU, diffusers' ResnetBlock2D). Needs PyTorch; no GPU."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from conftest import launch_path_into  # noqa: E402

# fresh_warnings: conftest.py; each test starts with no fallback warning given yet.
pytestmark = pytest.mark.usefixtures("fresh_warnings")

ACTS = {"silu": F.silu, "gelu": F.gelu}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def act64(v, name):
    """The activation in float64, written out: silu v / (1 + exp(-v)); gelu v/2 erfc(-v/sqrt2)."""
    v = v.double()
    if name == "silu":
        return v / (1 + torch.exp(-v))
    return 0.5 * v * torch.special.erfc(-v / 2 ** 0.5)


# ---------------------------------------------------------------------------------------
# Fallback on CPU tensors: PyTorch's norm, then its activation; one warning
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("act", ["silu", "gelu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_group_norm_activation_on_cpu_is_torch_norm_then_activation(act, dtype):
    x = torch.randn(2, 32, 5, 7).to(dtype)
    w, b = torch.randn(32).to(dtype), torch.randn(32).to(dtype)
    with pytest.warns(njt.NormjitFallbackWarning, match="group_norm: input on cpu"):
        y = njt.group_norm(x, 8, w, b, 1e-5, activation=act)
    assert torch.equal(y, ACTS[act](F.group_norm(x, 8, w, b, 1e-5)))
    ref = act64(F.group_norm(x.double(), 8, w.double(), b.double(), 1e-5), act)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)  # once per reason
        njt.group_norm(x, 8, w, b, 1e-5, activation=act)


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_every_function_takes_the_activation_on_cpu(act, quiet):
    f = ACTS[act]
    x = torch.randn(3, 16, 4, 4)
    w = torch.randn(16)
    assert torch.equal(njt.rms_norm_channels(x, w, 1e-5, activation=act),
                       f(njt.rms_norm_channels(x, w, 1e-5)))
    b = torch.randn(16)
    assert torch.equal(njt.layer_norm_channels(x, w, b, 1e-6, activation=act),
                       f(njt.layer_norm_channels(x, w, b, 1e-6)))
    m = njt.LayerNorm2d(16, activation=act)
    assert f"activation='{act}'" in repr(m)
    assert torch.equal(m(x), f(njt.layer_norm_channels(x, m.weight, m.bias, 1e-6)))
    r = torch.randn(6, 64)
    wr, br = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(njt.rms_norm(r, 64, wr, 1e-6, activation=act),
                               f(F.rms_norm(r, (64,), wr, 1e-6)))
    torch.testing.assert_close(njt.layer_norm(r, 64, wr, br, activation=act),
                               f(F.layer_norm(r, (64,), wr, br)))
    # With the variants: the activation after the weight offset, before the fp8 scale.
    scale = torch.tensor([4.0])
    y = njt.rms_norm(r, 64, wr, 1e-6, weight_offset=1.0, activation=act,
                     out_dtype=torch.float8_e4m3fn, scale=scale)
    n = f(r * torch.rsqrt(r.square().mean(-1, keepdim=True) + 1e-6) * (1 + wr))
    assert torch.equal(y, (n * 4.0).clamp(-448, 448).to(torch.float8_e4m3fn))
    y, mean, rstd = njt.layer_norm(r, 64, wr, br, activation=act, return_stats=True)
    var, m = torch.var_mean(r, -1, correction=0, keepdim=True)
    torch.testing.assert_close(mean, m)
    torch.testing.assert_close(rstd, torch.rsqrt(var + 1e-5))  # the norm's statistics
    # With a residual: h is the sum, the activation is of y only.
    res = torch.randn(6, 64)
    y, h = njt.add_rms_norm(r, res, 64, wr, 1e-6, activation=act)
    assert torch.equal(h, r + res)
    torch.testing.assert_close(y, f(F.rms_norm(r + res, (64,), wr, 1e-6)))
    y, h = njt.add_layer_norm(r, res, 64, wr, br, activation=act)
    torch.testing.assert_close(y, f(F.layer_norm(r + res, (64,), wr, br)))


def test_activation_none_is_the_plain_call(quiet):
    x = torch.randn(2, 16, 3, 3)
    assert torch.equal(njt.group_norm(x, 4, activation=None), F.group_norm(x, 4))
    assert torch.equal(njt.group_norm(x, 4, activation="none"), F.group_norm(x, 4))
    r = torch.randn(3, 32)
    assert torch.equal(njt.rms_norm(r, 32, activation="none"), F.rms_norm(r, (32,)))


@pytest.mark.parametrize("call, error, match", [
    (lambda x: njt.group_norm(x, 4, activation="relu"), ValueError,
     r"group_norm: activation 'relu' is not one of None, 'silu', 'gelu'"),
    (lambda x: njt.group_norm(x, 4, activation="SiLU"), ValueError, r"activation 'SiLU'"),
    (lambda x: njt.rms_norm_channels(x, activation=1), TypeError,
     r"rms_norm_channels: activation must be None, 'silu' or 'gelu', not int \(1\)"),
    (lambda x: njt.rms_norm(x.flatten(1), 144, activation=F.silu), TypeError,
     r"rms_norm: activation must be None, 'silu' or 'gelu', not function"),
    (lambda x: njt.layer_norm(x, (16, 3, 3), activation="tanh"), ValueError,
     r"layer_norm: activation 'tanh'"),
    (lambda x: njt.GroupNorm(4, 16, activation="swish"), ValueError,
     r"GroupNorm: activation 'swish'"),
    (lambda x: torch.ops.normjit.group_norm(x, 4, None, None, 1e-5, "relu"), ValueError,
     r"group_norm: activation 'relu'"),
])
def test_bad_activation_names_the_argument_and_value(call, error, match, quiet):
    with pytest.raises(error, match=match):
        call(torch.randn(2, 16, 3, 3))


# ---------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------

def test_group_norm_module_keyword_state_dict_and_cpu_forward(quiet):
    m = njt.GroupNorm(8, 32, eps=1e-6, activation="silu")
    ref = nn.GroupNorm(8, 32, eps=1e-6)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    m.load_state_dict(ref.state_dict())
    assert list(m.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    assert "activation='silu'" in repr(m) and "activation" not in repr(njt.GroupNorm(8, 32))
    x = torch.randn(2, 32, 6, 6)
    with torch.no_grad():
        assert torch.equal(m(x), F.silu(ref(x)))
    assert njt.GroupNorm(8, 32, activation="none").activation is None
    ln = njt.LayerNorm(48, activation="gelu")
    rms = njt.RMSNorm(48, eps=1e-6, activation="silu")
    r = torch.randn(5, 48)
    with torch.no_grad():
        # (the variant functions' fallback is their documented float32 expression)
        torch.testing.assert_close(ln(r), F.gelu(F.layer_norm(r, (48,), ln.weight, ln.bias)))
        torch.testing.assert_close(rms(r), F.silu(F.rms_norm(r, (48,), rms.weight, 1e-6)))
    assert list(ln.state_dict()) == ["weight", "bias"] and list(rms.state_dict()) == ["weight"]


def test_training_with_an_activation_is_pytorchs_autograd(quiet):
    """On CPU tensors (the training op's fallback) the gradient is PyTorch's of norm and
    activation."""
    m = njt.GroupNorm(4, 16, activation="gelu")
    x = torch.randn(2, 16, 5, 5, requires_grad=True)
    m(x).square().sum().backward()
    x2 = x.detach().clone().requires_grad_()
    ref = nn.GroupNorm(4, 16)
    F.gelu(ref(x2)).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(m.weight.grad, ref.weight.grad)


# ---------------------------------------------------------------------------------------
# What reaches the library (engine and launch stubbed)
# ---------------------------------------------------------------------------------------

class Stub:
    """Records the spec texts prepared and the launches; launches write nothing."""

    def __init__(self):
        self.specs, self.launches = [], []

    def prepare(self, spec):
        self.specs.append(spec)
        return 0x7F0000001000 + 0x100 * len(self.specs)

    def launch(self, *args):
        self.launches.append(("launch", args))
        return 0

    def launch_ex(self, *args):
        self.launches.append(("launch_ex", args))
        return 0


@pytest.fixture
def stub(monkeypatch):
    """CPU tensors take the launch path; every other check (grad included) is the real one."""
    s = Stub()
    with launch_path_into(monkeypatch, s):
        yield s


def test_specs_carry_the_activation_and_plain_calls_do_not(stub):
    x = torch.randn(2, 320, 8, 8, dtype=torch.float16)
    w, b = torch.randn(320, dtype=torch.float16), torch.randn(320, dtype=torch.float16)
    y = njt.group_norm(x, 32, w, b, 1e-5, activation="silu")
    assert y.shape == x.shape and y.dtype == x.dtype
    assert stub.specs[-1] == ("op=groupnorm shape=2,320,8,8 dtype=f16 groups=32 affine=both "
                              "eps=1e-05 activation=silu")
    assert stub.launches[-1][0] == "launch"
    njt.group_norm(x, 32, w, b, 1e-5)
    assert stub.specs[-1] == ("op=groupnorm shape=2,320,8,8 dtype=f16 groups=32 affine=both "
                              "eps=1e-05")
    njt.group_norm(x, 32, w, b, 1e-5, activation="gelu")
    assert stub.specs[-1].endswith("eps=1e-05 activation=gelu")
    assert len(stub.specs) == 3, "one kernel per activation"
    njt.group_norm(x, 32, w, b, 1e-5, activation="silu")  # prepared: no new spec
    assert len(stub.specs) == 3 and len(stub.launches) == 4
    njt.rms_norm_channels(x, w, activation="gelu")
    assert stub.specs[-1] == ("op=rmsnorm shape=2,320,8,8 dtype=f16 normalized_dims=0 "
                              "affine=weight eps=1e-05 activation=gelu")
    njt.layer_norm_channels(x, w, b, activation="silu")
    assert stub.specs[-1] == ("op=layernorm shape=2,320,8,8 dtype=f16 normalized_dims=0 "
                              "affine=both eps=1e-06 activation=silu")
    r = torch.randn(7, 256, dtype=torch.bfloat16)
    wr = torch.randn(256)
    njt.rms_norm(r, 256, wr, 1e-6, activation="silu")
    assert stub.specs[-1] == ("op=rmsnorm shape=7,256 dtype=bf16 normalized_dims=1 "
                              "affine=weight eps=1e-06 param_dtype=f32 activation=silu")
    assert stub.launches[-1][0] == "launch_ex"
    njt.layer_norm(r, 256, out_dtype=torch.float8_e4m3fn, scale=torch.tensor([2.0]),
                   weight_offset=0.0, activation="gelu", return_stats=True)
    assert stub.specs[-1] == ("op=layernorm shape=7,256 dtype=bf16 normalized_dims=1 "
                              "affine=none eps=1e-05 out_dtype=e4m3 activation=gelu "
                              "save_stats=true")
    res = torch.randn(7, 256, dtype=torch.bfloat16)
    njt.add_rms_norm(r, res, 256, wr, 1e-6, activation="silu", inplace=True)
    assert stub.specs[-1] == ("op=rmsnorm shape=7,256 dtype=bf16 normalized_dims=1 "
                              "affine=weight eps=1e-06 param_dtype=f32 residual=bf16 "
                              "activation=silu")
    # The module's forward: the kernel of the first call's spec (prepared once).
    count = len(stub.specs)
    m = njt.GroupNorm(32, 320, activation="silu").half()
    with torch.no_grad():
        m(x)
    assert len(stub.specs) == count
    kind, args = stub.launches[-1]
    assert kind == "launch" and args[0] == 0x7F0000001000 + 0x100 * 1  # the first spec's
    assert args[1] == x.data_ptr() and args[3] == m.weight.data_ptr()


def test_spec_texts_compile_for_sm_90(stub, tmp_path):
    """What the package asks for is what the library takes (NVRTC runs here, no GPU)."""
    x = torch.randn(3, 96, 7, 9, dtype=torch.bfloat16)
    njt.group_norm(x, 8, activation="gelu")
    njt.rms_norm(torch.randn(2, 100), 100, activation="silu")
    njt.rms_norm_channels(torch.randn(2, 16, 5), activation="silu")
    assert len(stub.specs) == 3
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        for spec in stub.specs:
            assert engine.precompile(spec, arch="sm_90") is True, spec


def test_requires_grad_with_an_activation_takes_the_training_path(stub):
    """An input that requires grad with an activation: the training forward (the spec with the
    activation and save_stats, through launch_ex), no fallback warning; the result has a grad_fn
    (its backward is the backward op's, test_autograd_activation_cpu.py's)."""
    x = torch.randn(2, 16, 5, 5, requires_grad=True)
    w, b = torch.randn(16), torch.randn(16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        y = njt.group_norm(x, 4, w, b, activation="silu")
        r = torch.randn(3, 64, requires_grad=True)
        z = njt.rms_norm(r, 64, activation="gelu")
    assert y.grad_fn is not None and z.grad_fn is not None
    assert [kind for kind, _ in stub.launches] == ["launch_ex", "launch_ex"]
    assert "activation=silu" in stub.specs[0] and "save_stats=true" in stub.specs[0]
    assert stub.specs[1].endswith(" activation=gelu save_stats=true"), stub.specs[1]


@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15),
                    reason="with PyTorch before 2.15 (2.11 on the GPU machine) dynamo raises an "
                           "InternalTorchDynamoError tracing the stubbed launch path of this test; "
                           "test_activation_gpu.py's compile test covers the real one")
def test_fake_implementations_and_the_compiled_graph(stub):
    from torch._subclasses.fake_tensor import FakeTensorMode
    ops = torch.ops.normjit
    with FakeTensorMode():
        x = torch.empty(2, 64, 8, 8, dtype=torch.float16)
        assert ops.group_norm(x, 8, None, None, 1e-5, "silu").shape == x.shape
        assert ops.rms_norm_channels(x, None, 1e-5, "gelu").dtype == torch.float16
        r = torch.empty(4, 128, dtype=torch.bfloat16)
        y = ops.rms_norm_ex(r, [128], None, 1e-6, 0.0, torch.float8_e4m3fn,
                            torch.empty(1), "silu")
        assert y.dtype == torch.float8_e4m3fn
    calls = []

    def backend(gm, example_inputs):
        calls.extend((str(n.target), n.args) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    def fn(x, r):
        return (njt.group_norm(x, 8, activation="silu"),
                njt.layer_norm(r, 128, activation="gelu"))

    x = torch.randn(2, 64, 8, 8)
    r = torch.randn(4, 128)
    torch.compile(fn, backend=backend, fullgraph=True)(x, r)
    targets = {target.removesuffix(".default"): args for target, args in calls}
    assert targets["normjit.group_norm"][1:] == (8, None, None, 1e-5, "silu"), calls
    assert targets["normjit.layer_norm_ex"][-1] == "gelu", calls


def test_opcheck_of_the_ops_with_an_activation(quiet):
    x = torch.randn(2, 16, 3, 3)
    torch.library.opcheck(torch.ops.normjit.group_norm, (x, 4, None, None, 1e-5, "silu"))
    torch.library.opcheck(torch.ops.normjit.rms_norm_channels, (x, None, 1e-5, "gelu"))
    torch.library.opcheck(torch.ops.normjit.rms_norm_ex,
                          (x.flatten(1), [144], None, 1e-6, 0.0, None, None, "silu"))


# ---------------------------------------------------------------------------------------
# patch(): GroupNorm -> SiLU pairs
# ---------------------------------------------------------------------------------------

class GroupNorm32(nn.GroupNorm):
    """ldm/modules/diffusionmodules/util.py's."""

    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


class LdmResBlock(nn.Module):
    """The original Stable Diffusion's ResBlock, reduced: in_layers and out_layers are
    Sequentials of GroupNorm32, SiLU, (Dropout,) conv."""

    def __init__(self, channels=32):
        super().__init__()
        self.in_layers = nn.Sequential(GroupNorm32(8, channels), nn.SiLU(),
                                       nn.Conv2d(channels, channels, 3, padding=1))
        self.out_layers = nn.Sequential(GroupNorm32(8, channels), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.out_layers(self.in_layers(x))


class DiffusersResnetBlock2D(nn.Module):
    """diffusers' ResnetBlock2D, reduced: one SiLU module applied three times in forward."""

    def __init__(self, channels=32, temb=16):
        super().__init__()
        self.norm1 = nn.GroupNorm(8, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, channels)
        self.norm2 = nn.GroupNorm(8, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.nonlinearity = nn.SiLU()

    def forward(self, x, temb):
        h = self.conv1(self.nonlinearity(self.norm1(x)))
        h = h + self.time_emb_proj(self.nonlinearity(temb))[:, :, None, None]
        return x + self.conv2(self.nonlinearity(self.norm2(h)))


def test_patch_fuses_ldm_group_norm_silu_and_unpatch_restores(quiet):
    torch.manual_seed(0)
    model = nn.Sequential(LdmResBlock(), LdmResBlock()).eval()
    x = torch.randn(2, 32, 8, 8)
    with torch.no_grad():
        before = model(x)
    silus = [m for m in model.modules() if isinstance(m, nn.SiLU)]
    report = njt.patch(model)
    fused = [(n, c) for n, c in report.replaced if "fused" in c]
    assert [n for n, _ in fused] == ["0.in_layers.0", "0.out_layers.0", "1.in_layers.0",
                                     "1.out_layers.0"], report
    assert "GroupNorm32 + torch.nn.modules.activation.SiLU at 0.in_layers.1" in fused[0][1]
    assert "activation='silu'" in fused[0][1]
    for block in model:
        for seq in (block.in_layers, block.out_layers):
            assert isinstance(seq[1], nn.Identity) and not isinstance(seq[1], nn.SiLU)
            assert type(seq[0])._normjit_activation == "silu"
            assert isinstance(seq[0], GroupNorm32)  # still the layer it was
    assert not any(isinstance(m, nn.SiLU) for m in model.modules())
    with torch.no_grad():
        assert torch.equal(model(x), before)  # CPU: GroupNorm32's forward, then F.silu
    again = njt.patch(model)
    assert not any("fused" in c for _, c in again.replaced), again
    assert njt.unpatch(model) == 4
    assert [m for m in model.modules() if isinstance(m, nn.SiLU)] == silus  # the same objects
    assert all(type(block.in_layers[0]) is GroupNorm32 for block in model)
    with torch.no_grad():
        assert torch.equal(model(x), before)


def test_patch_fuses_the_pairs_of_a_resnet_block_forward_and_keeps_its_time_embedding_silu(
        quiet):
    torch.manual_seed(0)
    block = DiffusersResnetBlock2D().eval()
    x, temb = torch.randn(2, 32, 8, 8), torch.randn(2, 16)
    with torch.no_grad():
        before = block(x, temb)
    report = njt.patch(block)
    assert [n for n, _ in report.replaced] == ["", "norm1", "norm2"], report
    assert report.replaced[0][1].startswith(
        "test_activation_cpu.DiffusersResnetBlock2D: GroupNorm -> SiLU fused in its forward "
        "(norm1 -> nonlinearity, norm2 -> nonlinearity; activation='silu'"), report
    assert not report.skipped, report
    assert isinstance(block, DiffusersResnetBlock2D)  # a subclass: isinstance still holds
    assert type(block.nonlinearity) is nn.SiLU  # still applied to the time embedding
    assert type(block)._normjit_fused_pairs == (("norm1", "nonlinearity"),
                                                ("norm2", "nonlinearity"))
    with torch.no_grad():
        assert torch.equal(block(x, temb), before)  # CPU: each GroupNorm's forward, then F.silu
    again = njt.patch(block)
    assert not again.replaced and ("", "DiffusersResnetBlock2D", "already patched") in \
        again.skipped, again
    assert njt.unpatch(block) == 3
    assert type(block) is DiffusersResnetBlock2D
    with torch.no_grad():
        assert torch.equal(block(x, temb), before)


class StatementResnetBlock(nn.Module):
    """diffusers' ResnetBlock2D's statements: norm1 then the SiLU (shape 1); norm2 at the end of
    two of three branches, the SiLU after the if (shape 2); 'scale_shift' changes the norm's
    output before the SiLU and must keep the two apart."""

    def __init__(self, mode="default", channels=32, temb=16):
        super().__init__()
        self.mode = mode
        self.norm1 = nn.GroupNorm(8, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb, 2 * channels if mode == "scale_shift" else channels)
        self.norm2 = nn.GroupNorm(8, channels)
        self.nonlinearity = nn.SiLU()

    def forward(self, input_tensor, temb):
        hidden_states = input_tensor
        hidden_states = self.norm1(hidden_states)
        hidden_states = self.nonlinearity(hidden_states)
        hidden_states = self.conv1(hidden_states)
        temb = self.nonlinearity(temb)
        temb = self.time_emb_proj(temb)[:, :, None, None]
        if self.mode == "default":
            hidden_states = hidden_states + temb
            hidden_states = self.norm2(hidden_states)
        elif self.mode == "scale_shift":
            time_scale, time_shift = torch.chunk(temb, 2, dim=1)
            hidden_states = self.norm2(hidden_states)
            hidden_states = hidden_states * (1 + time_scale) + time_shift
        else:
            hidden_states = self.norm2(hidden_states)
        hidden_states = self.nonlinearity(hidden_states)
        return input_tensor + hidden_states


@pytest.mark.parametrize("mode", ["default", "scale_shift", "group"])
def test_patch_fuses_statements_and_the_branches_that_end_with_the_norm(quiet, mode):
    torch.manual_seed(0)
    block = StatementResnetBlock(mode).eval()
    x, temb = torch.randn(2, 32, 8, 8), torch.randn(2, 16)
    with torch.no_grad():
        before = block(x, temb)
    report = njt.patch(block)
    assert "(norm1 -> nonlinearity, norm2 -> nonlinearity;" in report.replaced[0][1], report
    with torch.no_grad():
        assert torch.equal(block(x, temb), before)


def test_fused_statements_launch_the_fused_kernel_only_where_the_silu_follows(stub):
    """With the launch stubbed: 'default' runs norm1 and norm2 as the GroupNorm + SiLU kernel;
    'scale_shift' norm1 fused and norm2 plain (its output is scaled before the SiLU)."""
    silu = "op=groupnorm shape=2,32,8,8 dtype=f16 groups=8 affine=both eps=1e-05 activation=silu"
    plain = "op=groupnorm shape=2,32,8,8 dtype=f16 groups=8 affine=both eps=1e-05"
    for mode, expected in (("default", [silu, silu]), ("scale_shift", [silu, plain])):
        block = StatementResnetBlock(mode).half().eval()
        block.conv1 = nn.Identity()  # (no f16 convolution on CPU)
        njt.patch(block)
        x, temb = torch.randn(2, 32, 8, 8).half(), torch.randn(2, 16).half()
        first = len(stub.launches)
        with torch.no_grad():
            block(x, temb)
        # The stub's handle of the k-th spec prepared (each spec is prepared once).
        handles = {spec: 0x7F0000001000 + 0x100 * k for k, spec in enumerate(stub.specs, 1)}
        launched = [args[0] for _, args in stub.launches[first:]]
        assert launched == [handles[spec] for spec in expected], (mode, stub.specs, launched)


class SuperBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 8)
        self.act = nn.SiLU()

    def forward(self, x):
        x = self.norm(x)
        x = self.act(x)
        return super().forward(x) if False else x


def test_a_fused_sequential_pair_under_autograd_runs_the_trainable_group_norm(stub):
    model = nn.Sequential(nn.GroupNorm(32, 320), nn.SiLU()).half()
    njt.patch(model)
    x = torch.randn(1, 320, 4, 4, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(x)  # the parameters require grad: autograd records the call
    assert stub.specs == ["op=groupnorm shape=1,320,4,4 dtype=f16 groups=32 affine=both "
                          "eps=1e-05 activation=silu save_stats=true"]
    with torch.no_grad():
        model(x)
    assert stub.specs[-1].endswith("eps=1e-05 activation=silu")


def test_a_fused_place_under_autograd_runs_normjits_trainable_group_norm_silu(stub):
    """Where autograd records the call (the parameters require grad, as a module's do outside
    torch.no_grad()), the fused place runs normjit's GroupNorm -> SiLU training forward
    (save_stats with the activation; the backward kernel of the pair later)."""
    block = StatementResnetBlock("group").half()
    block.conv1 = nn.Identity()
    njt.patch(block)
    x, temb = torch.randn(2, 32, 8, 8).half(), torch.randn(2, 16).half()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the stub writes nothing: PyTorch may warn of NaN)
        block(x, temb)
    assert stub.specs and all(spec.endswith("activation=silu save_stats=true")
                              for spec in stub.specs), stub.specs


def test_patch_reports_forwards_it_does_not_rewrite(quiet, tmp_path, monkeypatch):
    report = njt.patch(SuperBlock())
    (skip,) = [s for s in report.skipped if "not fused" in s[2]]
    assert "GroupNorm norm not fused with the SiLU act: its forward calls super()" in skip[2]
    # No source (defined by exec): reported, the GroupNorm patched alone.
    namespace = {"nn": nn}
    exec("class NoSource(nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "        self.norm, self.act = nn.GroupNorm(2, 8), nn.SiLU()\n"
         "    def forward(self, x):\n"
         "        return self.act(self.norm(x))\n", namespace)
    report = njt.patch(namespace["NoSource"]())
    assert any("its forward's source cannot be read" in s[2] for s in report.skipped), report
    assert [n for n, _ in report.replaced] == ["norm"]
    # A hooked SiLU: not fused (a fused call would bypass the hook).
    block = DiffusersResnetBlock2D()
    block.nonlinearity.register_forward_hook(lambda m, i, o: None)
    report = njt.patch(block)
    assert any("nonlinearity has forward hooks" in s[2] for s in report.skipped), report
    assert type(block).__name__ == "DiffusersResnetBlock2D"
    # A source file edited after the import: its text is not the loaded code; not rewritten.
    source = tmp_path / "edited_block.py"
    source.write_text("import torch.nn as nn\n\n\n"
                      "class Edited(nn.Module):\n"
                      "    def __init__(self):\n"
                      "        super().__init__()\n"
                      "        self.norm, self.act = nn.GroupNorm(2, 8), nn.SiLU()\n\n"
                      "    def forward(self, x):\n"
                      "        x = self.norm(x)\n"
                      "        x = self.act(x)\n"
                      "        return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import linecache
    edited = importlib.import_module("edited_block")
    source.write_text(source.read_text().replace("return x", "return x * 2"))
    linecache.clearcache()
    module = edited.Edited()
    report = njt.patch(module)
    assert any("its forward's source is not the code that is loaded" in s[2]
               for s in report.skipped), report
    assert type(module) is edited.Edited


def test_patch_does_not_fuse_a_shared_or_hooked_silu(quiet):
    act = nn.SiLU()
    model = nn.Sequential(nn.Sequential(nn.GroupNorm(2, 8), act),
                          nn.Sequential(nn.GroupNorm(2, 8), act))
    report = njt.patch(model)
    skipped = [s for s in report.skipped if "not fused" in s[2]]
    assert [s[0] for s in skipped] == ["0.1", "1.1"], report
    assert "the SiLU module is shared: it is at 0.1, 1.1" in skipped[0][2]
    assert model[0][1] is act and model[1][1] is act
    assert [n for n, _ in report.replaced] == ["0.0", "1.0"]  # the GroupNorms, alone
    hooked = nn.Sequential(nn.GroupNorm(2, 8), nn.SiLU())
    hooked[1].register_forward_hook(lambda m, i, o: None)
    report = njt.patch(hooked)
    assert isinstance(hooked[1], nn.SiLU)
    assert any("SiLU has forward hooks" in s[2] for s in report.skipped), report


def test_fused_pair_launches_one_kernel_with_the_activation(stub):
    model = nn.Sequential(nn.GroupNorm(32, 320), nn.SiLU(), nn.Conv2d(320, 8, 1)).half()
    njt.patch(model)
    x = torch.randn(1, 320, 4, 4, dtype=torch.float16)
    with torch.no_grad():
        model[0](x)
        model[1](x)
    assert stub.specs == ["op=groupnorm shape=1,320,4,4 dtype=f16 groups=32 affine=both "
                          "eps=1e-05 activation=silu"]
    assert len(stub.launches) == 1


def test_patch_fuses_the_group_norm_silu_pairs_of_diffusers_models(quiet):
    """diffusers' own classes (where it is installed): every ResnetBlock2D of a tiny VAE and
    its Encoder's and Decoder's conv_norm_out -> conv_act fused in their forwards, the outputs
    unchanged (CPU: each GroupNorm's forward, then F.silu), torch.compile(fullgraph=True) of a
    patched block, unpatch() restoring every class; a tiny UNet2DConditionModel, its decorated
    forward's conv_norm_out -> conv_act too."""
    diffusers = pytest.importorskip("diffusers", reason="diffusers is not installed")
    from diffusers.models.resnet import ResnetBlock2D
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(block_out_channels=(32, 64),
                                  down_block_types=("DownEncoderBlock2D",) * 2,
                                  up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                                  norm_num_groups=8, sample_size=16).eval()
    img = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        before = vae(img, sample_posterior=False).sample
    classes = {name: type(m) for name, m in vae.named_modules()}
    report = njt.patch(vae)
    fused = {name: text for name, text in report.replaced if "fused in its forward" in text}
    blocks = [n for n, m in vae.named_modules() if isinstance(m, ResnetBlock2D)]
    assert blocks and set(blocks) <= set(fused), report
    assert all("(norm1 -> nonlinearity, norm2 -> nonlinearity;" in fused[n] for n in blocks)
    assert "(conv_norm_out -> conv_act;" in fused["encoder"]
    assert "(conv_norm_out -> conv_act;" in fused["decoder"]
    with torch.no_grad():
        assert torch.equal(vae(img, sample_posterior=False).sample, before)
    block = vae.decoder.up_blocks[0].resnets[0]
    x = torch.randn(1, block.in_channels, 8, 8)
    with torch.no_grad():
        ref = block(x, None)
        torch._dynamo.reset()
        assert torch.equal(torch.compile(block, fullgraph=True, backend="eager")(x, None), ref)
    njt.unpatch(vae)
    assert {name: type(m) for name, m in vae.named_modules()} == classes
    # The UNet's forward is decorated (apply_lora_scale, a functools.wraps wrapper): the wrapper
    # stays, around its rewritten forward.
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        layers_per_block=1, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        norm_num_groups=8, attention_head_dim=8).eval()
    x, t, ctx = torch.randn(2, 4, 8, 8), torch.tensor([10, 500]), torch.randn(2, 5, 32)
    with torch.no_grad():
        before = unet(x, t, ctx).sample
    report = njt.patch(unet)
    fused = {name: text for name, text in report.replaced if "fused in its forward" in text}
    assert "(conv_norm_out -> conv_act;" in fused[""], report
    blocks = [n for n, m in unet.named_modules() if isinstance(m, ResnetBlock2D)]
    assert set(fused) == set(blocks) | {""}, report
    with torch.no_grad():
        assert torch.equal(unet(x, t, ctx).sample, before)
