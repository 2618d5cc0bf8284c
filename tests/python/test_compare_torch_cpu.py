"""tools/compare_torch.py and tools/bench_variants.py where there is no GPU: their --selftest
(no torch needed), and compare_torch's measuring flow on CPU tensors (needs PyTorch): its Runner
with torch.cuda's events stubbed, normjit standing in through the pointers the Runner passes,
a stand-in Liger-Kernel with Liger 0.8.5's signatures (one of them wrong on purpose) and a
stand-in of the engines' rmsnorm (tools/kernel_peers.py's signature; vLLM's absent), so the Liger,
FlashInfer, vLLM and copy columns, their checks against float64, the n/a notes and the best peer
are exercised end to end; and bench_variants' whole flow (--cpu-check: PyTorch standing in for
normjit through the launch arguments the script builds) over every variant."""
import argparse
import importlib.metadata
import json
import math
import statistics
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))


@pytest.mark.parametrize("tool", ["compare_torch.py", "bench_variants.py"])
def test_selftest(tool):
    out = subprocess.run([sys.executable, str(REPO / "tools" / tool), "--selftest"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "selftest: ok" in out.stdout


def fake_liger(torch, wrong_layernorm: bool):
    """Modules liger_kernel.ops.{rms_norm,layer_norm,group_norm} with Liger 0.8.5's forward
    signatures and return tuples (y first), computing in float32."""
    F = torch.nn.functional
    calls = []

    def rms_norm_forward(X, W, eps, offset, casting_mode, row_mode):
        assert X.dim() == 2 and casting_mode == "gemma" and offset == 0.0 and row_mode is None
        calls.append(("rms", tuple(X.shape)))
        xf = X.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        if W is not None:
            y = y * (offset + W.float())
        return y.to(X.dtype), X, None, 0, 0, casting_mode

    def layer_norm_forward(X, W, B, eps):
        assert X.dim() == 2 and W.shape == B.shape == (X.shape[1],)
        calls.append(("ln", tuple(X.shape)))
        y = F.layer_norm(X.float(), (X.shape[1],), W.float(), B.float(), eps)
        if wrong_layernorm:
            y = y + 0.01
        return y.to(X.dtype), X, None, None, 0, 0

    def group_norm_forward(X, num_channels, num_groups, W, B, eps):
        assert X.shape[1] == num_channels
        calls.append(("gn", tuple(X.shape)))
        y = F.group_norm(X.float(), num_groups, W.float(), B.float(), eps)
        return y.to(X.dtype), X, None, None, 0

    mods = {}
    for name, fn in (("rms_norm", rms_norm_forward), ("layer_norm", layer_norm_forward),
                     ("group_norm", group_norm_forward)):
        m = types.ModuleType(f"liger_kernel.ops.{name}")
        setattr(m, fn.__name__, fn)
        mods[m.__name__] = m
    mods["liger_kernel"] = types.ModuleType("liger_kernel")
    mods["liger_kernel.ops"] = types.ModuleType("liger_kernel.ops")
    return mods, calls


class StandInNormjit:
    """normjit's C API as the Runner calls it, computed by compare_torch's float64 reference on
    tensors made from the raw pointers the Runner passes (CPU memory)."""

    def __init__(self, torch, ct):
        self.torch, self.ct = torch, ct

    def counters(self, engine):
        return (1, 0, 0)

    def tensor(self, ptr, shape, dtype):
        import ctypes
        torch = self.torch
        dt = self.ct.torch_dtype(dtype)
        n = math.prod(shape) * torch.empty((), dtype=dt).element_size()
        buf = (ctypes.c_char * n).from_address(ptr)
        return torch.frombuffer(buf, dtype=dt).view(shape)

    def bind(self, engine, p, x, y, weight, bias, stream):
        def call():
            xt, yt = self.tensor(x, p.shape, p.dtype), self.tensor(y, p.shape, p.dtype)
            w = self.tensor(weight, p.param_shape, p.dtype).double() if weight else None
            b = self.tensor(bias, p.param_shape, p.dtype).double() if bias else None
            yt.copy_(self.ct.reference_f64(p, xt, w, b))
        return call


def test_runner_on_cpu(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch",
                                reason="PyTorch is not installed (scripts/test.sh installs it)")
    import compare_torch as ct

    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self):
            import time
            self.t = time.perf_counter()

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

    monkeypatch.setattr(ct, "DEVICE", "cpu")
    for name, value in (("Event", Event), ("synchronize", lambda: None),
                        ("empty_cache", lambda: None), ("reset_peak_memory_stats", lambda: None),
                        ("max_memory_allocated", lambda: 0),
                        ("_sleep", lambda cycles: None),
                        ("current_stream", lambda: types.SimpleNamespace(cuda_stream=0))):
        monkeypatch.setattr(torch.cuda, name, value)
    mods, calls = fake_liger(torch, wrong_layernorm=True)
    for name, m in mods.items():
        monkeypatch.setitem(sys.modules, name, m)
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda d: "0.8.5-stand-in" if d == "liger_kernel" else real_version(d))

    fns, version = ct.load_liger(*ct.LIGER_FORWARDS.values())
    assert version == "0.8.5-stand-in" and len(fns) == 3
    P = ct.Problem
    problems = [
        P("rms channel", "seeds", "rmsnorm", (2, 8, 4, 4), "f32", 1e-5),
        P("rms rows", "llm", "rmsnorm", (16, 64), "bf16", 1e-6, normalized_dims=1,
          affine="weight"),
        P("ln 2 dims", "odd", "layernorm", (8, 4, 6), "f32", 1e-5, normalized_dims=2,
          affine="both"),
        P("ln long", "odd", "layernorm", (2, 65537), "f32", 1e-5, normalized_dims=1,
          affine="both"),
        P("gn", "sd", "groupnorm", (2, 8, 3, 3), "f32", 1e-5, groups=4, affine="both"),
    ]
    args = argparse.Namespace(seed=3, reps=3, rounds=2, warmup=1, skip_compile=True)
    warnings = []
    fi_calls = []

    def fake_flashinfer_rmsnorm(x, w, eps):  # kernel_peers' rmsnorm: 2-D rows, y new
        assert x.dim() == 2 and w.shape == (x.shape[1],)
        fi_calls.append(tuple(x.shape))
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    runner = ct.Runner(args, StandInNormjit(torch, ct), 0, 1 << 20, 3000.0, warnings, fns,
                       version, {"flashinfer": ({"rmsnorm": fake_flashinfer_rmsnorm}, "stand-in"),
                                 "vllm": ({}, "absent: no libvllm_norm.so (test)")})
    results = [runner.run(p) for p in problems]
    by = {r.problem.name: r for r in results}
    for r in results:
        assert not r.error, r.error
        assert r.passed, (r.problem.name, r.checks)
        # Every timed implementation: reps calls in each of the rounds.
        assert r.copy.status == "ok" and r.copy.ms is not None and len(r.copy.times_ms) == 6
        assert len(r.normjit.times_ms) == 6 and len(r.eager.times_ms) == 6
        assert r.rotation > 1  # tiny problems rotate through sets, the copy too
    assert by["rms channel"].liger.status == "n/a"
    assert by["ln long"].liger.status == "n/a" and "65536" in by["ln long"].liger.message
    # Several trailing dims reach Liger as one row; checked on both distributions.
    assert ("ln", (8, 24)) in calls and ("rms", (16, 64)) in calls and ("gn", (2, 8, 3, 3)) in calls
    assert by["rms rows"].liger.passed is True and len(by["rms rows"].liger_checks) == 2
    assert by["gn"].liger.passed is True and by["gn"].liger.ms is not None
    wrong = by["ln 2 dims"]
    assert wrong.liger.passed is False and len(wrong.liger_checks) == 2
    assert not any(c.passed for c in wrong.liger_checks)
    # FlashInfer: the 16-bit RMSNorm rows with a weight only, checked and timed.
    fi = by["rms rows"].flashinfer
    assert fi.status == "ok" and fi.passed is True and len(fi.times_ms) == 6, fi
    assert fi_calls and set(fi_calls) == {(16, 64)}
    assert by["rms channel"].flashinfer.status == "n/a"
    assert "RMSNorm kernels only" in by["gn"].flashinfer.message
    assert by["rms rows"].vllm.status == "absent" and "(test)" in by["rms rows"].vllm.message

    report = ct.Report(env={"device": "CPU", "Liger-Kernel": version}, command="test",
                       date_utc="now", settings={"reps": 3, "warmup": 1, "seed": 3},
                       copy_gbps=3000.0, copy_times_ms=[1.0], results=results,
                       planned=len(results), jit=None)
    md = ct.render_markdown(report, None, None)
    tables = [t for t in ct.check_tables(md) if t[0] == ct.RESULT_HEADERS]
    col = {h: i for i, h in enumerate(ct.RESULT_HEADERS)}
    rows = {row[0]: row for t in tables for row in t[1:]}
    assert rows["rms channel"][col["Liger ms"]] == "n/a [1]"
    assert rows["ln long"][col["Liger ms"]].startswith("n/a [")
    assert rows["ln 2 dims"][col["Liger ms"]].endswith("**FAIL**")
    assert rows["ln 2 dims"][col["best peer"]] == "eager"
    assert rows["gn"][col["best peer"]] in ("eager", "Liger")
    assert rows["gn"][col["% of copy"]].endswith("%") and rows["gn"][col["copy ms"]] != "—"
    assert "ln 2 dims f32, Liger on N(100, 1): rel. err" in md
    assert "Liger n/a: Liger's rms_norm_forward normalizes the last dim only" in md
    assert "FlashInfer n/a: FlashInfer's rmsnorm normalizes the last dim only" in md
    assert rows["rms rows"][col["FlashInfer ms"]] not in ("absent", "not run", "—")

    # Without Liger, every Liger cell says absent and the method says why.
    runner = ct.Runner(args, StandInNormjit(torch, ct), 0, 1 << 20, 3000.0, warnings, {},
                       "not measured (ModuleNotFoundError: No module named 'liger_kernel')")
    r = runner.run(problems[1])
    assert r.liger.status == "absent" and r.passed and r.copy.status == "ok"
    report.results = [r]
    md = ct.render_markdown(report, None, None)
    assert "Liger-Kernel is absent from this run**: not measured (ModuleNotFoundError" in md
    assert r.flashinfer.status == "absent"
    assert "FlashInfer is absent from this run**: absent: not loaded" in md
    assert "vLLM is absent from this run**: absent: not loaded" in md


