"""Saving a model patched by normjit.torch.patch(): pickle, torch.save/torch.load
(weights_only=False) and copy.deepcopy give back the patched model, not a PicklingError about
a class patch() made at run time: the same layers (an nn.Sequential's GroupNorm -> SiLU still
fused, the SiLU's place still the nn.Identity that stands for it, a forward fused in code still
rewritten, a user's GroupNorm subclass still its subclass), the same parameters, buffers and
state_dict keys, the same output bits, and unpatch() works on the copy. Loading in another
process (or here with patch()'s class caches emptied) makes the classes again from what the
pickle names: the original classes and patch()'s factories. Needs PyTorch; no GPU (CPU tensors
fall back to PyTorch; with the launch stubbed, the copy launches the kernels the original
does)."""
import copy
import functools
import importlib
import io
import linecache
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")
from torch import nn  # noqa: E402

import normjit.torch as njt  # noqa: E402
from normjit import _fuse_code  # noqa: E402
from normjit.torch import _patch  # noqa: E402
from conftest import launch_path_into  # noqa: E402

# fresh_warnings: conftest.py; each test starts with no fallback warning given yet.
pytestmark = pytest.mark.usefixtures("fresh_warnings")


def forget_patched_classes(monkeypatch):
    """As in a process that loads a file another one saved: no class that patch() made is
    cached, so that loading must make each one again from what the pickle names."""
    monkeypatch.setattr(_patch, "_patched_classes", {})
    monkeypatch.setattr(_fuse_code, "_rewritten", {})


# ---------------------------------------------------------------------------------------
# A model with every kind of place patch() makes (its classes at module level: pickle finds
# them by import, as it finds a library's)
# ---------------------------------------------------------------------------------------

class GroupNorm32(nn.GroupNorm):
    """ldm/modules/diffusionmodules/util.py's."""

    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


class LdmResBlock(nn.Module):
    """The original Stable Diffusion's ResBlock, reduced: GroupNorm32 -> SiLU in Sequentials."""

    def __init__(self, channels):
        super().__init__()
        self.in_layers = nn.Sequential(GroupNorm32(8, channels), nn.SiLU(),
                                       nn.Conv2d(channels, channels, 3, padding=1))
        self.out_layers = nn.Sequential(GroupNorm32(8, channels), nn.SiLU(), nn.Dropout(0.0),
                                        nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x):
        return x + self.out_layers(self.in_layers(x))


class ResnetBlock(nn.Module):
    """diffusers' ResnetBlock2D, reduced: norm1 and norm2 then the SiLU, which is applied to a
    time embedding too (here the input's mean): its forward is fused in code."""

    def __init__(self, channels):
        super().__init__()
        self.norm1 = nn.GroupNorm(8, channels)
        self.time_emb_proj = nn.Linear(channels, channels)
        self.norm2 = nn.GroupNorm(8, channels)
        self.nonlinearity = nn.SiLU()

    def forward(self, x):
        temb = self.time_emb_proj(self.nonlinearity(x.mean((2, 3))))[:, :, None, None]
        h = self.nonlinearity(self.norm1(x)) + temb
        h = self.norm2(h)
        h = self.nonlinearity(h)
        return x + h


