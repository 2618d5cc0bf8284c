"""The package's launch paths into a kernel's parameters, without a GPU: a subprocess loads the
package with the fake CUDA driver of tests/fakecuda (libcuda.so.1 of the build, which records
launches instead of running them) found first, prepares real kernels (NVRTC) and launches them
through the extension module (normjit._launch) and through the ctypes fallback; the fake's last
launch, read back through ctypes, holds every argument in its own field. A field swapped between
the flattened tuple and the C struct (a residual's strides for y's) would run on a GPU with
wrong results or none at all; here it fails by name."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "build" / "tests" / "fakecuda" / "driver" / "libcuda.so.1"

# Runs in the subprocess: argv[1] is a JSON list of (path, spec, call) where call is "ex" (the
# forward's launch_ex, every variant argument) or "backward"; prints one JSON line per launch:
# the fake's record of it.
CHILD = r"""
import ctypes, json, sys
import normjit
from normjit import _capi

fake = ctypes.CDLL("libcuda.so.1")  # the fake, already loaded by the library's dlopen
fake.fakecuda_last_launch_json.restype = ctypes.c_char_p
engine = normjit.Engine(memory_only=True)
lib = _capi.library()
paths = {
    "extension ex": _capi.launch_ex_function,
    "ctypes ex": lambda: _capi._ctypes_launch_ex(lib),
    "extension backward": _capi.launch_backward_function,
    "ctypes backward": lambda: _capi._ctypes_launch_backward(lib),
}
for path, spec, args in json.loads(sys.argv[1]):
    launch = paths[path]()
    kernel = engine.prepare(spec)
    status = launch(kernel, *[tuple(a) if isinstance(a, list) else a for a in args])
    if status != 0:
        raise lib.error(status)
    print(fake.fakecuda_last_launch_json().decode())
"""


def launched(calls):
    """The fake's record of each (path, spec, args) call, from one subprocess."""
    if not FAKE.is_file():
        pytest.skip(f"the fake CUDA driver is not built ({FAKE}: cmake --build build)")
    # The package as this process imports it (installed, or the source tree's python/).
    env = dict(os.environ, LD_LIBRARY_PATH=str(FAKE.parent), NORMJIT_CACHE_READONLY="",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    library = REPO / "build" / "libnormjit.so"
    if "NORMJIT_LIBRARY" not in env and library.is_file():
        env["NORMJIT_LIBRARY"] = str(library)  # the build's, beside the fake it was built with
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(calls)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


PER_THREAD = 2  # CU_STREAM_PER_THREAD: a stream handle the fake knows, not the default (0)
# Distinct, 256-byte aligned addresses: each field of the record must hold its own.
X, Y, W, B, R, RO, S, M, RS = (0x10000000 * (i + 1) for i in range(9))

VARIANT = ("op=layernorm shape=4,3,64 normalized_dims=1 dtype=bf16 param_dtype=f32 out_dtype=e4m3 "
           "residual=bf16 save_stats=true")
# inner_rows, then [outer, inner] strides of x, y, residual and residual_out, in elements.
ROWS = (3, 512, 128, 192, 64, 1024, 256, 4096, 1024)


@pytest.mark.parametrize("path", ["extension ex", "ctypes ex"])
def test_every_forward_argument_reaches_its_own_field(path):
    if path.startswith("extension"):
        pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    plain, variant = launched([
        [path, "op=layernorm shape=8,1000 normalized_dims=1 dtype=f32",
         [X, Y, W, B, 8, 0.25, None, None, None, None, None, None, None]],
        [path, VARIANT, [X, Y, W, B, 12, 0.5, R, RO, S, M, RS, PER_THREAD, list(ROWS)]],
    ])
    assert plain["launches"] == 1
    assert (plain["x"], plain["y"], plain["weight"], plain["bias"]) == (X, Y, W, B)
    assert (plain["batch"], plain["eps"]) == (8, 0.25)
    assert (plain["residual"], plain["scale"], plain["mean"], plain["rstd"]) == (0, 0, 0, 0)
    assert plain["stream"] == 0
    assert plain["x_rows"] == [1000, 1000] and plain["inner_rows"] == 1  # contiguous, resolved

    assert variant["launches"] == 2
    assert (variant["x"], variant["y"], variant["weight"], variant["bias"]) == (X, Y, W, B)
    assert (variant["residual"], variant["residual_out"], variant["scale"]) == (R, RO, S)
    assert (variant["mean"], variant["rstd"]) == (M, RS)
    assert (variant["batch"], variant["eps"], variant["stream"]) == (12, 0.5, PER_THREAD)
    assert variant["inner_rows"] == ROWS[0]
    assert variant["x_rows"] == list(ROWS[1:3])
    assert variant["y_rows"] == list(ROWS[3:5])
    assert variant["residual_rows"] == list(ROWS[5:7])
    assert variant["residual_out_rows"] == list(ROWS[7:9])


def test_the_backward_arguments_reach_their_fields_on_both_paths():
    pytest.importorskip("normjit._launch", reason="the extension module is not built here")
    spec = "op=layernorm shape=8,1000 normalized_dims=1 dtype=bf16 backward=true"
    DY, DX, DW, DB = (0x100000000 * (i + 1) for i in range(4))  # apart from X ... RS
    records = launched([
        [path, spec, [X, DY, M, RS, W, DX, DW, DB, 8, PER_THREAD, None, None]]
        for path in ("extension backward", "ctypes backward")
    ])
    for record in records:
        assert (record["x"], record["dy"], record["mean"], record["rstd"]) == (X, DY, M, RS)
        assert (record["weight"], record["y"], record["dweight"], record["dbias"]) == (W, DX, DW,
                                                                                       DB)
        assert (record["batch"], record["stream"]) == (8, PER_THREAD)
    assert [r["launches"] for r in records] == [1, 2]
    assert {k: v for k, v in records[0].items() if k != "launches"} == \
        {k: v for k, v in records[1].items() if k != "launches"}
