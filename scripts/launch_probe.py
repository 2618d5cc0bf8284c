#!/usr/bin/env python3
"""Where the GPU time around a decode-size launch goes (docs/performance-notes.md, issue 21).

In compare_torch's loop the CUDA events around a normjit call measure about 0.2-0.3 us more
beyond the kernel's own duration than around Liger's, torch.compile's or a copy's. This script
times, in that loop (a sleep kernel first, events around each call, x rotating, one output),
the same kernel launched in several ways and a few controls, each as the median of CALLS calls,
ROUNDS rounds interleaved:
  normjit.torch      the package's custom op (what the tables measure)
  ptx                normjit's PTX for the spec (`normjit dump --emit ptx`), loaded with
                     cuModuleLoadData and launched with cuLaunchKernel through ctypes
  ptx-no-globals     the same PTX without its unreferenced .global constants
  ptx-visible        ... and with `.visible .entry` instead of `.weak .entry`
  empty-208          a kernel that only returns, with the same 208-byte parameter
  empty-208-globals  ... with the .global constants of normjit's PTX beside it
  liger, copy        Liger-Kernel's rms_norm_forward and a copy_ of x into one buffer
  c-api, c-api-new-y  (with --lib) compare_torch.py's call of the C API, on a fixed y and on a
                     y from PyTorch's caching allocator on every call
On the GPU machine:
  python3 scripts/launch_probe.py --normjit build-gpu/tools/normjit [--json out.json]
  ... --sets 0 (x from DRAM, as in the tables) --table-loop --lib build-gpu/libnormjit.so
"""
import argparse
import ctypes
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import torch

CALLS = 50
ROUNDS = 3
# --table-loop: compare_torch.py's defaults (--rounds, --reps, --warmup).
TABLE_ROUNDS, TABLE_REPS, TABLE_WARMUP = 5, 20, 3
CASES = [(1, 4096), (128, 8192)]


class RowPitch(ctypes.Structure):
    _fields_ = [("outer", ctypes.c_longlong), ("inner", ctypes.c_longlong)]


class Params(ctypes.Structure):  # templates/normjit/params.cuh
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("weight", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("batch", ctypes.c_longlong), ("eps", ctypes.c_float),
                ("residual", ctypes.c_void_p), ("residual_out", ctypes.c_void_p),
                ("scale", ctypes.c_void_p), ("mean", ctypes.c_void_p), ("rstd", ctypes.c_void_p),
                ("inner_rows", ctypes.c_longlong), ("inner_magic", ctypes.c_ulonglong),
                ("inner_shift", ctypes.c_uint), ("x_rows", RowPitch), ("y_rows", RowPitch),
                ("residual_rows", RowPitch), ("residual_out_rows", RowPitch),
                ("dy", ctypes.c_void_p), ("dweight", ctypes.c_void_p), ("dbias", ctypes.c_void_p)]


assert ctypes.sizeof(Params) == 208, ctypes.sizeof(Params)

cu = ctypes.CDLL("libcuda.so.1")


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")


def load(ptx: str, name: str):
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    check(cu.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx.encode() + b"\0")),
          "cuModuleLoadData")
    check(cu.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
          "cuModuleGetFunction")
    return function


def launcher(function, grid, block, params: Params):
    arg = ctypes.c_void_p(ctypes.addressof(params))
    args = (ctypes.c_void_p * 1)(arg)

    def launch(x):
        params.x = x.data_ptr()
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        check(cu.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, stream, args, None),
              "cuLaunchKernel")
    return launch


def empty_ptx(globals_text: str) -> str:
    return (".version 8.0\n.target sm_90\n.address_size 64\n" + globals_text +
            "\n.visible .entry empty(.param .align 8 .b8 p[208])\n{\n\tret;\n}\n")