def test_timing_rounds_take_the_implementations_in_turn(monkeypatch):
    """Runner.timed (no torch needed: time_cuda stubbed): every implementation is timed in
    each round, the order given rotated by one place a round, on rotating-set indices that go
    on from round to round; the median is of all rounds' calls; one that fails is marked and
    left out of later rounds while the others go on."""
    import compare_torch as ct
    order = []

    def fake_time_cuda(fn, reps, warmup):
        for i in range(warmup + reps):
            fn(i)
        return [float(len(order))] * reps

    monkeypatch.setattr(ct, "time_cuda", fake_time_cuda)
    monkeypatch.setattr(ct, "free_device_memory", lambda: None)
    runner = object.__new__(ct.Runner)
    runner.args = argparse.Namespace(reps=2, warmup=1, rounds=3)
    runner.copy_gbps = None
    runner.log = lambda text: None
    p = ct.Problem("rows", "llm", "rmsnorm", (16, 64), "bf16", 1e-6, normalized_dims=1)
    r = ct.ProblemResult(problem=p)
    seen = {"normjit": [], "eager": [], "liger": []}

    def call(name):
        def fn(i):
            order.append(name)
            seen[name].append(i)
            if name == "liger" and len(seen["liger"]) > 3:
                raise RuntimeError("liger broke in round 2")
        return fn

    r.liger.status = "ok"
    runner.timed(r, p, [(n, call(n)) for n in ("normjit", "eager", "liger")])
    # Round 1: normjit, eager, liger (3 calls each: 1 warm-up, 2 timed); round 2 starts one
    # place on: eager, liger (which fails on its first call), normjit; round 3 without liger,
    # its order (normjit, eager) rotated by 2 places: as given.
    assert order == (["normjit"] * 3 + ["eager"] * 3 + ["liger"] * 3 + ["eager"] * 3
                     + ["liger"] + ["normjit"] * 3 + ["normjit"] * 3 + ["eager"] * 3)
    assert seen["normjit"] == [0, 1, 2, 3, 4, 5, 6, 7, 8] and seen["liger"] == [0, 1, 2, 3]
    assert len(r.normjit.times_ms) == 6 and r.normjit.ms == statistics.median(r.normjit.times_ms)
    assert r.normjit.times_ms[:2] != r.normjit.times_ms[-2:]  # the rounds' calls, not one round's
    assert r.liger.status == "failed" and "round 2" in r.liger.message and r.liger.ms is None
    assert r.eager.ms is not None and len(r.eager.times_ms) == 6


