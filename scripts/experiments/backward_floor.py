#!/usr/bin/env python3
"""The structural floor of the LLM rows' backward (session 76): how close to the copy of its
bytes can any kernel of the backward's shape get?

For each bf16 RMSNorm and LayerNorm row of bench_backward's `llm` group ([1024 or 4096, H], H =
4096, 8192, 16384), times side by side, with bench_backward's rotation of input sets and
compare_torch.time_cuda (median of --reps calls):
- `copy`: compare_torch.own_copy of the row's bytes (the tables' floor);
- `normjit`: normjit's backward kernel of the row's spec (bench_backward.CApi, statistics of 0
  and 1: the time does not depend on them);
- `torch add`: torch.add(x, dy, out=dx), PyTorch's elementwise kernel moving x, dy and dx (two
  thirds read, one third written, as the backward; the copy reads and writes half each);
- `add`: the same in scripts/experiments/backward_floor.cu's grid-stride kernel;
- `rows RrCc gG`: backward_floor.cu's row kernel with R row sums (0: none, dx = x + dy), C column
  sums (0: none; 1 RMSNorm's dweight, 2 LayerNorm's dweight and dbias: partials, a grid
  barrier, the final sum; with `2 launches` the final sum is a second kernel and there is no
  barrier) and a grid of G CTAs (a multiple of the SMs, resident at once).
- `two-phase sS gG` (session 76's lead, for rows whose x and dy fit in L2): the row sums alone
  (x and dy from DRAM), a grid barrier, then column slices of S 16-byte words over every row (x
  and dy again, from L2): dx and the column sums complete within each CTA, no partials and no
  final sum. S = 2 (one 32-byte sector a row, session 76's), 4 and 8 (session 77).
Each row kernel's output is checked against PyTorch once before it is timed (a broken barrier
would read fast). Build the library first (on the build machine, sm_90):
  bash scripts/experiments/backward_floor.sh            -> .devcarry/floor/libbackward_floor.so
then, on the GPU machine (carry build-gpu's libnormjit.so* and .devcarry):
  python3 scripts/experiments/backward_floor.py --build build-gpu [--only t1024] [--json F]
"""
import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

here = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(here / "tools"))
import bench_backward as bb  # noqa: E402
import compare_torch as ct  # noqa: E402


def median_us(times_ms: list) -> float:
    return statistics.median(times_ms) * 1e3


