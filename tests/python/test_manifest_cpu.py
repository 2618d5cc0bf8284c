"""normjit.torch.prepared_specs() and write_manifest() where there is no GPU: the library
emulated (tests/python/emulator.py), a run of inference and training calls records the spec of
every kernel it prepared, once each; the manifest written has the JSON types of
docs/deployment.md; and, with the command-line tool of this checkout's build, `normjit prewarm`
takes that manifest and compiles exactly the kernels the run prepared (each spec then a disk hit
of the directory it filled, for sm_90, with no GPU). Needs PyTorch."""
import json
import os
import subprocess
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs "
                                            "it; NORMJIT_TEST_TORCH=0 leaves it out)")

import normjit  # noqa: E402
import normjit.torch as njt  # noqa: E402
from conftest import launch_path_into  # noqa: E402
from emulator import Emulator  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def cli():
    """This checkout's `normjit` tool: $NORMJIT_CLI, else build/tools/normjit (scripts/test.sh
    builds it before running pytest); None where there is neither."""
    path = os.environ.get("NORMJIT_CLI") or str(REPO / "build" / "tools" / "normjit")
    return path if os.access(path, os.X_OK) else None


@pytest.fixture
def emu(monkeypatch):
    e = Emulator()
    with launch_path_into(monkeypatch, e):
        yield e


def a_run():
    """Inference, training with Gemma's offset, and the fused residual add in training: two
    batches of each, so that a kernel's second call prepares nothing."""
    torch.manual_seed(0)
    w = torch.randn(64, requires_grad=True)
    for batch in (3, 5):
        x = torch.randn(batch, 64)
        with torch.no_grad():
            njt.rms_norm(x, 64, w, 1e-6)
        njt.rms_norm(x.requires_grad_(), 64, w, 1e-6, weight_offset=1.0).backward(
            torch.randn(batch, 64))
        r = torch.randn(batch, 64, requires_grad=True)
        y, h = njt.add_rms_norm(x, r, 64, w, 1e-6)
        torch.autograd.backward([y, h], [torch.randn(batch, 64), torch.randn(batch, 64)])


