"""normjit.torch where there is no GPU to run on (CPU tensors): the fallback to PyTorch with
one warning per reason, argument errors naming argument and value, the modules' constructor
and state_dict compatibility with torch.nn, patch()'s choices, and the custom ops' fake
implementations. Needs PyTorch; no GPU."""
import inspect
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
import torch.nn.functional as F  # noqa: E402

import normjit.torch as njt  # noqa: E402
from normjit.torch import _ops  # noqa: E402

# fresh_warnings: conftest.py; each test starts with no fallback warning given yet.
pytestmark = pytest.mark.usefixtures("fresh_warnings")


def test_cpu_tensors_fall_back_with_one_warning():
    x = torch.randn(4, 3, 16)
    w = torch.randn(16)
    with pytest.warns(njt.NormjitFallbackWarning, match=r"rms_norm: input on cpu"):
        y = njt.rms_norm(x, (16,), w, eps=1e-6)
    assert torch.equal(y, F.rms_norm(x, (16,), w, eps=1e-6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason warns once
        y = njt.rms_norm(x, 16, w, 1e-6)
    assert torch.equal(y, F.rms_norm(x, (16,), w, eps=1e-6))
    b = torch.randn(16)
    with pytest.warns(njt.NormjitFallbackWarning, match="layer_norm: input on cpu"):
        assert torch.equal(njt.layer_norm(x, (16,), w, b), F.layer_norm(x, (16,), w, b))
    x4 = torch.randn(2, 6, 5, 5)
    with pytest.warns(njt.NormjitFallbackWarning, match="group_norm: input on cpu"):
        assert torch.equal(njt.group_norm(x4, 3), F.group_norm(x4, 3))
    with pytest.warns(njt.NormjitFallbackWarning, match="rms_norm_channels: input on cpu"):
        y = njt.rms_norm_channels(x4, torch.randn(6), eps=1e-5)
    assert y.shape == x4.shape


def test_channel_rmsnorm_fallback_is_the_reference():
    x = torch.randn(3, 7, 4, 5, dtype=torch.float64)
    w = torch.randn(7, dtype=torch.float64)
    with pytest.warns(njt.NormjitFallbackWarning):
        y = njt.rms_norm_channels(x, w, eps=1e-5)
    ref = x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-5) * w.view(1, 7, 1, 1)
    torch.testing.assert_close(y, ref)


@pytest.mark.parametrize("call, match", [
    (lambda: njt.rms_norm(torch.randn(2, 8), (8,), torch.randn(7)),
     r"weight has shape \[7\]; expected \[8\]"),
    (lambda: njt.layer_norm(torch.randn(2, 8), (8,), torch.randn(8), torch.randn(2, 4)),
     r"bias has shape \[2, 4\]; expected \[8\]"),
    (lambda: njt.layer_norm(torch.randn(2, 8), (9,)),
     r"normalized_shape \[9\] is not the trailing shape of the input, \[2, 8\]"),
    (lambda: njt.group_norm(torch.randn(2, 6, 3), 4), r"num_groups 4 does not divide the "
                                                      r"input's 6 channels"),
    (lambda: njt.group_norm(torch.randn(6), 2), r"input of shape \[6\]"),
    (lambda: njt.group_norm(torch.randn(2, 6, 3), 3, torch.randn(5)), r"weight has shape \[5\]"),
    (lambda: njt.rms_norm_channels(torch.randn(2, 6, 3), torch.randn(3)),
     r"weight has shape \[3\]; expected \[6\]"),
])
def test_bad_arguments_name_argument_and_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_group_norm_of_one_value_per_group_raises_as_torch_does():
    """F.group_norm (and torch.nn.GroupNorm, in eval too) refuses groups of one value with
    this ValueError; a drop-in does the same, before any fallback."""
    for shape, groups in (((1, 1, 1), 1), ((1, 4), 4), ((1, 3, 1, 1), 3)):
        x = torch.randn(shape)
        with pytest.raises(ValueError) as theirs:
            F.group_norm(x, groups)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # raised before a fallback could warn
            with pytest.raises(ValueError) as ours:
                njt.group_norm(x, groups)
            with pytest.raises(ValueError) as module:
                njt.GroupNorm(groups, shape[1]).eval()(x)
        assert str(ours.value) == str(module.value) == str(theirs.value)
    with pytest.warns(njt.NormjitFallbackWarning):  # two values per group: computed
        assert torch.equal(njt.group_norm(torch.ones(2, 1, 1), 1),
                           F.group_norm(torch.ones(2, 1, 1), 1))


def test_a_cached_call_still_checks_what_changed():
    """Eager calls cache their checks under a key of the arguments; what a key does not
    hold is checked each time, and a changed weight is a new key."""
    x = torch.randn(2, 8)
    w = torch.nn.Parameter(torch.randn(8), requires_grad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
        for _ in range(2):
            assert torch.equal(njt.rms_norm(x, (8,), w, 1e-6), F.rms_norm(x, (8,), w, 1e-6))
        w.data = torch.randn(7)  # the same Parameter object, another shape
        with pytest.raises(ValueError, match=r"weight has shape \[7\]; expected \[8\]"):
            njt.rms_norm(x, (8,), w, 1e-6)
        with pytest.raises(ValueError, match="weight is on meta, the input on cpu"):
            njt.rms_norm(x, (8,), torch.randn(8, device="meta"), 1e-6)  # get_device() -1 too
        with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
            njt.rms_norm(x, (8,), [1.0] * 8, 1e-6)
        assert torch.equal(njt.rms_norm(x, [8], None, None), F.rms_norm(x, [8], None, None))


def test_wrong_types():
    with pytest.raises(TypeError, match="input must be a torch.Tensor"):
        njt.rms_norm([1.0, 2.0], (2,))
    with pytest.raises(TypeError, match="weight must be a torch.Tensor, not list"):
        njt.layer_norm(torch.randn(2, 2), (2,), [1.0, 1.0])
    with pytest.raises(TypeError, match="normalized_shape"):
        njt.layer_norm(torch.randn(2, 2), None)


def test_integer_like_arguments_are_taken_as_torch_takes_them():
    """num_groups and normalized_shape accept what F.group_norm and F.layer_norm accept (NumPy
    integers, 0-dim integer tensors), so patch() keeps a model that runs in PyTorch running; and
    refuse what they refuse (floats, bools, strings), naming the argument."""
    np = pytest.importorskip("numpy")
    x = torch.randn(2, 8, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
        for groups in (np.int64(2), torch.tensor(2)):
            assert torch.equal(njt.group_norm(x, groups), F.group_norm(x, 2))
        model = torch.nn.Sequential(torch.nn.GroupNorm(np.int64(2), 8))
        before = model(x)
        assert [n for n, _ in njt.patch(model).replaced] == ["0"]
        assert torch.equal(model(x), before)
        assert torch.equal(njt.layer_norm(x, [np.int64(4)]), F.layer_norm(x, [4]))
    for groups in (2.0, True, "2", None):
        with pytest.raises(TypeError, match=r"num_groups must be an int, not "):
            njt.group_norm(x, groups)
    for groups in (0, -2):
        with pytest.raises(ValueError, match=rf"num_groups must be at least 1, not {groups}$"):
            njt.group_norm(x, groups)
    for shape in ([4.0], "4", [True]):
        with pytest.raises(TypeError, match="normalized_shape must be an int or a sequence"):
            njt.layer_norm(x, shape)


def test_patch_and_unpatch_take_a_module():
    for model in (None, lambda x: x, [torch.nn.LayerNorm(4)]):
        with pytest.raises(TypeError, match=r"patch: model must be a torch.nn.Module, not "):
            njt.patch(model)
        with pytest.raises(TypeError, match=r"unpatch: model must be a torch.nn.Module, not "):
            njt.unpatch(model)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA device")
def test_warmup_without_a_cuda_device_says_why():
    with pytest.raises(RuntimeError, match=r"warmup: no CUDA device is available to PyTorch"):
        njt.warmup(njt.LayerNorm(8), torch.randn(4, 8))


@pytest.mark.parametrize("ours, theirs, args", [
    (njt.RMSNorm, torch.nn.RMSNorm, ((4, 6),)),
    (njt.LayerNorm, torch.nn.LayerNorm, ((4, 6),)),
    (njt.GroupNorm, torch.nn.GroupNorm, (2, 6)),
])
def test_modules_are_torch_nn_compatible(ours, theirs, args):
    # torch.nn's arguments, and the keyword-only activation (None: the plain norm).
    params = list(inspect.signature(ours.__init__).parameters.values())
    assert inspect.signature(ours.__init__).replace(parameters=params[:-1]) == \
        inspect.signature(theirs.__init__)
    assert params[-1].name == "activation" and params[-1].default is None
    assert params[-1].kind is inspect.Parameter.KEYWORD_ONLY
    a, b = ours(*args), theirs(*args)
    assert isinstance(a, theirs)
    with torch.no_grad():
        for p in b.parameters():
            p.normal_()
    assert list(a.state_dict()) == list(b.state_dict())
    a.load_state_dict(b.state_dict())
    b2 = theirs(*args)
    b2.load_state_dict(a.state_dict())
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b2.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert repr(a).replace(ours.__name__, theirs.__name__) == repr(b)


def test_modules_on_cpu_compute_what_torch_nn_does():
    x = torch.randn(3, 6, 4, 6)
    for ours, theirs in ((njt.RMSNorm((4, 6), eps=1e-6), torch.nn.RMSNorm((4, 6), eps=1e-6)),
                         (njt.LayerNorm((4, 6), bias=False),
                          torch.nn.LayerNorm((4, 6), bias=False)),
                         (njt.GroupNorm(3, 6), torch.nn.GroupNorm(3, 6))):
        ours.load_state_dict(theirs.state_dict())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
            assert torch.equal(ours(x), theirs(x))


class Toy(torch.nn.Module):
    class ScaledLayerNorm(torch.nn.LayerNorm):
        def forward(self, x):
            return 2 * super().forward(x)

    class PlainSubclass(torch.nn.GroupNorm):
        pass

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(8)
        self.rms = torch.nn.RMSNorm(8, elementwise_affine=False)
        self.gn = torch.nn.GroupNorm(2, 4)
        self.sub = Toy.PlainSubclass(4, 4)
        self.scaled = Toy.ScaledLayerNorm(8)
        self.bn = torch.nn.BatchNorm1d(4)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.scaled(self.rms(self.ln(self.lin(x))))
        g = self.sub(self.gn(h.view(2, 4, 32)))
        return self.bn(g).view(2, 128)


def test_patch_reports_and_keeps_the_function():
    torch.manual_seed(0)
    model = Toy().eval()
    x = torch.randn(2, 4, 4, 8)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
        before = model(x)
    keys = list(model.state_dict())
    params = {n: p for n, p in model.named_parameters()}
    report = njt.patch(model)
    assert sorted(n for n, _ in report.replaced) == ["gn", "ln", "rms", "sub"]
    skipped = {n: why for n, _, why in report.skipped}
    assert set(skipped) == {"scaled", "bn"}
    assert "overrides LayerNorm.forward" in skipped["scaled"]
    assert "not one of the layers" in skipped["bn"]
    assert "4 replaced, 2 skipped" in str(report)
    assert (isinstance(model.ln, torch.nn.LayerNorm)
            and type(model.ln).__name__ == "NormjitLayerNorm")
    assert list(model.state_dict()) == keys
    assert all(p is params[n] for n, p in model.named_parameters())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
        assert torch.equal(model(x), before)  # CPU: each layer's own forward
    again = njt.patch(model)
    assert not again.replaced and {why for _, _, why in again.skipped} >= {"already patched"}
    assert njt.unpatch(model) == 4 and type(model.ln) is torch.nn.LayerNorm


def test_patch_leaves_normjit_modules_and_says_so():
    """normjit's own modules compute with normjit already: left as they are, reported as such
    (not as layers whose forward normjit cannot vouch for)."""
    model = torch.nn.Sequential(njt.LayerNorm(16), njt.RMSNorm(16), njt.LayerNorm2d(16),
                                njt.GroupNorm(4, 16, activation="silu"))
    classes = [type(m) for m in model]
    report = njt.patch(model)
    assert not report.replaced
    assert report.skipped == [(str(i), f"normjit.torch.{c.__qualname__}",
                               "already a normjit module")
                              for i, c in enumerate(classes)], report
    assert [type(m) for m in model] == classes


@pytest.mark.parametrize("op, args", [
    ("rms_norm", lambda: (torch.randn(3, 8), [8], torch.randn(8), 1e-6)),
    ("rms_norm_channels", lambda: (torch.randn(2, 4, 3), torch.randn(4), 1e-5)),
    ("layer_norm", lambda: (torch.randn(3, 2, 8), [2, 8], torch.randn(2, 8), None, 1e-5)),
    ("group_norm", lambda: (torch.randn(2, 6, 5), 3, torch.randn(6), torch.randn(6), 1e-5)),
])
def test_custom_ops_and_fake_implementations(op, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)
        torch.library.opcheck(getattr(torch.ops.normjit, op).default, args(),
                              test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize("spec", [
    _ops._rows_spec("rmsnorm", (1, 4096), 1, torch.bfloat16, True, False, 1e-6),
    _ops._rows_spec("rmsnorm", (6, 3, 7), 2, torch.float32, False, False, 1.1920928955078125e-07),
    _ops._rows_spec("layernorm", (5, 1000), 1, torch.float16, True, True, 1e-5),
    _ops._rows_spec("layernorm", (2, 64, 31), 2, torch.float32, True, False, 1e-5),
    _ops._channels_spec("rmsnorm", (4, 64, 32, 32), 0, torch.float32, False, False, 1e-5),
    _ops._channels_spec("rmsnorm", (1, 3, 5), 0, torch.bfloat16, True, False, 1e-5),
    _ops._channels_spec("groupnorm", (2, 64, 7, 7), 8, torch.float16, True, True, 1e-5),
    _ops._channels_spec("groupnorm", (3, 6), 3, torch.float32, False, False, 1e-6),
], ids=lambda s: s.split(" dtype")[0])
def test_the_spec_texts_it_prepares_compile(spec, tmp_path):
    """What normjit.torch hands to normjit_prepare is a valid spec: compiled for sm_90 here."""
    import normjit
    with normjit.Engine(cache_dir=str(tmp_path)) as engine:
        assert engine.precompile(spec, arch="sm_90") is True


@pytest.mark.parametrize("hidden", [False, True], ids=["extension", "ctypes"])
def test_eager_calls_launch_through_the_extension_or_ctypes(hidden):
    """normjit.torch binds normjit_launch through normjit._launch where it is importable, and
    through ctypes where it is not (a fresh process in which the import fails)."""
    import subprocess
    import sys
    code = ("import contextlib, sys\n"
            + ("sys.modules['normjit._launch'] = None\n" if hidden else "")
            + "import torch, normjit\n"
            "from normjit.torch import _ops\n"
            "class Engine:\n"
            "    def prepare(self, spec): return 0x7F0000001000\n"
            "normjit.engine = Engine\n"
            "torch.cuda.device = lambda device: contextlib.nullcontext()\n"
            "_ops._prepare(('rmsnorm', (8,), torch.float32, False, False, 0), "
            "'op=rmsnorm shape=1,8 dtype=f32', 8)\n"
            "ctypes_fn = normjit._capi.library().normjit_launch\n"
            "print('ctypes' if _ops._launch is ctypes_fn else\n"
            "      'extension' if _ops._launch is sys.modules['normjit._launch'].launch else\n"
            "      repr(_ops._launch))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ctypes" if hidden else "extension"]


class _RefusingLibrary:
    """A stand-in library whose prepare fails the test: the calls below must not reach it."""

    def prepare(self, spec):
        pytest.fail(f"prepared {spec}")


@pytest.mark.parametrize("on_device", [False, True])
def test_channel_functions_refuse_eps_none_on_every_device(on_device, monkeypatch):
    """eps None is rms_norm's (the dtype's epsilon), not the channel functions' or group_norm's:
    a TypeError naming the function, whether normjit or PyTorch would compute the call."""
    from conftest import launch_path_into

    x, w = torch.randn(2, 6, 3, 3), torch.ones(6)
    calls = [("rms_norm_channels", lambda: njt.rms_norm_channels(x, w, None)),
             ("layer_norm_channels", lambda: njt.layer_norm_channels(x, w, w, None)),
             ("group_norm", lambda: njt.group_norm(x, 3, w, w, None)),
             ("group_norm", lambda: njt.group_norm(x, 3, w, w, None, activation="silu"))]
    for name, call in calls:
        if on_device:
            with launch_path_into(monkeypatch, _RefusingLibrary()):
                with pytest.raises(TypeError, match=f"^{name}: eps must be a float, not None$"):
                    call()
        else:
            with pytest.raises(TypeError, match=f"^{name}: eps must be a float, not None$"):
                call()


# ---------------------------------------------------------------------------------------
# torch.autocast: the norms PyTorch's autocast runs in float32 are PyTorch's there
# ---------------------------------------------------------------------------------------

def test_the_autocast_table_is_the_installed_pytorchs():
    """On CUDA, autocast runs F.layer_norm and F.group_norm in float32 (and F.rms_norm where the
    installed PyTorch lists it): those functions, layer_norm_channels (timm's LayerNorm2d calls
    F.layer_norm) with them, are PyTorch's under autocast there; on CPU, whatever the dispatcher
    says (none in PyTorch 2.15). The channel RMSNorm, no PyTorch function, is never in it."""
    def listed(aten, key):
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{aten}", key)

    cuda = _ops._AUTOCAST_F32["cuda"]
    assert {"layer_norm", "layer_norm_channels", "group_norm"} <= cuda
    assert ("rms_norm" in cuda) == listed("rms_norm", "AutocastCUDA")
    assert "rms_norm_channels" not in cuda
    assert _ops._AUTOCAST_F32["cpu"] == {op for op, aten in _ops._AUTOCAST_ATEN.items()
                                         if listed(aten, "AutocastCPU")}


def _autocast_case(name):
    """(op whose PyTorch counterpart autocast may run in float32, ours, theirs) of bfloat16
    inputs: a function, a module, a patched layer."""
    torch.manual_seed(5)
    x, x4 = torch.randn(3, 16).bfloat16(), torch.randn(2, 16, 3, 5).bfloat16()
    w, b = torch.randn(16).bfloat16(), torch.randn(16).bfloat16()
    if name == "layer_norm":
        return (name, lambda: njt.layer_norm(x, 16, w, b),
                lambda: F.layer_norm(x, (16,), w, b))
    if name == "rms_norm":
        return name, lambda: njt.rms_norm(x, 16, w, 1e-6), lambda: F.rms_norm(x, (16,), w, 1e-6)
    if name == "group_norm-silu":
        return ("group_norm", lambda: njt.group_norm(x4, 4, w, b, activation="silu"),
                lambda: F.silu(F.group_norm(x4, 4, w, b)))
    if name == "layer_norm_channels":
        return (name, lambda: njt.layer_norm_channels(x4, w, b),
                lambda: F.layer_norm(x4.movedim(1, -1), (16,), w, b, 1e-6).movedim(-1, 1))
    if name == "LayerNorm":
        ours, theirs = njt.LayerNorm(16).bfloat16(), torch.nn.LayerNorm(16).bfloat16()
        return "layer_norm", lambda: ours(x), lambda: theirs(x)
    theirs = torch.nn.GroupNorm(4, 16).bfloat16()
    ours = torch.nn.GroupNorm(4, 16).bfloat16()
    njt.patch(ours)
    return "group_norm", lambda: ours(x4), lambda: theirs(x4)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "group_norm-silu",
                                  "layer_norm_channels", "LayerNorm", "patched-GroupNorm"])
def test_under_autocast_the_norms_it_runs_in_float32_are_pytorchs(name, monkeypatch):
    """CUDA's autocast list stood in for CPU's (CPU tensors take the launch path into a
    recorder): under torch.autocast, a norm that autocast runs in float32 is PyTorch's, as
    autocast computes it (float32 on CUDA), with one warning; before and after, the kernel (the
    decision cache holds no autocast state)."""
    from conftest import LaunchRecorder, launch_path_into

    monkeypatch.setitem(_ops._AUTOCAST_F32, "cpu", _ops._AUTOCAST_F32["cuda"])
    op, ours, theirs = _autocast_case(name)
    listed = op in _ops._AUTOCAST_F32["cuda"]
    recorder = LaunchRecorder()
    with launch_path_into(monkeypatch, recorder), torch.no_grad():
        ours()
        assert len(recorder.launches) == 1
        with torch.autocast("cpu"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", njt.NormjitFallbackWarning)
            y, expected = ours(), theirs()
            ours()
        ours()
    warned = [str(w.message) for w in caught if w.category is njt.NormjitFallbackWarning]
    if listed:
        assert len(recorder.launches) == 2
        assert torch.equal(y, expected) and y.dtype == expected.dtype
        assert warned == [f"normjit.torch.{op}: torch.autocast is enabled for cpu and runs this "
                          "function's PyTorch counterpart in float32 (normjit's kernel returns "
                          "the input's dtype, torch.bfloat16); running PyTorch's implementation"]
    else:
        assert len(recorder.launches) == 4 and not warned


def test_under_autocast_a_float32_input_keeps_the_kernel(monkeypatch):
    """A float32 input is computed in float32 under autocast too: normjit's kernel, no warning."""
    from conftest import LaunchRecorder, launch_path_into

    monkeypatch.setitem(_ops._AUTOCAST_F32, "cpu", _ops._AUTOCAST_F32["cuda"])
    x, x4 = torch.randn(3, 16), torch.randn(2, 16, 3, 5)
    recorder = LaunchRecorder()
    with launch_path_into(monkeypatch, recorder), torch.autocast("cpu"), \
            warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        njt.layer_norm(x, 16)
        njt.group_norm(x4, 4)
    assert len(recorder.launches) == 2


def test_no_class_attribute_tests_in_traced_code():
    """normjit.torch's type tests are `type(v) is T`, which dynamo folds right; dynamo before
    PyTorch 2.15 folded `v.__class__ is float` to False for a float v (2.11 did: layer_norm()
    then took the variant path, which keeps normjit's kernel under autocast, and the test below
    failed on the GPU machine)."""
    import re
    from pathlib import Path

    root = Path(njt.__file__).parent
    found = [f"{path.name}:{i}: {line.strip()}" for path in sorted(root.glob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\.__class__\s+is\b", line)]
    assert not found, found


def test_under_autocast_compile_traces_pytorchs_norm(monkeypatch, quiet):
    """torch.compile(fullgraph=True) under autocast: the norms autocast runs in float32 trace
    PyTorch's function (no normjit op in the graph, nothing launched), no graph break."""
    from conftest import LaunchRecorder, keeping_backend, launch_path_into

    monkeypatch.setitem(_ops._AUTOCAST_F32, "cpu", _ops._AUTOCAST_F32["cuda"])
    x4 = torch.randn(2, 16, 3, 5).bfloat16()
    w, b = torch.randn(16).bfloat16(), torch.randn(16).bfloat16()

    def step(x):
        y = njt.group_norm(x, 4, w, b, activation="silu")
        return njt.layer_norm(y.movedim(1, -1), 16, w, b)

    graphs = {"fw": [], "bw": []}
    recorder = LaunchRecorder()
    torch._dynamo.reset()
    try:
        with launch_path_into(monkeypatch, recorder), torch.no_grad(), torch.autocast("cpu"):
            y = torch.compile(step, fullgraph=True, backend=keeping_backend(graphs))(x4)
            expected = step(x4)
    finally:
        torch._dynamo.reset()
    code = "\n".join(graphs["fw"])
    assert "normjit" not in code and "group_norm" in code and "layer_norm" in code, code
    assert not recorder.launches
    torch.testing.assert_close(y, expected)