class Floor:
    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.floor_occupancy.argtypes = [ctypes.c_int] * 3
        self.lib.floor_rows.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 6 + [
            ctypes.c_uint, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.lib.floor_final.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 3 + [
            ctypes.c_void_p]
        self.lib.floor_two_occupancy.argtypes = [ctypes.c_int] * 3
        self.lib.floor_two.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 6 + [
            ctypes.c_uint, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.lib.floor_add.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t, ctypes.c_int,
                                                               ctypes.c_void_p]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--floor", default=str(here / ".devcarry/floor/libbackward_floor.so"))
    ap.add_argument("--only", default="llm", help="bench_backward's --only (default: llm)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default=None, help="write the times here too")
    a = ap.parse_args()
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    lib = Path(a.build) / "libnormjit.so"
    nj = bb.CApi(lib, None)
    fl = Floor(Path(a.floor))
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, props.L2_cache_size
    stream = torch.cuda.current_stream().cuda_stream
    print(f"device: {props.name}, {sms} SMs, L2 {l2 >> 20} MiB; torch {torch.__version__}")
    args = bb.parse_args(["--build", a.build, "--only", a.only, "--dtypes", "bf16"])
    problems = [p for p in bb.select(args)
                if p.op in ("rmsnorm", "layernorm") and p.dtype == "bf16" and not p.residual
                and len(p.shape) == 2 and p.shape[1] in (4096, 8192, 16384)]
    results = []
    for p in problems:
        rows, h = p.shape
        ln = p.op == "layernorm"
        nbytes = bb.backward_bytes(p)
        per_set = 3 * p.numel * 2
        sets = max(1, min(256, -(-4 * l2 // per_set)))
        print(f"\n{p.key} [{rows}, {h}] {nbytes / 1e6:.1f} MB, {sets} sets", flush=True)
        res = {"key": p.key, "op": p.op, "shape": [rows, h], "bytes": nbytes, "sets": sets,
               "us": {}}

        def timed(name, fn):
            us = median_us(ct.time_cuda(fn, a.reps, 5, 1.0, 100.0))
            res["us"][name] = us
            print(f"  {name:18s} {us:8.2f} µs", flush=True)

        def checked(name, launch, colsum, rs, cs):
            """launch's first output checked against float64, then launch timed (not where
            the check failed: a broken barrier would read fast)."""
            launch(0)
            torch.cuda.synchronize()
            if not check(xs[0], dys[0], dx, colsum, rs, cs, h):
                print(f"  {name:18s} WRONG OUTPUT, not timed", flush=True)
                res["us"][name] = None
                return
            timed(name, launch)

        copy = ct.own_copy(nbytes, sets, "cuda")
        timed("copy", copy)
        copy = None
        ct.free_device_memory()
        g = torch.Generator(device="cuda").manual_seed(76)
        xs = [torch.randn(rows, h, device="cuda", generator=g).to(torch.bfloat16)
              for _ in range(sets)]
        dys = [torch.randn(rows, h, device="cuda", generator=g).to(torch.bfloat16)
               for _ in range(sets)]
        dx = torch.empty_like(xs[0])
        # normjit's own kernel.
        kernel = nj.prepare(bb.backward_spec(p))
        mean = torch.zeros(bb.stats_shape(p), device="cuda") if ln else None
        rstd = torch.ones(bb.stats_shape(p), device="cuda")
        weight = torch.ones(p.param_shape, device="cuda", dtype=torch.bfloat16)
        dw = torch.empty_like(weight)
        db = torch.empty_like(weight) if p.affine == "both" else None
        ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
        calls = [nj.bind(kernel, {"x": ptr(xs[i]), "dy": ptr(dys[i]), "mean": ptr(mean),
                                  "rstd": ptr(rstd), "weight": ptr(weight), "dx": ptr(dx),
                                  "dweight": ptr(dw), "dbias": ptr(db)},
                         bb.launch_batch(p), stream) for i in range(sets)]
        timed("normjit", lambda i: calls[i % sets]())
        calls = None
        timed("torch add", lambda i: torch.add(xs[i % sets], dys[i % sets], out=dx))
        n = rows * h
        timed("add", lambda i: fl.lib.floor_add(
            xs[i % sets].data_ptr(), dys[i % sets].data_ptr(), dx.data_ptr(), n, sms * 8, stream))
        sums = 2 if ln else 1
        for rs, cs, two in ((0, 0, 0), (sums, 0, 0), (0, sums, 0), (sums, sums, 0),
                            (sums, sums, 1)):
            occ = fl.lib.floor_occupancy(h, rs, cs)
            grids = sorted({min(rows, sms * k) for k in (1, 2, 4, occ) if 0 < k <= occ})
            for grid in grids:
                name = f"rows r{rs}c{cs} g{grid}" + (" 2 launches" if two else "")
                partial = torch.empty(max(1, cs) * grid * h, device="cuda")
                colsum = torch.empty(max(1, cs) * h, device="cuda")
                counter = torch.zeros(1, dtype=torch.int32, device="cuda")
                launches = [0]

                def launch(i, rs=rs, cs=cs, grid=grid, partial=partial, colsum=colsum,
                           counter=counter, launches=launches, two=two, name=name):
                    launches[0] += 1
                    err = fl.lib.floor_rows(h, rs, cs, xs[i % sets].data_ptr(),
                                            dys[i % sets].data_ptr(), dx.data_ptr(),
                                            partial.data_ptr(), colsum.data_ptr(),
                                            None if two else counter.data_ptr(),
                                            launches[0] * grid, rows, grid, stream)
                    if two and not err:
                        err = fl.lib.floor_final(partial.data_ptr(), colsum.data_ptr(), grid, h,
                                                 cs, stream)
                    if err:
                        raise RuntimeError(f"{name}: cudaError {err}")

                checked(name, launch, colsum, rs, cs)
                partial = colsum = counter = None
        for slice_words in (2, 4, 8):
            occ = fl.lib.floor_two_occupancy(h, sums, slice_words)
            for grid in sorted({min(rows, sms * k) for k in (1, 2, occ) if 0 < k <= occ}):
                name = f"two-phase s{slice_words} g{grid}"
                rowsums = torch.empty(2 * rows, device="cuda")
                colsum = torch.empty(sums * h, device="cuda")
                counter = torch.zeros(1, dtype=torch.int32, device="cuda")
                launches = [0]

                def launch2(i, grid=grid, rowsums=rowsums, colsum=colsum, counter=counter,
                            launches=launches, name=name, slice_words=slice_words):
                    launches[0] += 1
                    err = fl.lib.floor_two(h, sums, slice_words, xs[i % sets].data_ptr(),
                                           dys[i % sets].data_ptr(), dx.data_ptr(),
                                           rowsums.data_ptr(), colsum.data_ptr(),
                                           counter.data_ptr(), launches[0] * grid, rows, grid,
                                           stream)
                    if err:
                        raise RuntimeError(f"{name}: cudaError {err}")

                checked(name, launch2, colsum, sums, sums)
        xs = dys = dx = None
        ct.free_device_memory()
        c = res["us"]["copy"]
        print("  % of copy: " + ", ".join(f"{k} {100 * c / v:.0f}%" for k, v in res["us"].items()
                                          if v and k != "copy"), flush=True)
        results.append(res)
    nj.close()
    if a.json:
        Path(a.json).write_text(json.dumps({"device": props.name, "results": results}, indent=1))
    return 0


def check(x, dy, dx, colsum, rs: int, cs: int, h: int) -> bool:
    """The row kernel's dx and column sums against float64."""
    import torch
    xd, dd = x.double(), dy.double()
    if rs:
        a = (xd * dd).sum(1, keepdim=True) / h
        b = dd.sum(1, keepdim=True) / h if rs > 1 else 0.0
        want = dd - xd * a - b
    else:
        want = xd + dd
    ok = torch.allclose(dx.double(), want, rtol=2e-2, atol=2e-2)
    if cs:
        sums = [(xd * dd).sum(0), dd.sum(0)][:cs]
        got = colsum.double().view(cs, h)
        for k in range(cs):
            ok = ok and torch.allclose(got[k], sums[k], rtol=1e-3, atol=1e-2 * x.shape[0] ** 0.5)
    return bool(ok)


if __name__ == "__main__":
    sys.exit(main())