def measure(fn, xs):
    for i in range(5):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    torch.cuda._sleep(int(20e-3 * 2e9))
    for i in range(CALLS):
        starts[i].record()
        fn(xs[i % len(xs)])
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--normjit", required=True, help="the normjit CLI (for `dump`)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--sets", type=int, default=64,
                    help="x rotates over this many buffers (default 64: x stays in L2); 0: enough "
                         "that the calls between two uses of one read 4x L2, as the tables' "
                         "rotation does (x comes from DRAM)")
    ap.add_argument("--lib", help="also time the C API's one-shot normjit_rmsnorm of this "
                                  "libnormjit.so, as tools/compare_torch.py calls it")
    ap.add_argument("--table-loop", action="store_true",
                    help="time with compare_torch.py's loop (5 rounds of 20 calls after 3 "
                         "warm-up calls, the calls taken in turn) instead of this script's")
    ap.add_argument("--separate", action="store_true",
                    help="allocate the x sets as separate tensors, as compare_torch.py does "
                         "(default: views of one tensor)")
    ap.add_argument("--table-order", action="store_true",
                    help="with --lib: only compare_torch's calls, in its order within a round "
                         "(normjit's C API, eager F.rms_norm, Liger)")
    ap.add_argument("--cases", default=",".join(f"{t}x{h}" for t, h in CASES),
                    help="TOKENSxHIDDEN,... (default %(default)s)")
    a = ap.parse_args()
    if a.sets < 0:
        ap.error(f"--sets {a.sets}: must be 0 or more")
    try:
        cases = [tuple(int(v) for v in c.split("x")) for c in a.cases.split(",") if c]
        assert cases and all(len(c) == 2 and min(c) > 0 for c in cases)
    except (ValueError, AssertionError):
        ap.error(f"--cases {a.cases!r}: expected TOKENSxHIDDEN,... with positive sizes")
    if not torch.cuda.is_available():
        print("launch_probe: needs a CUDA device", file=sys.stderr)
        return 2
    import normjit.torch as njt
    try:
        from liger_kernel.ops.rms_norm import rms_norm_forward
    except ImportError as e:
        print(f"launch_probe: Liger-Kernel not measured ({e})", file=sys.stderr)
        rms_norm_forward = None
    torch.manual_seed(0)
    results = []
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import compare_torch as ct
    nj = engine = None
    if a.lib:
        nj = ct.Normjit(Path(a.lib))
        engine = nj.create_engine()
    for tokens, hidden in cases:
        spec = ["--op", "rmsnorm", "--shape", f"{tokens},{hidden}", "--dtype", "bf16",
                "--normalized-dims", "1", "--affine", "weight", "--eps", "1e-6"]
        ptx = subprocess.run([a.normjit, "dump", *spec, "--emit", "ptx"], check=True,
                             capture_output=True, text=True).stdout
        plan = subprocess.run([a.normjit, "dump", *spec, "--emit", "plan"], check=True,
                              capture_output=True, text=True).stdout
        block = int(re.search(r"block: (\d+)x1", plan).group(1))
        per_cta = int(re.search(r"/ (\d+) rows per CTA", plan).group(1))
        grid = (tokens + per_cta - 1) // per_cta
        name = re.search(r"\.entry (\S+)\(", ptx).group(1)
        globals_lines = [line for line in ptx.splitlines()
                         if re.match(r"\s*(\.weak )?\.global ", line)]
        no_globals = "\n".join(line for line in ptx.splitlines() if line not in globals_lines)
        visible = no_globals.replace(".weak .entry", ".visible .entry")
        x_bytes = tokens * hidden * 2
        sets = a.sets or -(-4 * l2 // x_bytes)
        if a.separate:
            xs = [torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
                  for _ in range(sets)]
        else:
            xs = list(torch.randn(sets, tokens, hidden, device="cuda",
                                  dtype=torch.bfloat16).unbind(0))
        w = torch.rand(hidden, device="cuda", dtype=torch.bfloat16) + 0.5
        y = torch.empty_like(xs[0])
        p = Params(y=y.data_ptr(), weight=w.data_ptr(), batch=tokens, eps=1e-6, inner_rows=1,
                   inner_magic=1, inner_shift=0, x_rows=RowPitch(hidden, 0),
                   y_rows=RowPitch(hidden, 0), residual_rows=RowPitch(hidden, 0),
                   residual_out_rows=RowPitch(hidden, 0))
        fns = {
            "normjit.torch": lambda x: njt.rms_norm(x, (hidden,), w, 1e-6),
            "ptx": launcher(load(ptx, name), grid, block, p),
            "ptx-no-globals": launcher(load(no_globals, name), grid, block, p),
            "ptx-visible": launcher(load(visible, name), grid, block, p),
            "empty-208": launcher(load(empty_ptx(""), "empty"), grid, block, p),
            "empty-208-globals": launcher(load(empty_ptx("\n".join(globals_lines)), "empty"),
                                          grid, block, p),
            "copy": lambda x: y.copy_(x),
        }
        if nj is not None:
            prob = ct.Problem("decode", "decode", "rmsnorm", (tokens, hidden), "bf16", 1e-6,
                              normalized_dims=1, affine="weight")
            stream = torch.cuda.current_stream().cuda_stream
            bound = {x.data_ptr(): nj.bind(engine, prob, x.data_ptr(), y.data_ptr(),
                                           w.data_ptr(), None, stream) for x in xs}
            fns["c-api"] = lambda x: bound[x.data_ptr()]()
            # The same call writing a new y from PyTorch's caching allocator on every call, as
            # the peers' outputs are (the block the previous call freed).
            shape = (ctypes.c_int64 * 2)(tokens, hidden)
            bf16 = int(ct._capi.Dtype.BF16)

            def new_y(x):
                out = torch.empty_like(x)
                nj.check(nj.lib.normjit_rmsnorm(engine, x.data_ptr(), out.data_ptr(),
                                                w.data_ptr(), shape, 2, 1, bf16, 1e-6, stream))
                return out
            fns["c-api-new-y"] = new_y
        if rms_norm_forward:
            fns["liger"] = lambda x: rms_norm_forward(x, w, 1e-6, 0.0, "gemma", None)[0]
        if a.table_order and nj is not None:
            eager = torch.nn.functional.rms_norm
            fns = {"c-api": fns["c-api"],
                   "eager": lambda x: eager(x, (hidden,), w, 1e-6),
                   **({"liger": fns["liger"]} if "liger" in fns else {}),
                   "ptx": fns["ptx"]}
        ref = njt.rms_norm(xs[0], (hidden,), w, 1e-6)
        fns["ptx"](xs[0])
        torch.cuda.synchronize()
        same = bool(torch.equal(ref, y))
        times = {k: [] for k in fns}
        with torch.no_grad():
            if a.table_loop:
                # compare_torch.py's Runner.timed: every round takes the calls in turn, and
                # each round's median is printed (the table takes the median of all).
                per_round = TABLE_REPS + TABLE_WARMUP
                for k in range(TABLE_ROUNDS):
                    for name, fn in fns.items():
                        t = ct.time_cuda(lambda i, fn=fn, k=k: fn(xs[(k * per_round + i) % sets]),
                                         TABLE_REPS, TABLE_WARMUP)
                        times[name].append(statistics.median(t) * 1e3)
            else:
                for _ in range(ROUNDS):
                    for k, fn in fns.items():
                        times[k].append(measure(fn, xs))
        row = {"tokens": tokens, "hidden": hidden, "grid": grid, "block": block, "sets": sets,
               "ptx_matches_normjit_torch": same, "event_us": times}
        results.append(row)
        print(f"[{tokens}, {hidden}] bf16 rmsnorm, grid {grid} x {block} threads, x over {sets} "
              f"sets ({'from DRAM' if sets * x_bytes >= 4 * l2 else 'L2-resident'}); the ctypes "
              f"launch of normjit's PTX gives normjit.torch's bits: {same}")
        for k, v in times.items():
            print(f"  {k:18s} " + "  ".join(f"{t:6.2f}" for t in v) + " us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "calls": CALLS, "rounds": ROUNDS,
                       "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