def counted(fn):
    """A functools.wraps decorator, as diffusers' apply_lora_scale on UNet2DConditionModel's
    forward: patch() rewrites the function it wraps and keeps the wrapper."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self.calls += 1
        return fn(self, *args, **kwargs)
    return wrapper


class CountedBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm, self.act = nn.GroupNorm(8, channels), nn.SiLU()
        self.calls = 0

    @counted
    def forward(self, x):
        return self.act(self.norm(x))


def build_model():
    """Conv, GroupNorm -> SiLU (fused: index 2 holds the Identity), ldm's ResBlock, a block fused
    in code, one with a decorated forward, LayerNorm and RMSNorm over the last dim; the plain
    GroupNorm has a buffer and an attribute of its own (its state, pickled with it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU(),
                          LdmResBlock(32), ResnetBlock(32), CountedBlock(32), nn.LayerNorm(8),
                          nn.RMSNorm(8)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()  # (not the initial ones: a copy that lost them would show it)
    model[1].register_buffer("scale_hint", torch.tensor([0.25, 4.0]))
    model[1].tag = "stem"
    return model


def structure(model):
    """(name, class name) of every module, the activation patch() fused into a layer and the
    pairs fused in a forward: what a copy must have the same of."""
    return [(name, type(m).__name__, type(m).__dict__.get("_normjit_activation"),
             type(m).__dict__.get("_normjit_fused_pairs")) for name, m in model.named_modules()]


X = torch.randn(2, 4, 8, 8)


def run(model):
    with torch.no_grad():
        return model(X)


def through_pickle(model):
    return pickle.loads(pickle.dumps(model))


def through_torch_save(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


TRIPS = {"pickle": through_pickle, "torch.save": through_torch_save, "deepcopy": copy.deepcopy}


@pytest.fixture
def patched(quiet):
    """(unpatched model, the same model patched), with patch()'s count of replaced layers."""
    reference = build_model()
    model = copy.deepcopy(reference)
    report = njt.patch(model)
    assert not report.skipped, report
    return reference, model, len(report.replaced)


@pytest.mark.parametrize("fresh", [False, True], ids=["same-process", "fresh-classes"])
@pytest.mark.parametrize("trip", TRIPS)
def test_a_copy_is_the_patched_model(patched, trip, fresh, monkeypatch):
    reference, model, _ = patched
    expected = run(model)
    assert torch.equal(expected, run(reference))  # (CPU: each layer's own forward)
    if fresh:
        forget_patched_classes(monkeypatch)
    loaded = TRIPS[trip](model)
    assert structure(loaded) == structure(model)
    # The fused places as patch() left them: the GroupNorm with the SiLU, the Identity after it.
    assert type(loaded[1])._normjit_activation == "silu"
    assert type(loaded[1])._normjit_original_class is nn.GroupNorm
    assert isinstance(loaded[2], nn.Identity) and loaded[2]._normjit_fused_into == "1"
    assert type(loaded[2]._normjit_original_module) is nn.SiLU
    ldm = loaded[3].in_layers[0]
    assert isinstance(ldm, GroupNorm32) and type(ldm)._normjit_original_class is GroupNorm32
    assert isinstance(loaded[4], ResnetBlock) and type(loaded[4].nonlinearity) is nn.SiLU
    assert type(loaded[4])._normjit_fused_pairs == (("norm1", "nonlinearity"),
                                                    ("norm2", "nonlinearity"))
    # One class per original: the patched model's own in this process; made again (another
    # class object, the same original) where the caches were empty.
    for m, c in zip(model.modules(), loaded.modules()):
        if "_normjit_original_class" in type(m).__dict__:
            assert (type(c) is type(m)) is not fresh
            assert type(c)._normjit_original_class is type(m)._normjit_original_class
    # The state: parameters, buffers and attributes, the state_dict keys of the original.
    assert list(loaded.state_dict()) == list(reference.state_dict())
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(loaded[1].scale_hint, torch.tensor([0.25, 4.0]))
    assert loaded[1].tag == "stem"
    calls = model[5].calls
    assert loaded[5].calls == calls
    assert torch.equal(run(loaded), expected)
    assert loaded[5].calls == calls + 1  # the decorator's wrapper still runs
    loaded.load_state_dict(reference.state_dict())  # (strict: the same keys)


@pytest.mark.parametrize("trip", TRIPS)
def test_a_copy_unpatches(patched, trip, monkeypatch):
    reference, model, replaced = patched
    forget_patched_classes(monkeypatch)
    loaded = TRIPS[trip](model)
    assert njt.unpatch(loaded) == replaced
    assert structure(loaded) == structure(reference)
    assert type(loaded[2]) is nn.SiLU and type(loaded[3].in_layers[0]) is GroupNorm32
    assert torch.equal(run(loaded), run(reference))
    assert structure(model) != structure(reference)  # the original stays patched


def test_the_pickle_names_the_original_classes_and_patchs_factories(patched):
    """No class made at run time in the file: loading it needs normjit importable, not the
    names of classes patch() made."""
    _, model, _ = patched
    data = pickle.dumps(model)
    assert b"Normjit" not in data  # NormjitGroupNormSiLU, NormjitResnetBlock, ...
    for name in (b"GroupNorm32", b"ResnetBlock", b"CountedBlock", b"_patched_class",
                 b"_fused_class_again", b"_group_norm_silu"):
        assert name in data, name


def test_a_fresh_process_loads_the_saved_model(patched, tmp_path):
    """The file read by another Python, which imports normjit and this module (its classes)
    and nothing else: the same layers, the same output bits, and unpatch()."""
    reference, model, replaced = patched
    path = tmp_path / "model.pt"
    torch.save({"model": model, "x": X, "y": run(model)}, path)
    code = ("import sys, warnings, torch, normjit.torch as njt\n"
            "warnings.simplefilter('ignore')\n"
            "from test_patch_pickle import structure\n"
            "saved = torch.load(sys.argv[1], weights_only=False)\n"
            "model = saved['model']\n"
            "with torch.no_grad():\n"
            "    print(torch.equal(model(saved['x']), saved['y']))\n"
            "print(repr(structure(model)))\n"
            "print(njt.unpatch(model))\n"
            "print(repr(structure(model)))\n")
    path_entries = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path_entries))}
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    equal, patched_structure, count, unpatched_structure = r.stdout.splitlines()
    assert equal == "True"
    assert patched_structure == repr(structure(model))
    assert int(count) == replaced
    assert unpatched_structure == repr(structure(reference))