def test_liger_signatures():
    """Where Liger-Kernel is importable, its forwards take the arguments compare_torch passes."""
    pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs it)")
    import inspect

    import compare_torch as ct
    fns, version = ct.load_liger(*ct.LIGER_FORWARDS.values())
    if not fns:
        pytest.skip(f"Liger-Kernel: {version}")
    params = {k: list(inspect.signature(f).parameters) for k, f in fns.items()}
    assert params == {"rms_norm.rms_norm_forward": ["X", "W", "eps", "offset", "casting_mode",
                                                    "row_mode"],
                      "layer_norm.layer_norm_forward": ["X", "W", "B", "eps"],
                      "group_norm.group_norm_forward": ["X", "num_channels", "num_groups", "W",
                                                        "B", "eps"]}, params


def test_variants_flow_on_cpu(tmp_path):
    """bench_variants --cpu-check over all seven variants (torch.compile skipped: CI's time):
    every row's launch arguments reach the stand-in, its output passes the float64 check, and
    normjit, eager and the copy are timed; the section and the JSON are written."""
    pytest.importorskip("torch", reason="PyTorch is not installed (scripts/test.sh installs it)")
    out, doc = tmp_path / "variants.json", tmp_path / "performance.md"
    run = subprocess.run([sys.executable, str(REPO / "tools" / "bench_variants.py"),
                          "--cpu-check", "--skip-compile", "--json-out", str(out),
                          "--doc", str(doc)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["variant"] for r in rows} == {"add-rmsnorm", "f32-weight", "fp8-out", "gemma",
                                            "qk-norm", "combined", "add-layernorm"}
    for r in rows:
        where = (r["variant"], r["hidden"], r["tokens"])
        assert not r["error"] and not r["skipped"], where
        assert r["normjit"]["status"] == "ok" and r["normjit"]["times_us"], where
        assert r["check"]["passed"] is True and r["check"]["nonfinite"] == 0, where
        assert r["eager"]["status"] == "ok" and r["copy"]["status"] == "ok", where
        assert r["compile"]["status"] == "skipped", where
    assert "## Variants (issue 18)" in doc.read_text()


def test_the_copy_rule_follows_the_runs_settings():
    """copy_rule_text says the copy's halves are whole 4 KiB for runs that record copy_grain,
    the exact bytes for runs before it, both where merge_runs merged runs of each kind; copy_half
    (own_copy's size) is whole 4 KiB from 4 KiB up, the exact half below."""
    import compare_torch as ct
    new, old = ct.copy_rule_text({"copy_grain": ct.COPY_GRAIN}), ct.copy_rule_text({})
    assert "rounded down to whole 4 KiB" in new and "before 4026e8a" not in new
    assert "exact bytes in runs before 4026e8a" in old and "rounded down" not in old

    def run(settings):
        return ct.BenchReport(env={}, command="c", date_utc="d", settings=settings)
    merged = ct.merge_runs([run({"seed": 1}), run({"seed": 2, "copy_grain": 4096})],
                           key=lambda row: row)
    assert merged.settings["copy_grain"] == "mixed"
    text = ct.copy_rule_text(merged.settings)
    assert "rounded down" in text and "before 4026e8a" in text
    both = ct.merge_runs([run({"copy_grain": 4096}), run({"copy_grain": 4096})], lambda row: row)
    assert ct.copy_rule_text(both.settings) == new
    assert ct.copy_half(2 * 4096 * 3074 + 4096) == 4096 * 3074  # 4 KiB x 3074.5 a half
    assert ct.copy_half(2 * 4096 * 3077) == 4096 * 3077
    assert ct.copy_half(3000) == 1500 and ct.copy_half(1) == 1
    assert ct.copy_rounded(2 * 4096 * 3074 + 4096) and not ct.copy_rounded(2 * 4096 * 3077)
    assert not ct.copy_rounded(3000)
