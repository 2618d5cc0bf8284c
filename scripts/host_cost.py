#!/usr/bin/env python3
"""Host cost per call, on the GPU machine: eager wall time of one RMSNorm call on a decode-size
input ([1, 4096] bf16 with weight, eps 1e-6) for normjit.torch.rms_norm, torch's
F.rms_norm, Liger-Kernel's RMSNorm (when importable), a torch.compile'd F.rms_norm, and the
bare normjit_launch of a prepared kernel through ctypes and through the extension module
normjit._launch (the floors of the two bindings).

Each is called N times back to back under torch.inference_mode(), then the stream is
synchronised; the wall time divided by N is one repeat's per-call time, the candidates' repeats
taking turns; the table gives the median and the minimum of the repeats. A note gives the GPU's
own time per call (a CUDA graph of the calls, replayed), under which no row can go.

    python3 scripts/host_cost.py                 # writes docs/host-cost.md and splices it
                                                 # into docs/performance.md
    python3 scripts/host_cost.py --no-write      # print only
$OUT, when set: host-cost.md and host-cost.json are copied there too.
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))


def per_call_us(fns: dict, calls: int, repeats: int, warmup: int) -> dict:
    """{name: [us per call, one per repeat]}. The repeats take turns (every candidate's first
    repeat, then every second one, ...), so that a drift of the machine (clocks, other load)
    falls on all of them alike instead of on whichever ran at the time."""
    import torch
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return times


def gpu_us_per_call(fn, calls: int = 100, replays: int = 20) -> float:
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (calls * replays)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per repeat (2000)")
    ap.add_argument("--repeats", type=int, default=15, help="repeats (15)")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--doc", default=str(REPO / "docs" / "host-cost.md"))
    ap.add_argument("--performance", default=str(REPO / "docs" / "performance.md"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        print("host_cost: no CUDA device", file=sys.stderr)
        return 2
    import normjit
    import normjit.torch as njt
    from normjit import _capi

    h = args.hidden
    x = torch.randn(1, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
    eps = 1e-6
    ref = F.rms_norm(x.double(), (h,), w.double(), eps)
    candidates = {}

    candidates["normjit.torch.rms_norm"] = lambda: njt.rms_norm(x, (h,), w, eps)
    module = njt.RMSNorm(h, eps=eps, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        module.weight.copy_(w)
    candidates["normjit.torch.RMSNorm (module)"] = lambda: module(x)
    candidates["torch.nn.functional.rms_norm"] = lambda: F.rms_norm(x, (h,), w, eps)
    torch_module = torch.nn.RMSNorm(h, eps=eps, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        torch_module.weight.copy_(w)
    candidates["torch.nn.RMSNorm (module)"] = lambda: torch_module(x)
    notes = []
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        candidates["Liger LigerRMSNormFunction"] = lambda: LigerRMSNormFunction.apply(x, w, eps)
    except Exception as e:  # noqa: BLE001 - optional peer
        notes.append(f"Liger-Kernel not measured: {type(e).__name__}: {e}")
    compiled = torch.compile(lambda t, wt: F.rms_norm(t, (h,), wt, eps))
    candidates["torch.compile(F.rms_norm)"] = lambda: compiled(x, w)

    # The floor of the binding: a prepared kernel, arguments converted once, one ctypes call.
    lib = _capi.library()
    kernel = normjit.engine().prepare(
        f"op=rmsnorm shape=1,{h} dtype=bf16 normalized_dims=1 affine=weight eps={eps!r}")
    y = torch.empty_like(x)
    raw_stream = torch._C._cuda_getCurrentRawStream
    launch = lib.normjit_launch
    xp, yp, wp = x.data_ptr(), y.data_ptr(), w.data_ptr()
    candidates["ctypes normjit_launch (floor)"] = lambda: launch(kernel, xp, yp, wp, None, 1, eps,
                                                                 raw_stream(0))
    # The path normjit.torch takes: the extension module normjit._launch where installed.
    fast = _capi.launch_function()
    if fast is not launch:
        candidates["normjit._launch (floor)"] = lambda: fast(kernel, xp, yp, wp, None, 1, eps,
                                                             raw_stream(0))

    rows = []
    results = {}
    with torch.inference_mode():
        errors = {}
        for name, fn in candidates.items():
            try:
                out = fn()
                torch.cuda.synchronize()
                if isinstance(out, torch.Tensor):
                    errors[name] = ((out.double() - ref).norm() / ref.norm()).item()
                elif name.endswith("(floor)"):  # wrote y
                    errors[name] = ((y.double() - ref).norm() / ref.norm()).item()
                else:
                    errors[name] = float("nan")
            except Exception as e:  # noqa: BLE001 - one failure must not hide the rest
                notes.append(f"{name}: failed: {type(e).__name__}: {e}")
        timed = per_call_us({name: candidates[name] for name in errors}, args.calls,
                            args.repeats, warmup=200)
        # The GPU's own time per call, without the host: 100 calls captured in a CUDA graph,
        # replayed. A host row near this is bound by the GPU, not by the host.
        for name in ("normjit.torch.rms_norm", "torch.nn.functional.rms_norm"):
            try:
                notes.append(f"GPU time per call of {name} (100 calls in a CUDA graph, replayed "
                             f"20 times): {gpu_us_per_call(candidates[name]):.2f} us")
            except Exception as e:  # noqa: BLE001 - a note, not a result
                notes.append(f"GPU time of {name} not measured: {type(e).__name__}: {e}")
    for name, times in timed.items():
        med, err = statistics.median(times), errors[name]
        results[name] = {"median_us": med, "min_us": min(times), "rel_err": err,
                         "times_us": times}
        rows.append((name, med, min(times), err))
        print(f"{name:34s} {med:7.2f} us median, {min(times):7.2f} min, rel. err {err:.1e}",
              flush=True)

    base = results.get("torch.nn.functional.rms_norm", {}).get("median_us")
    props = torch.cuda.get_device_properties(0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python3", "scripts/host_cost.py", *sys.argv[1:]])
    revision = os.environ.get("NORMJIT_REVISION", "")
    lines = [
        "## Host cost per call from Python (decode-size RMSNorm)",
        "",
        f"Written by `{command}` on {props.name} ({date}); PyTorch {torch.__version__}, "
        f"Python {sys.version.split()[0]}" + (f", normjit {revision}" if revision else "") + ".",
        f"x [1, {h}] bf16, weight [{h}] bf16, eps {eps:g}, under torch.inference_mode(): "
        f"{args.calls} calls back to back then one synchronize, per-call wall time, median and "
        f"minimum of {args.repeats} repeats (the candidates' repeats taking turns) after 200 "
        "warm-up calls: host time (Python, dispatch, launch) unless it falls to the GPU time "
        "per call noted below.",
        "",
        "| call | median us/call | min us/call | vs F.rms_norm | rel. err vs float64 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, med, lo, err in rows:
        ratio = f"{med / base:.2f}x" if base else "—"
        lines.append(f"| {name} | {med:.2f} | {lo:.2f} | {ratio} | {err:.1e} |")
    for n in notes:
        lines.append("")
        lines.append(f"- {n}")
    text = "\n".join(lines) + "\n"
    print()
    print(text)

    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "host-cost.md").write_text(text)
        (Path(out) / "host-cost.json").write_text(json.dumps(results, indent=1))
    if not args.no_write:
        Path(args.doc).write_text(text)
        perf = Path(args.performance)
        if perf.exists():
            from compare_torch import splice_host_cost
            perf.write_text(splice_host_cost(perf.read_text(), text))
            if out:
                (Path(out) / "performance.md").write_text(perf.read_text())
        print(f"wrote {args.doc}" + (f" and its block in {perf}" if perf.exists() else ""))
    njt_us = results.get("normjit.torch.rms_norm", {}).get("median_us")
    return 0 if njt_us is not None and base is not None else 1


if __name__ == "__main__":
    sys.exit(main())