# ---------------------------------------------------------------------------------------
# The kernels a copy launches (engine and launch stubbed: CPU tensors take the launch path)
# ---------------------------------------------------------------------------------------

class Stub:
    """Records the spec texts prepared and the launches; launches write nothing."""

    def __init__(self):
        self.specs, self.launches = [], []

    def prepare(self, spec):
        self.specs.append(spec)
        return 0x7F0000001000 + 0x100 * len(self.specs)

    def launch(self, *args):
        self.launches.append(("launch", args[0]))
        return 0

    def launch_ex(self, *args):
        self.launches.append(("launch_ex", args[0]))
        return 0


@pytest.fixture
def stub(monkeypatch):
    s = Stub()
    with launch_path_into(monkeypatch, s):
        yield s


@pytest.mark.parametrize("trip", ["pickle", "torch.save"])
def test_a_copy_launches_the_kernels_the_patched_model_does(stub, trip, monkeypatch):
    """The same kernels in the same order, six of them the GroupNorm + SiLU kernel (the
    Sequential's pair, ldm's two, the two of the forward fused in code, the decorated one)."""
    model = build_model()
    njt.patch(model)
    forget_patched_classes(monkeypatch)
    loaded = TRIPS[trip](model)
    run(model)
    launched = stub.launches[:]
    del stub.launches[:]
    run(loaded)
    assert stub.launches == launched
    handles = {spec: 0x7F0000001000 + 0x100 * k for k, spec in enumerate(stub.specs, 1)}
    (fused,) = [spec for spec in stub.specs if spec.endswith("activation=silu")]
    assert fused == "op=groupnorm shape=2,32,8,8 dtype=f32 groups=8 affine=both eps=1e-05 " \
                    "activation=silu"
    assert [h for _, h in launched].count(handles[fused]) == 6, (stub.specs, launched)


# ---------------------------------------------------------------------------------------
# What cannot be rebuilt
# ---------------------------------------------------------------------------------------

