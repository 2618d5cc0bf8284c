"""The installed package without a GPU and without PyTorch: import, precompile into a cache,
errors that carry normjit's message and status."""
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import normjit
from normjit import _capi

SPEC = "op=rmsnorm shape=8,64,32,32 dtype=f32"


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_import_needs_neither_torch_nor_a_gpu():
    # CUDA_VISIBLE_DEVICES="" hides any GPU; torch must not be imported by `import normjit`.
    r = run_python("import sys, normjit; print(normjit.__version__, normjit.library_path(), "
                   "'torch' in sys.modules)", CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    version, lib, torch_loaded = r.stdout.split()
    assert version == normjit.__version__ and torch_loaded == "False"
    assert Path(lib).is_file()


def test_installed_package_carries_the_library():
    """The package comes from an install (pip install .), not from the source tree, and
    holds libnormjit.so next to its sources."""
    package = Path(normjit.__file__).resolve().parent
    source_tree = Path(__file__).resolve().parents[2] / "python" / "normjit"
    assert package != source_tree.resolve(), "tests must run against the installed package"
    if "NORMJIT_LIBRARY" not in os.environ:
        assert normjit.library_path() == package / "libnormjit.so"
    assert (package / "libnormjit.so").is_file()
    assert (package / "torch" / "__init__.py").is_file()


def test_precompile_compiles_once_then_hits_the_cache(tmp_path):
    # A fresh process with a fresh cache: NVRTC runs, then the same spec is a cache hit, also
    # in a second process (the disk cache).
    code = ("import json, normjit; "
            f"a = normjit.precompile({SPEC!r}, arch='sm_90'); "
            f"b = normjit.precompile({SPEC!r}, arch='sm_90'); "
            "print(json.dumps([a, b, list(normjit.engine().counters())]))")
    env = {"NORMJIT_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    first = run_python(code, **env)
    assert first.returncode == 0, first.stderr
    a, b, counters = json.loads(first.stdout)
    assert (a, b) == (True, False) and counters[0] == 1
    second = run_python(code, **env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)[:2] == [False, False]
    assert any((tmp_path / "cache").rglob("*")), "nothing written to NORMJIT_CACHE_DIR"


def test_engine_options_reach_the_library(tmp_path):
    with normjit.Engine(cache_dir=str(tmp_path / "c")) as engine:
        assert engine.precompile("op=layernorm shape=4,4096 dtype=bf16 normalized_dims=1",
                                 arch="sm_80") is True
        # Two kernels: a row kernel with parameters is planned apart for launches of few rows
        # (a batch class: rows of 4096 bf16 load their parameters with x only there), and
        # precompile compiles every class of the spec.
        assert engine.counters().nvrtc_compiles == 2
    assert any((tmp_path / "c").rglob("*"))
    # jit_disabled: a miss is an error naming the spec.
    with normjit.Engine(cache_dir=str(tmp_path / "empty"), jit_disabled=True) as engine:
        with pytest.raises(normjit.CacheMissError) as e:
            engine.precompile("op=groupnorm shape=2,64,7,7 dtype=f32 groups=8", arch="sm_90")
        assert e.value.status == normjit.Status.ERROR_CACHE_MISS
        assert "groupnorm" in e.value.message


def test_an_empty_readonly_list_searches_no_layer_of_the_environment(tmp_path, monkeypatch):
    """readonly_dirs=None takes NORMJIT_CACHE_READONLY's layers; an empty list or tuple takes
    none (the variable is not read): a kernel only there is then a miss."""
    spec = "op=rmsnorm shape=4,64 normalized_dims=1"
    with normjit.Engine(cache_dir=tmp_path / "shipped") as engine:
        assert engine.precompile(spec, arch="sm_80") is True
    monkeypatch.setenv("NORMJIT_CACHE_READONLY", str(tmp_path / "shipped"))
    with normjit.Engine(cache_dir=tmp_path / "own", jit_disabled=True) as engine:
        assert engine.precompile(spec, arch="sm_80") is False  # found in the variable's layer
    for none in ([], ()):
        with normjit.Engine(cache_dir=tmp_path / "own", readonly_dirs=none,
                            jit_disabled=True) as engine:
            assert engine._strings[1] is None
            with pytest.raises(normjit.CacheMissError, match="rmsnorm"):
                engine.precompile(spec, arch="sm_80")
    # A prewarm engine reads no layer anyway: an empty list is no contradiction there.
    with normjit.Engine(cache_dir=tmp_path / "fill", readonly_dirs=[], prewarm=True) as engine:
        assert engine.precompile(spec, arch="sm_80") is True


def test_prewarm_engine_refuses_settings_by_their_python_names(tmp_path):
    """A prewarm engine decides its layers, cap and JIT itself: read-only layers are refused by
    readonly_dirs (the C++ engine's own field is readonly_cache_dirs), the others by their names."""
    # A short path: the message quotes a long one in part ('/tmp/pytest-of-.../...' (73 bytes)).
    with pytest.raises(normjit.InvalidArgumentError,
                       match=r"options\.readonly_dirs '/nonexistent/ro'.*prewarm") as e:
        normjit.Engine(cache_dir=tmp_path / "c", readonly_dirs="/nonexistent/ro", prewarm=True)
    assert "readonly_cache_dirs" not in e.value.message
    with pytest.raises(normjit.InvalidArgumentError, match=r"cache_max_bytes 1024.*prewarm"):
        normjit.Engine(cache_dir=tmp_path / "c", cache_max_bytes=1024, prewarm=True)
    with normjit.Engine(cache_dir=tmp_path / "c", prewarm=True) as engine:
        assert engine.precompile("op=rmsnorm shape=4,64", arch="sm_80") is True


def test_normjit_torch_without_pytorch_says_what_is_missing():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here: nothing is missing")
    with pytest.raises(ModuleNotFoundError, match=r"normjit.torch needs PyTorch, which is not "
                                                  r"installed here \(pip install torch\)") as e:
        importlib.import_module("normjit.torch")
    assert e.value.name == "torch"
    with pytest.raises(ModuleNotFoundError, match="normjit.torch needs PyTorch"):
        importlib.import_module("normjit.torch")  # again: nothing half-imported is left


def test_engine_arguments_are_checked_and_named(tmp_path):
    """Paths as str or os.PathLike (read-only layers: one, colon-separated, or a list); a wrong
    type or value is an error naming the argument, before the library is asked."""
    with normjit.Engine(cache_dir=tmp_path / "c",
                        readonly_dirs=[tmp_path / "ro1", str(tmp_path / "ro2")]) as engine:
        assert engine._strings == [str(tmp_path / "c").encode(),
                                   f"{tmp_path / 'ro1'}:{tmp_path / 'ro2'}".encode()]
        assert engine.precompile("op=rmsnorm shape=4,64", arch="sm_80") is True
    assert any((tmp_path / "c").rglob("*"))
    for kwargs, error, match in [
        (dict(cache_dir=5), TypeError,
         r"cache_dir must be a str, bytes or os.PathLike, not int \(5\)"),
        (dict(cache_dir=""), ValueError, "cache_dir is empty"),
        (dict(readonly_dirs=[tmp_path, 3]), TypeError, r"readonly_dirs\[1\] must be a str"),
        (dict(readonly_dirs=7), TypeError,
         "readonly_dirs must be a str, bytes, an os.PathLike or a list"),
        (dict(cache_max_bytes=-1), ValueError, "cache_max_bytes must be 0 or more, not -1"),
        (dict(cache_max_bytes=1.5), TypeError, r"cache_max_bytes must be an int, not float"),
        (dict(device="cuda:0"), TypeError, r"device must be an int, not str \('cuda:0'\)"),
        (dict(device=True), TypeError, "device must be an int, not bool"),
        (dict(dram_gbps=-5), ValueError, "dram_gbps must be 0 or more, not -5"),
        (dict(dram_gbps="4814"), TypeError, r"dram_gbps must be an int, not str"),
        # Beyond the C fields (int, uint64_t): refused, not wrapped to another value.
        (dict(cache_max_bytes=2**64 + 5), ValueError,
         f"cache_max_bytes must be at most {2**64 - 1}, not {2**64 + 5}"),
        (dict(device=2**32), ValueError, f"device must be at most {2**31 - 1}, not {2**32}"),
        (dict(dram_gbps=2**32 + 100), ValueError, f"dram_gbps must be at most {2**31 - 1}"),
        # A NUL would end the C string there; ':' inside a list's path would split it.
        (dict(cache_dir=str(tmp_path / "c\0x")), ValueError, "cache_dir .* contains a NUL"),
        (dict(readonly_dirs=[tmp_path / "ro", str(tmp_path / "a:b")]), ValueError,
         r"readonly_dirs\[1\] .*a:b' contains ':'"),
    ]:
        with pytest.raises(error, match=match):
            normjit.Engine(**kwargs)
    # A path that is not UTF-8 (as os.listdir gives it, bytes or a str with surrogate escapes)
    # reaches the same directory.
    odd = os.fsencode(str(tmp_path)) + b"/c-\xff"
    for given, compiles in ((odd, True), (os.fsdecode(odd), False)):  # then cached there
        with normjit.Engine(cache_dir=given) as engine:
            assert engine._strings[0] == odd
            assert engine.precompile("op=rmsnorm shape=4,64", arch="sm_80") is compiles
        assert any(Path(os.fsdecode(odd)).rglob("*.entry"))
    # dram_gbps (normjit_engine_config): the library takes a bandwidth and names one beyond
    # its bound.
    with normjit.Engine(memory_only=True, dram_gbps=4814) as engine:
        assert engine.precompile("op=rmsnorm shape=4,64", arch="sm_90") is True
    with pytest.raises(normjit.InvalidArgumentError) as e:
        normjit.Engine(memory_only=True, dram_gbps=2_000_000)
    assert "dram_gbps" in e.value.message and "2000000" in e.value.message, e.value.message
    # Spec and arch text: a NUL is refused (the C API would read up to it: this spec would be
    # taken for its f32 kernel).
    with normjit.Engine(memory_only=True) as engine:
        with pytest.raises(ValueError, match="spec .* contains a NUL character"):
            engine.precompile("op=rmsnorm shape=8,64\0 dtype=bf16", arch="sm_90")
        with pytest.raises(ValueError, match=r"arch 'sm_90\\x00x' contains a NUL character"):
            engine.precompile("op=rmsnorm shape=8,64", arch="sm_90\0x")


@pytest.mark.parametrize("spec, argument, value", [
    ("op=softmax shape=8,64", "op", "softmax"),
    ("op=rmsnorm shape=8,x,3", "shape", "8,x,3"),
    ("op=rmsnorm shape=8,64 dtype=f64", "dtype", "f64"),
    ("op=groupnorm shape=2,64,7,7 groups=7", "groups", "7"),
    ("op=layernorm shape=4,64 normalized_dims=3", "normalized_dims", "3"),
    ("op=rmsnorm shape=8,64 eps=-1", "eps", "-1"),
    ("op=rmsnorm shape=8,64 colour=red", "spec", "colour"),
    ("op=rmsnorm shape=8,64 affine=both", "affine", "both"),
])
def test_spec_errors_name_the_argument_and_value(spec, argument, value, tmp_path):
    engine = normjit.Engine(memory_only=True)
    with pytest.raises(normjit.InvalidArgumentError) as e:
        engine.precompile(spec, arch="sm_90")
    err = e.value
    assert err.status == normjit.Status.ERROR_INVALID_ARGUMENT == 1
    assert err.status_name and err.status_name in str(err)
    assert argument in err.message and value in err.message, err.message
    assert isinstance(err, ValueError) and isinstance(err, normjit.NormjitError)
    engine.close()


def test_bad_arch_and_wrong_types():
    with pytest.raises(normjit.NormjitError) as e:
        normjit.precompile(SPEC, arch="sm_1")
    assert "sm_1" in e.value.message
    with pytest.raises(TypeError, match="spec must be a str"):
        normjit.precompile(b"op=rmsnorm")  # type: ignore[arg-type]


def test_prepare_without_a_gpu_raises_with_the_status():
    r = run_python(f"import normjit\ntry:\n    normjit.engine().prepare({SPEC!r})\n"
                   "except normjit.NormjitError as e:\n"
                   "    print(type(e).__name__, int(e.status), e.status_name, sep='|')\n"
                   "    print(e.message)\nelse:\n    print('ok')",
                   CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    if first == "ok":
        pytest.skip("a GPU is visible: prepare succeeded")
    name, status, status_name = first.split('|')
    assert int(status) in (_capi.Status.ERROR_NO_DEVICE, _capi.Status.ERROR_DRIVER), r.stdout
    assert name in ("NoDeviceError", "DriverError") and status_name
    assert r.stdout.splitlines()[1].strip(), "no message"


def test_counters_count_a_corrupt_cache_entry(tmp_path):
    # A flipped bit in each entry of the disk cache: the next engine's precompile rejects them
    # (counters().bad_entries, C's normjit_engine_counters_ex) and compiles them again.
    spec = "op=layernorm shape=4,4096 dtype=bf16 normalized_dims=1"
    with normjit.Engine(cache_dir=tmp_path) as engine:
        assert engine.precompile(spec) is True
        assert engine.counters().bad_entries == 0
    entries = list(tmp_path.rglob("*.entry"))
    assert entries
    for entry in entries:
        data = bytearray(entry.read_bytes())
        data[-1] ^= 1
        entry.write_bytes(bytes(data))
    with normjit.Engine(cache_dir=tmp_path) as engine:
        assert engine.precompile(spec) is True
        counters = engine.counters()
        assert counters.bad_entries == len(entries)
        assert counters.nvrtc_compiles == len(entries)


def test_engine_after_close_is_an_error():
    engine = normjit.Engine(memory_only=True)
    engine.close()
    engine.close()  # twice is fine
    with pytest.raises(ValueError, match="after close"):
        engine.counters()


def test_closes_from_many_threads_destroy_the_engine_once():
    """close() from threads at once, and beside calls in flight (ctypes lets go of the GIL in
    the library): the engine is destroyed once, after the last call returns (two closes passing
    the handle check at once freed it twice: a crash)."""
    import threading
    for _ in range(300):
        engine = normjit.Engine(memory_only=True)
        start = threading.Barrier(5)
        errors = []

        def close():
            start.wait()
            engine.close()

        def count():
            start.wait()
            try:
                assert engine.counters().bad_entries == 0
            except ValueError as e:  # after the close: the error, never a freed engine
                if "after close" not in str(e):
                    errors.append(e)
        threads = [threading.Thread(target=close) for _ in range(3)]
        threads += [threading.Thread(target=count) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert engine.handle is None
        with pytest.raises(ValueError, match="after close"):
            engine.counters()


def test_the_process_engine_cannot_be_closed():
    """normjit.engine() lives as long as the process (normjit.torch keeps the kernels it
    prepared): close(), and a with-block's end, raise and leave it working."""
    e = normjit.engine()
    with pytest.raises(ValueError, match="process's engine"):
        e.close()
    with pytest.raises(ValueError, match="process's engine"):
        with normjit.engine():
            pass
    assert normjit.engine() is e and e.handle is not None
    assert e.counters().bad_entries >= 0


def test_library_path_override(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMJIT_LIBRARY", str(tmp_path / "nope.so"))
    assert _capi.library_path() == tmp_path / "nope.so"
    with pytest.raises(ImportError, match="nope.so"):
        _capi.Library(_capi.library_path())


def test_library_search_path_has_no_empty_entry():
    """libnormjit.so's RUNPATH/RPATH (the loader's directories for libcrypto, libnvrtc): no empty
    entry, which the loader takes as the current directory, so that importing normjit from a
    folder holding a library of such a name would load that one. (CMake pads a build-tree RPATH
    with empty entries for install() to rewrite; the wheel copies the library as built.)"""
    import shutil
    import subprocess

    from normjit._capi import library_path

    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed: cannot read the library's RUNPATH")
    dynamic = subprocess.run([readelf, "-d", str(library_path())], capture_output=True,
                             text=True, check=True).stdout
    paths = [line.split("[", 1)[1].rsplit("]", 1)[0] for line in dynamic.splitlines()
             if "(RUNPATH)" in line or "(RPATH)" in line]
    assert paths, f"no RUNPATH in {library_path()}:\n{dynamic}"
    for path in paths:
        assert "" not in path.split(":"), f"an empty entry in {path!r} ({library_path()})"