def test_the_specs_a_run_prepared_once_each_as_a_manifest(emu, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        a_run()
    specs = njt.prepared_specs()
    assert specs == list(dict.fromkeys(emu.specs)), (specs, emu.specs)
    assert len(specs) == 5  # inference; offset forward and backward; add forward and backward
    assert any(s.endswith("weight_offset=1.0 backward=true") for s in specs), specs
    assert any("residual=f32 save_stats=true" in s for s in specs), specs
    path = tmp_path / "m.json"
    assert njt.write_manifest(path) == 5
    entries = json.loads(path.read_text())
    assert len(entries) == 5
    for spec, entry in zip(specs, entries):
        assert entry["op"] == "rmsnorm" and entry["shape"] == [3, 64] and entry["dtype"] == "f32"
        assert entry["normalized_dims"] == 1 and entry["eps"] == 1e-6
        assert isinstance(entry["eps"], float) and isinstance(entry["normalized_dims"], int)
        assert entry.get("save_stats", False) is ("save_stats=true" in spec)
        assert entry.get("backward", False) is ("backward=true" in spec)
        assert entry.get("weight_offset", 0.0) == (1.0 if "weight_offset=1.0" in spec else 0.0)
        assert entry.get("residual") == ("f32" if "residual=f32" in spec else None)


def test_prewarm_compiles_the_manifest_into_what_the_run_asks_for(emu, tmp_path, capsys):
    """normjit.torch.prewarm of the manifest compiles (for sm_90, no GPU) every kernel the run
    prepared: each spec is then a disk hit of that directory in this process (which loaded
    PyTorch's NVRTC); a second prewarm compiles nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        a_run()
    path = tmp_path / "m.json"
    njt.write_manifest(path)
    cache = tmp_path / "cache"
    compiled, cached = njt.prewarm(path, arch="sm_90", cache_dir=cache, verbose=True)
    assert (compiled, cached) == (5, 0)
    assert capsys.readouterr().err.count("prewarm: sm_90 ") == 5
    assert njt.prewarm(path, arch=["sm_90"], cache_dir=cache) == (0, 5)
    engine = normjit.Engine(cache_dir=cache)
    try:
        for spec in njt.prepared_specs():
            assert engine.precompile(spec, "sm_90") is False, spec
    finally:
        engine.close()
    assert njt.prewarm(njt.prepared_specs()[:2], "sm_90", cache) == (0, 2)


@pytest.mark.parametrize("text, arch, match", [
    ('{"op": "rmsnorm"}', "sm_90", "is not a JSON list of objects"),
    ('[{"op": "rmsnorm", "shape": [2, 8], "dtype": "f64"}]', "sm_90", "f64"),
    ('[]', " , ", "names no target"),
    ('[]', "sm_90", "lists no spec"),
    ('', "sm_90", "is not JSON"),
    ('[{"op": "rmsnorm", "shape": [2, 8], "dtype": "f16", "dtype": "f32"}]', "sm_90",
     "'dtype' is given twice"),
    ('[{"op": "rmsnorm", "shape": [2, 8]}]', "sm_90,,sm_80", "names an empty target"),
])
def test_prewarm_names_what_is_wrong(text, arch, match, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises((ValueError, normjit.NormjitError), match=match):
        njt.prewarm(path, arch, tmp_path / "cache")


SPECS = ["op=rmsnorm shape=2,8 dtype=f16", "op=rmsnorm shape=3,5,7 dtype=bf16 affine=weight"]


def test_prewarm_fills_its_directory_whatever_the_environment_says(tmp_path, monkeypatch):
    """With cache_dir, prewarm keeps `normjit prewarm`'s guarantees: a kernel of a
    NORMJIT_CACHE_READONLY layer is compiled into the directory all the same (it used to count
    as already cached, leaving the directory empty), NORMJIT_CACHE_MAX_BYTES evicts nothing,
    NORMJIT_JIT=off does not stop it; the directory then holds every kernel by itself."""
    layer, shipped = tmp_path / "layer", tmp_path / "shipped"
    assert njt.prewarm(SPECS, "sm_90", layer) == (2, 0)
    monkeypatch.setenv("NORMJIT_CACHE_READONLY", str(layer))
    monkeypatch.setenv("NORMJIT_CACHE_MAX_BYTES", "1")
    monkeypatch.setenv("NORMJIT_JIT", "off")
    assert njt.prewarm(SPECS, "sm_90", shipped) == (2, 0)
    monkeypatch.delenv("NORMJIT_CACHE_READONLY")
    monkeypatch.delenv("NORMJIT_CACHE_MAX_BYTES")
    engine = normjit.Engine(cache_dir=shipped, jit_disabled=True)
    try:
        for spec in SPECS:
            assert engine.precompile(spec, "sm_90") is False, spec
    finally:
        engine.close()


def test_prewarm_raises_where_its_kernels_cannot_be_written(tmp_path, monkeypatch):
    """A cache_dir that cannot be a directory, or a save that fails (the cache's fault hook: a
    full disk), raises naming cache_dir, where it used to return counts for kernels kept in
    memory only."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(normjit.NormjitError, match="invalid cache_dir .*Not a directory"):
        njt.prewarm(SPECS, "sm_90", a_file)
    monkeypatch.setenv("NORMJIT_CACHE_FAULT", "enospc")
    with pytest.raises(normjit.NormjitError, match="could not write the kernel of op=rmsnorm"):
        njt.prewarm(SPECS, "sm_90", tmp_path / "full")


def test_the_manifest_is_one_the_command_line_tool_reads(emu, tmp_path):
    """`normjit prewarm --check` (this checkout's build) reads write_manifest's file: every
    entry valid, each listed (its kernels are not in the empty directory)."""
    tool = cli()
    if tool is None:
        pytest.skip("no normjit command-line tool built here (build/tools/normjit or "
                    "$NORMJIT_CLI): scripts/test.sh builds it before pytest")
    with warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        a_run()
    path = tmp_path / "m.json"
    njt.write_manifest(path)
    check = subprocess.run([tool, "prewarm", str(path), "--arch", "sm_90", "--cache-dir",
                            str(tmp_path / "empty"), "--check"], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 1 and "error: manifest" not in check.stderr, check.stderr
    listed = {int(line.split()[2]) for line in check.stdout.splitlines()
              if line.startswith("missing entry ")}
    assert listed == set(range(5)), check.stdout