def test_a_forward_no_longer_rewritable_loads_as_its_own_class(quiet, tmp_path, monkeypatch):
    """A class whose source was edited between saving and loading: its forward is not
    rewritten again (its text is not the loaded code); the block loads as its own class,
    which computes what it did before patch(), with a warning that says why."""
    source = tmp_path / "pickled_block_source.py"
    source.write_text("import torch.nn as nn\n\n\n"
                      "class Block(nn.Module):\n"
                      "    def __init__(self):\n"
                      "        super().__init__()\n"
                      "        self.norm, self.act = nn.GroupNorm(2, 8), nn.SiLU()\n\n"
                      "    def forward(self, x):\n"
                      "        x = self.norm(x)\n"
                      "        x = self.act(x)\n"
                      "        return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("pickled_block_source")
    monkeypatch.setitem(sys.modules, "pickled_block_source", module)
    block = module.Block()
    njt.patch(block)
    assert type(block).__name__ == "NormjitBlock"
    x = torch.randn(2, 8, 4, 4)
    with torch.no_grad():
        expected = block(x)
    data = pickle.dumps(block)
    source.write_text(source.read_text().replace("return x", "return x * 2"))
    linecache.clearcache()
    forget_patched_classes(monkeypatch)
    with pytest.warns(UserWarning, match=r"normjit: a pickled_block_source\.Block loaded without "
                                         r"its GroupNorm -> SiLU pairs fused: its forward's "
                                         r"source is not the code that is loaded"):
        loaded = pickle.loads(data)
    assert type(loaded) is module.Block
    assert type(loaded.norm).__name__ == "NormjitGroupNorm"  # patched alone, as before
    with torch.no_grad():
        assert torch.equal(loaded(x), expected)
    assert njt.unpatch(loaded) == 1 and type(loaded.norm) is nn.GroupNorm


class ReducingGroupNorm(nn.GroupNorm):
    """A layer that pickles itself its own way: its reduction would name the patched class, or
    (this one) make an unpatched layer, which at a fused place would drop the SiLU."""

    def __reduce__(self):
        return ReducingGroupNorm, (self.num_groups, self.num_channels)


@pytest.mark.parametrize("trip", TRIPS)
def test_a_layer_that_pickles_itself_is_refused_saying_what_to_do(quiet, trip):
    model = nn.Sequential(ReducingGroupNorm(2, 8), nn.SiLU())
    njt.patch(model)
    assert type(model[0])._normjit_activation == "silu"
    with pytest.raises(TypeError, match=r"cannot pickle a test_patch_pickle\.ReducingGroupNorm "
                                        r"patched by normjit\.torch\.patch: its class pickles "
                                        r"its instances its own way \(__reduce__\).*call "
                                        r"normjit\.torch\.unpatch\(model\) before saving"):
        TRIPS[trip](model)
    njt.unpatch(model)
    assert type(TRIPS[trip](model)[0]) is ReducingGroupNorm  # as it was before patch()


# ---------------------------------------------------------------------------------------
# diffusers' own classes
# ---------------------------------------------------------------------------------------

def test_a_patched_diffusers_vae_saves_and_loads(quiet, monkeypatch):
    """A tiny AutoencoderKL: every ResnetBlock2D and the Encoder's and Decoder's forwards fused
    in code, rewritten again on load, the output bits unchanged, unpatch() on the copy."""
    diffusers = pytest.importorskip("diffusers", reason="diffusers is not installed")
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(block_out_channels=(32, 64),
                                  down_block_types=("DownEncoderBlock2D",) * 2,
                                  up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                                  norm_num_groups=8, sample_size=16).eval()
    classes = {name: type(m) for name, m in vae.named_modules()}
    img = torch.randn(1, 3, 16, 16)
    report = njt.patch(vae)
    fused = sorted(name for name, text in report.replaced if "fused in its forward" in text)
    assert "encoder" in fused and "decoder" in fused
    with torch.no_grad():
        expected = vae(img, sample_posterior=False).sample
    forget_patched_classes(monkeypatch)
    loaded = through_torch_save(vae)
    assert structure(loaded) == structure(vae)
    assert sorted(name for name, m in loaded.named_modules()
                  if "_normjit_fused_pairs" in type(m).__dict__) == fused
    with torch.no_grad():
        assert torch.equal(loaded(img, sample_posterior=False).sample, expected)
    njt.unpatch(loaded)
    assert {name: type(m) for name, m in loaded.named_modules()} == classes
