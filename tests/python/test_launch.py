"""normjit._launch (python/normjit/_launch.c), the extension module through which
normjit.torch calls normjit_launch without ctypes' argument conversion, and the ctypes
fallback where it is missing (normjit._capi.launch_function). No GPU, no PyTorch: a NULL
kernel makes normjit_launch return NORMJIT_ERROR_INVALID_ARGUMENT before any device work."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

import normjit
from normjit import _capi

ARGS = (0, 0x1000, 0x2000, None, None, 1, 1e-6, None)  # kernel NULL: refused by the library


def extension_launch():
    """The extension's launch function, as normjit.torch takes it; a skip where the extension
    is not importable (the package imported from the source tree: the test above fails for an
    installed package without it), since the tests of its type checks would hand ctypes'
    normjit_launch the wrong values instead."""
    pytest.importorskip("normjit._launch", reason="the extension module is not built here "
                        "(normjit imported from the source tree, not installed)")
    return _capi.launch_function()


def test_the_extension_is_installed_on_the_stable_abi():
    from normjit import _launch
    assert Path(_launch.__file__).parent == Path(normjit.__file__).parent
    assert Path(_launch.__file__).name == "_launch.abi3.so"  # one wheel for CPython >= 3.9
    assert _capi.launch_function() is _launch.launch


def test_the_extension_returns_what_ctypes_returns():
    launch, by_ctypes = extension_launch(), _capi.library().normjit_launch
    assert launch is not by_ctypes
    status = launch(*ARGS)
    assert status == by_ctypes(*ARGS) == _capi.Status.ERROR_INVALID_ARGUMENT
    err = _capi.library().error(status)  # this thread's message, as after the ctypes call
    assert isinstance(err, normjit.InvalidArgumentError) and "kernel" in err.message
    assert launch(0, 0x1000, 0x2000, 0x3000, 0x4000, 2**40, 1, 0x5000) == status  # ints too


@pytest.mark.parametrize("index, value, match", [
    (0, "0", "kernel must be an int, not <class 'str'>"),
    (1, 1.5, "x must be an int"),
    (2, None, "y must be an int, not <class 'NoneType'>"),
    (3, b"w", "weight must be an int or None"),
    (4, [], "bias must be an int or None"),
    (5, 1.0, "batch must be an int"),
    (6, "1e-6", "eps must be a float"),
    (7, object(), "stream must be an int or None"),
])
def test_the_extension_rejects_wrong_types(index, value, match):
    args = list(ARGS)
    args[index] = value
    launch = extension_launch()
    with pytest.raises(TypeError, match=match):
        launch(*args)


def test_the_extension_rejects_a_wrong_count_and_out_of_range_values():
    launch = extension_launch()
    with pytest.raises(TypeError, match="takes 8 arguments"):
        launch(*ARGS[:7])
    with pytest.raises(TypeError, match="takes 8 arguments"):
        launch(*ARGS, 0)
    with pytest.raises(OverflowError):
        launch(*ARGS[:5], 2**63, *ARGS[6:])
    with pytest.raises(OverflowError):
        launch(2**64, *ARGS[1:])


def test_launch_falls_back_to_ctypes_without_the_extension():
    # A fresh process where `import normjit._launch` fails, as where it is not installed.
    code = ("import sys; sys.modules['normjit._launch'] = None\n"
            "from normjit import _capi\n"
            "launch = _capi.launch_function()\n"
            "assert launch is _capi.library().normjit_launch, launch\n"
            f"print(launch(*{ARGS!r}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == _capi.Status.ERROR_INVALID_ARGUMENT


def test_the_extension_calls_the_library_capi_loaded():
    # bind() takes the address of the ctypes-loaded function: NORMJIT_LIBRARY is honoured and
    # no second copy of the library is loaded (whose kernel handles would be foreign).
    from normjit import _launch
    address = ctypes.cast(_capi.library().normjit_launch, ctypes.c_void_p).value
    assert address
    with pytest.raises(ValueError, match="address 0"):
        _launch.bind(0)
    with pytest.raises(TypeError):
        _launch.bind(None)
    _launch.bind(address)
    maps = Path("/proc/self/maps")
    if maps.exists():
        loaded = {line.split()[-1] for line in maps.read_text().splitlines()
                  if "libnormjit" in line}
        assert len(loaded) == 1, loaded
