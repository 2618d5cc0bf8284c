"""The Python cost of one eager normjit.torch call, measured without a GPU: the launch is
stubbed, so what is timed is everything normjit.torch does around normjit_launch.

CPU tensors stand in for CUDA ones: the device check of the first (uncached) call is made to
pass, normjit.engine().prepare returns a dummy handle, and normjit_launch is replaced by a C
function of the same prototype that returns 0 (compiled here with cc), called the way
normjit.torch calls the library's: through the extension module normjit._launch bound to it
(`--launch extension`, the default where it is installed), through ctypes (`--launch ctypes`,
the fallback), so the argument conversions are real; or a Python function (`--launch
python`). The stream query is a Python function returning 0. A decode-size RMSNorm ([1, 4096]
bf16 with weight, eps 1e-6) is
called back to back under torch.inference_mode(); the table gives the median and minimum
of the repeats in ns of this thread's CPU time per call (the machine may be shared), next
to the floor: torch.empty_like plus the stubbed launch.

    PYTHONPATH=python NORMJIT_LIBRARY=... python tests/python/bench_host_path.py

Not a test (pytest does not collect it); the GPU numbers are scripts/host_cost.py's.
"""
import argparse
import contextlib
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

import normjit
import normjit.torch as njt
from normjit.torch import _ops

_NOOP_C = r"""
#include <stdint.h>
int normjit_launch(const void* kernel, const void* x, void* y, const void* weight,
                   const void* bias, int64_t batch, double eps, void* stream) {
  return 0;
}
"""


def noop_launch(how: str):
    if how == "python":
        return lambda *args: 0
    folder = tempfile.mkdtemp(prefix="normjit-bench-")
    src, lib = os.path.join(folder, "noop.c"), os.path.join(folder, "libnoop.so")
    with open(src, "w") as f:
        f.write(_NOOP_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)
    fn = ctypes.CDLL(lib).normjit_launch
    fn.restype, fn.argtypes = normjit._capi.PROTOTYPES["normjit_launch"]
    if how == "ctypes":
        return fn
    from normjit import _launch  # what _capi.launch_function() gives, bound to the no-op
    _launch.bind(ctypes.cast(fn, ctypes.c_void_p).value)
    return _launch.launch


class _FakeEngine:
    def prepare(self, spec):
        return 0x7F0000001000


def stub(how: str) -> None:
    """Makes CPU tensors take the launch path, with nothing real launched."""
    real_why_not = _ops._why_not

    def why_not_on_cpu(x, *args):
        why = real_why_not(x, *args)
        return None if why == "device" else why

    _ops._why_not = why_not_on_cpu
    normjit.engine = lambda: _FakeEngine()
    torch.cuda.device = lambda device: contextlib.nullcontext()  # prepare's device guard
    _ops._raw_stream = lambda device: 0
    launch = noop_launch(how)
    normjit._capi.library()  # loaded first, so that the binding below is not overwritten
    for name in ("_launch", "_launch_fn"):  # the launch function's name in _ops
        if hasattr(_ops, name):
            setattr(_ops, name, launch)
    _ops._stubbed_launch = launch
    return launch


def per_call_ns(fn, calls: int, repeats: int):
    for _ in range(calls // 10):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()  # CPU time of this thread: the machine may be shared
        for _ in range(calls):
            fn()
        times.append((time.thread_time() - t0) / calls * 1e9)
    return statistics.median(times), min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=4096)
    try:
        import normjit._launch  # noqa: F401
        default = "extension"
    except ImportError:
        default = "ctypes"
    ap.add_argument("--launch", choices=("extension", "ctypes", "python"), default=default,
                    help="how the no-op stand-in of normjit_launch is called (default: as "
                    f"normjit.torch would here, {default})")
    args = ap.parse_args()
    launch = stub(args.launch)

    h = args.hidden
    x = torch.randn(1, h, dtype=torch.bfloat16)
    w = torch.randn(h, dtype=torch.bfloat16)
    module = njt.RMSNorm(h, eps=1e-6, dtype=torch.bfloat16)
    torch_module = torch.nn.RMSNorm(h, eps=1e-6, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    xp, yp, wp = x.data_ptr(), y.data_ptr(), w.data_ptr()
    candidates = {
        "floor: empty_like + launch": lambda: (torch.empty_like(x),
                                               launch(1, xp, yp, wp, None, 1, 1e-6, 0)),
        "normjit.torch.rms_norm": lambda: njt.rms_norm(x, (h,), w, 1e-6),
        "normjit.torch.RMSNorm (module)": lambda: module(x),
        "torch.nn.RMSNorm (module), CPU compute": lambda: torch_module(x),
        "F.rms_norm, CPU compute": lambda: F.rms_norm(x, (h,), w, 1e-6),
    }
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, "
          f"launch stub through {args.launch}, {args.calls} calls x "
          f"{args.repeats} repeats")
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", njt.NormjitFallbackWarning)
        floor = None
        for name, fn in candidates.items():
            out = fn()
            if name.startswith("normjit"):
                assert isinstance(out, torch.Tensor) and out.shape == x.shape, out
            med, lo = per_call_ns(fn, args.calls, args.repeats)
            if name.startswith("floor"):
                floor = med
            extra = f"  (+{med - floor:6.0f} over the floor)" if floor and not name.startswith(
                ("floor", "torch", "F.")) else ""
            print(f"{name:40s} {med:8.0f} ns median {lo:8.0f} min{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
