"""tools/bench_backward.py and tools/bench_vision.py where there is no GPU: their --selftest (no
torch needed), and their measuring flows on CPU tensors (needs PyTorch): normjit standing in
through the pointers and calls the scripts make, stand-in Liger-Kernel autograd Functions with
Liger 0.8.5's signatures (one of them wrong on purpose), torch.compile with the aot_eager
backend (no C++ compiler needed), so that the checks against float64, the n/a reasons, the
best peer and the rendered tables are exercised end to end."""
import ctypes
import importlib.metadata
import json
import math
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import NoDeviceGuard

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
NO_TORCH = "PyTorch is not installed (scripts/test.sh installs it)"


@pytest.mark.parametrize("tool", ["bench_backward.py", "bench_vision.py"])
def test_selftest(tool):
    out = subprocess.run([sys.executable, str(REPO / "tools" / tool), "--selftest"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "selftest: ok" in out.stdout


def fake_liger_functions(torch, wrong_layernorm_dw: bool):
    """liger_kernel.ops.{rms_norm,layer_norm,group_norm} with autograd Functions of Liger
    0.8.5's apply signatures; forward and backward by PyTorch (recomputed in the backward)."""
    F = torch.nn.functional
    calls = []

    def function(name, fwd, nparams):
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, *rest):
                ctx.rest = rest
                ctx.save_for_backward(x, *rest[:nparams])
                calls.append((name, tuple(x.shape)))
                return fwd(x, *rest)

            @staticmethod
            def backward(ctx, dy):
                x, *params = ctx.saved_tensors
                with torch.enable_grad():
                    leaves = [t.detach().requires_grad_() for t in [x] + params]
                    y = fwd(leaves[0], *leaves[1:], *ctx.rest[nparams:])
                    grads = list(torch.autograd.grad(y, leaves, dy))
                if wrong_layernorm_dw and name == "ln":
                    grads[1] = grads[1] + 1.0
                return (*grads, *([None] * (len(ctx.rest) - nparams)))
        Fn.__name__ = name
        return Fn

    def rms(x, w, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
        assert x.dim() == 2 and casting_mode == "gemma" and in_place is False
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return (y * (offset + w.float()) if w is not None else y).to(x.dtype)

    def ln(x, w, b, eps):
        assert x.dim() == 2 and w.shape == (x.shape[1],)
        return F.layer_norm(x.float(), (x.shape[1],), w.float(), b.float(), eps).to(x.dtype)

    def gn(x, w, b, num_channels, num_groups, eps):
        assert x.shape[1] == num_channels
        return F.group_norm(x.float(), num_groups, w.float(), b.float(), eps).to(x.dtype)

    class FusedAdd(torch.autograd.Function):  # LigerFusedAddRMSNormFunction's apply
        @staticmethod
        def forward(ctx, x, r, w, eps, offset=0.0, casting_mode="llama", in_place=False):
            assert x.dim() == 2 and casting_mode == "gemma" and in_place is False
            calls.append(("add", tuple(x.shape)))
            h = (x.float() + r.float()).to(r.dtype)
            ctx.save_for_backward(h, w)
            ctx.eps, ctx.offset = eps, offset
            return rms(h, w, eps, offset, "gemma", False), h

        @staticmethod
        def backward(ctx, dy, dh):
            h, w = ctx.saved_tensors
            with torch.enable_grad():
                hl, wl = h.detach().requires_grad_(), w.detach().requires_grad_()
                dx, dw = torch.autograd.grad(rms(hl, wl, ctx.eps, ctx.offset, "gemma", False),
                                             [hl, wl], dy)
            dx = dx + dh
            return dx, dx, dw, None, None, None, None

    mods = {"liger_kernel": types.ModuleType("liger_kernel"),
            "liger_kernel.ops": types.ModuleType("liger_kernel.ops")}
    add_module = types.ModuleType("liger_kernel.ops.fused_add_rms_norm")
    add_module.LigerFusedAddRMSNormFunction = FusedAdd
    mods[add_module.__name__] = add_module
    for module, cls, fn, nparams in (("rms_norm", "LigerRMSNormFunction", rms, 1),
                                     ("layer_norm", "LigerLayerNormFunction", ln, 2),
                                     ("group_norm", "LigerGroupNormFunction", gn, 2)):
        m = types.ModuleType(f"liger_kernel.ops.{module}")
        setattr(m, cls, function({"rms_norm": "rms", "layer_norm": "ln",
                                  "group_norm": "gn"}[module], fn, nparams))
        mods[m.__name__] = m
    return mods, calls


def host_tensor(torch, pointer, shape, dtype):
    n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * n).from_address(pointer), dtype=dtype).view(shape)


class BackwardStandIn:
    """bench_backward's CApi for CPU tensors: prepare refuses GroupNorm without an activation
    and the channel forms in nchw (to test the n/a path), takes the channel forms channels last
    (layout=nhwc) and GroupNorm with an activation (either layout); launches compute
    bench_backward.reference into the memory the pointers name (channels last: [N, *spatial, C]),
    from the statistics the bench hands over (and the bias, with an activation)."""

    def __init__(self, torch, bb, ct, wrong_rstd=False):
        self.torch, self.bb, self.ct = torch, bb, ct
        self.specs, self.launches = [], []

    def prepare(self, spec):
        from normjit import _capi
        fields = dict(w.split("=", 1) for w in spec.split())
        nchw_channels = fields.get("normalized_dims") == "0" and fields.get("layout") != "nhwc"
        if (fields["op"] == "groupnorm" and "activation" not in fields) or nchw_channels:
            raise _capi.UnsupportedError(_capi.Status.ERROR_UNSUPPORTED, "ERROR_UNSUPPORTED",
                                         f"backward=true is not yet supported for {fields['op']}")
        self.specs.append(spec)
        return len(self.specs)

    def bind(self, kernel, ptrs, batch, stream):
        torch, bb, ct = self.torch, self.bb, self.ct
        fields = dict(w.split("=", 1) for w in self.specs[kernel - 1].split())
        shape = tuple(int(s) for s in fields["shape"].split(","))
        p = bb.Problem("x", "t", fields["op"], shape, fields["dtype"], float(fields["eps"]),
                       normalized_dims=int(fields.get("normalized_dims", 0)),
                       groups=int(fields.get("groups", 0)), affine=fields["affine"],
                       activation=fields.get("activation", ""))
        dt = ct.torch_dtype(p.dtype)
        pt = ct.torch_dtype(fields.get("param_dtype", p.dtype))  # weight and its gradients
        offset = float(fields.get("weight_offset", 0.0))
        nhwc = fields.get("layout") == "nhwc"
        memory = (p.shape[0], *p.shape[2:], p.shape[1]) if nhwc else p.shape

        def call():
            self.launches.append((kernel, batch, dict(ptrs)))
            assert batch == bb.launch_batch(p)
            x, dy, dx = (host_tensor(torch, ptrs[k], memory, dt) for k in ("x", "dy", "dx"))
            if nhwc:  # [N, C, *spatial] views of channels-last memory
                x, dy, dx = (t.movedim(-1, 1) for t in (x, dy, dx))
            rstd = host_tensor(torch, ptrs["rstd"], bb.stats_shape(p), torch.float32)
            assert (ptrs["mean"] is None) == (p.op == "rmsnorm")
            _, _, _, _, rstd_ref = bb.reference(p, x, x, None)
            # The statistics handed over are the float64 ones rounded to float32.
            assert torch.equal(rstd, rstd_ref.float().reshape(rstd.shape))
            w = host_tensor(torch, ptrs["weight"], p.param_shape, pt).double() + offset \
                if ptrs["weight"] else None
            # The bias goes to a kernel with an activation (and affine both), to no other.
            assert (ptrs.get("bias") is not None) == bool(p.activation and p.affine == "both")
            b = host_tensor(torch, ptrs["bias"], p.param_shape, pt).double() \
                if ptrs.get("bias") else None
            rdx, wterm, bterm, _, _ = bb.reference(p, x, dy, w, b)
            dx.copy_(rdx)
            if ptrs["dweight"]:
                host_tensor(torch, ptrs["dweight"], p.param_shape, pt).copy_(bb.param_sum(p, wterm))
            if ptrs["dbias"]:
                host_tensor(torch, ptrs["dbias"], p.param_shape, pt).copy_(bb.param_sum(p, bterm))
        return call


@pytest.fixture
def liger(monkeypatch):
    torch = pytest.importorskip("torch", reason=NO_TORCH)
    mods, calls = fake_liger_functions(torch, wrong_layernorm_dw=True)
    for name, m in mods.items():
        monkeypatch.setitem(sys.modules, name, m)
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda d: "0.8.5-stand-in" if d == "liger_kernel" else real_version(d))
    return calls


def test_backward_flow_on_cpu(liger, tmp_path, monkeypatch):
    import torch
    from conftest import launch_path_into
    from emulator import Emulator
    import bench_backward as bb
    import compare_torch as ct
    P = ct.Problem
    problems = [
        P("rms channel", "seeds", "rmsnorm", (2, 8, 4, 4), "f32", 1e-5),
        P("ln 3 dims", "seeds", "layernorm", (4, 3, 5, 6), "f32", 1e-5, normalized_dims=3,
          affine="both"),
        P("gn", "seeds", "groupnorm", (2, 8, 3, 3), "f32", 1e-5, groups=4, affine="both"),
        P("rms rows", "llm", "rmsnorm", (16, 64), "bf16", 1e-6, normalized_dims=1,
          affine="weight"),
        P("ln rows", "llm", "layernorm", (16, 64), "bf16", 1e-5, normalized_dims=1,
          affine="both"),
        bb.Problem("gemma rows", "gemma", "rmsnorm", (16, 96), "bf16", 1e-6, normalized_dims=1,
                   affine="weight", weight_offset=1.0, param_dtype="f32"),
        bb.Problem("add rows", "add", "rmsnorm", (16, 64), "bf16", 1e-6, normalized_dims=1,
                   affine="weight", residual="bf16"),
        bb.Problem("convnext map", "convnext", "layernorm", (2, 8, 3, 5), "f32", 1e-6,
                   normalized_dims=0, affine="both", layout="nhwc"),
        bb.Problem("gn silu", "sd_silu", "groupnorm", (2, 64, 4, 4), "bf16", 1e-5, groups=32,
                   affine="both", activation="silu"),
        bb.Problem("gn silu cl", "sd_silu", "groupnorm", (2, 64, 3, 5), "bf16", 1e-5,
                   groups=32, affine="both", layout="nhwc", activation="silu"),
        bb.Problem("ln gelu rows", "llm", "layernorm", (16, 64), "f32", 1e-5,
                   normalized_dims=1, affine="both", activation="gelu"),
    ]
    doc, out = tmp_path / "performance.md", tmp_path / "b.json"
    args = bb.parse_args(["--reps", "2", "--warmup", "1", "--compile-backend", "aot_eager",
                          "--doc", str(doc), "--json-out", str(out), "--seed", "3"])
    nj = BackwardStandIn(torch, bb, ct)
    emu = Emulator()  # normjit.torch's library for the add rows (CPU tensors)
    with launch_path_into(monkeypatch, emu):
        assert bb.run(args, problems, "test", nj=nj, cuda=False) == 0
    rep = bb.report_from_json(json.loads(out.read_text()))
    rows = {r.problem.name: r for r in rep.rows}
    for r in rep.rows:
        assert not r.error and not r.skipped, (r.problem.name, r.error)
        assert r.copy.status == "ok" and r.rotation > 1
        # The copy timed at the row's start and at its end, the faster kept (bb.faster_copy).
        assert r.copy.message.startswith("start ") and ", end " in r.copy.message, r.copy.message
        for impl in ("eager", "compile"):
            assert r.impl(impl).status == "ok" and r.checks[impl].passed, (r.problem.name, impl)
    # normjit: n/a with the library's reason where it refuses, else checked and timed.
    for name in ("rms channel", "gn"):
        assert rows[name].normjit.status == "n/a"
        assert "not yet supported" in rows[name].normjit.message
        assert "normjit" not in rows[name].checks
    for name in ("ln 3 dims", "rms rows", "ln rows", "gemma rows", "add rows", "convnext map",
                 "gn silu", "gn silu cl", "ln gelu rows"):
        r = rows[name]
        assert r.normjit.status == "ok" and r.passed and len(r.normjit.times_ms) == 2
        c = r.checks["normjit"]
        assert c.dw_err is not None and (c.db_err is not None) == (r.problem.affine == "both")
    # One launch per rotating set, each on its own set's pointers.
    kernels = {k for k, _, _ in nj.launches}
    assert len(kernels) == 8 and len({p["x"] for _, _, p in nj.launches}) > 3
    # ConvNeXt's LayerNorm2d channels last: normjit's nhwc kernel, timm's module (eager,
    # compile) and Liger on rows of C, each checked against float64 (the stand-in Liger's
    # layer norm has a wrong dweight: caught here too).
    cnx = rows["convnext map"]
    assert cnx.spec.endswith(" layout=nhwc backward=true"), cnx.spec
    assert all(cnx.checks[k].passed for k in ("normjit", "eager", "compile")), cnx.checks
    assert cnx.checks["liger"].dx_err < 1e-5 and not cnx.checks["liger"].passed
    assert ("ln", (2 * 3 * 5, 8)) in liger
    # Norm -> activation: normjit's kernel of the spec with activation= (given the bias),
    # eager's and compile's autograd of F.silu(nn.GroupNorm(x)) (F.gelu of nn.LayerNorm),
    # every one checked against the float64 reference through the activation's derivative;
    # Liger n/a (its norms have no activation).
    for name, act in (("gn silu", "silu"), ("gn silu cl", "silu"), ("ln gelu rows", "gelu")):
        r = rows[name]
        assert f" activation={act}" in r.spec and r.spec.endswith(" backward=true"), r.spec
        assert all(r.checks[k].passed for k in ("normjit", "eager", "compile")), r.checks
        assert r.checks["normjit"].db_err is not None
        assert r.liger.status == "n/a" and "has no activation" in r.liger.message, r.liger
        assert "liger" not in r.checks
    assert rows["gn silu cl"].spec.endswith(" activation=silu layout=nhwc backward=true")
    with_bias = {k for k, _, ptrs in nj.launches if ptrs.get("bias") is not None}
    assert len(with_bias) == 3 and all("activation=" in nj.specs[k - 1] for k in with_bias)
    assert not [c for c in liger if c[0] == "gn" and c[1] in ((2, 64, 4, 4), (2, 64, 3, 5))]
    # Liger: n/a for the channel form and for rows it cannot hold; its wrong dweight is FAIL.
    assert rows["rms channel"].liger.status == "n/a"
    assert rows["gn"].liger.status == "ok" and rows["gn"].checks["liger"].passed
    assert rows["rms rows"].checks["liger"].passed and rows["rms rows"].liger.passed
    # Gemma: the weight used is 1 + w (f32) for every implementation, and normjit's spec says so.
    gemma = rows["gemma rows"]
    assert gemma.spec.endswith("param_dtype=f32 weight_offset=1.0 backward=true"), gemma.spec
    assert all(gemma.checks[k].passed for k in ("normjit", "eager", "compile", "liger"))
    assert gemma.problem.weight_offset == 1.0 and gemma.problem.param_dtype == "f32"
    # add + RMSNorm: every implementation through autograd, normjit's through its training op
    # (the emulated forward with the residual, then the backward kernel on h), checked.
    add = rows["add rows"]
    assert all(add.impl(k).status == "ok" and add.checks[k].passed
               for k in ("normjit", "eager", "compile", "liger")), add
    assert {"launch_ex", "launch_backward"} <= set(emu.kinds())
    assert any("residual=bf16 save_stats=true" in spec for spec in emu.specs), emu.specs
    assert ("add", (16, 64)) in liger
    wrong = rows["ln rows"]
    assert wrong.liger.passed is False and not wrong.checks["liger"].passed
    assert wrong.checks["liger"].dw_err > wrong.checks["liger"].dw_bound
    assert wrong.checks["liger"].db_err < wrong.checks["liger"].db_bound
    assert wrong.best_peer() in ("eager", "compile")
    assert ("ln", (16, 64)) in liger and ("ln", (4, 90)) in liger and ("gn", (2, 8, 3, 3)) in liger
    md = doc.read_text()
    assert md.startswith(ct.BACKWARD_BEGIN) and md.rstrip().endswith(ct.BACKWARD_END)
    assert "normjit n/a: backward=true is not yet supported for rmsnorm" in md
    assert "ln rows bf16, Liger's gradients off float64" in md
    tables = [t for t in ct.check_tables(md) if t[0] == bb.HEADERS]
    col = {h: i for i, h in enumerate(bb.HEADERS)}
    cells = {row[0]: row for t in tables for row in t[1:]}
    assert cells["ln rows"][col["Liger µs"]].endswith("**FAIL**")
    assert cells["rms channel"][col["normjit µs"]].startswith("n/a [")
    assert cells["ln 3 dims"][col["check"]] == "pass"
    assert cells["gn silu"][col["reduced"]] == "G=32, w+b, then SiLU"
    assert cells["gn silu cl"][col["reduced"]] == "G=32, w+b, then SiLU, channels last"
    assert "Liger n/a: LigerGroupNormFunction has no activation" in md
    assert "`F.silu(F.group_norm(x, 32, w, b, eps))`" in md and "`activation=silu`" in md


def test_backward_gradients_that_are_wrong_fail(tmp_path):
    """In f32: gradients exact to float32 pass; a dx 1e-4 off fails; a dweight that lost one
    row's terms fails (the bound for sums is not loose enough to hide it); a NaN fails."""
    pytest.importorskip("torch", reason=NO_TORCH)
    import bench_backward as bb
    import compare_torch as ct
    args = bb.parse_args(["--reps", "1", "--warmup", "0", "--seed", "5"])
    rep = bb.Report(env={}, command="", date_utc="", settings={})
    bench = bb.Bench(args, None, rep, 1 << 16, cuda=False)
    p = bb.Problem("ln", "t", "layernorm", (64, 256), "f32", 1e-5, normalized_dims=1,
                   affine="both")
    x = bench.random(p.shape, "f32", p.dists[0])
    dy = bench.random(p.shape, "f32", bb.DY)
    w = bench.random(p.param_shape, "f32", ct.InputDist(1.0, 0.5))
    rdx, wterm, bterm, _, _ = bb.reference(p, x, dy, w.double())
    exact = (rdx.float(), bb.param_sum(p, wterm).float(), bb.param_sum(p, bterm).float())
    assert bench.check(p, x, dy, w, exact).passed
    c = bench.check(p, x, dy, w, (exact[0] * 1.0001, exact[1], exact[2]))
    assert not c.passed and c.dx_err > 1e-5
    short = bb.param_sum(p, wterm[1:]).float()
    c = bench.check(p, x, dy, w, (exact[0], short, exact[2]))
    assert not c.passed and c.dw_err > c.dw_bound and c.db_err < c.db_bound
    nan = exact[0].clone()
    nan[3, 7] = math.nan
    c = bench.check(p, x, dy, w, (nan, exact[1], exact[2]))
    assert not c.passed and c.nonfinite == 1


def test_backward_reference_takes_the_activation():
    """bench_backward.reference with an activation is float64 autograd of
    act(group_norm(x) * w + b) (F.silu, F.gelu exact; channels first and last, and LayerNorm
    rows); the check fails the norm's gradients without the activation, and with it but
    without the bias."""
    torch = pytest.importorskip("torch", reason=NO_TORCH)
    import dataclasses

    import bench_backward as bb
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(11)

    def normal(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)
    gn = bb.Problem("gn", "sd_silu", "groupnorm", (3, 64, 5, 4), "f32", 1e-5, groups=32,
                    affine="both", activation="silu")
    ln = bb.Problem("ln", "llm", "layernorm", (6, 48), "f32", 1e-5, normalized_dims=1,
                    affine="both", activation="gelu")
    for p, act in ((gn, F.silu), (dataclasses.replace(gn, activation="gelu"), F.gelu),
                   (dataclasses.replace(gn, layout="nhwc"), F.silu), (ln, F.gelu)):
        p.validate()
        c = p.shape[1] if p.op == "groupnorm" else p.shape[-1]
        x, dy = 3 + 1.5 * normal(*p.shape), normal(*p.shape)
        if p.layout == "nhwc":
            x, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, dy))
        w, b = 1 + 0.5 * normal(c), normal(c)
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        if p.op == "groupnorm":
            y = act(F.group_norm(leaves[0], p.groups, leaves[1], leaves[2], p.eps))
        else:
            y = act(F.layer_norm(leaves[0], (c,), leaves[1], leaves[2], p.eps))
        gx, gw, gb = torch.autograd.grad(y, leaves, dy)
        rdx, wterm, bterm, _, _ = bb.reference(p, x, dy, w, b)
        for got, want in ((rdx, gx), (bb.param_sum(p, wterm), gw), (bb.param_sum(p, bterm), gb)):
            assert torch.allclose(got, want, rtol=1e-10, atol=1e-12), (p, (got - want).abs().max())
        # Without the activation the gradients differ (dy does not pass through act').
        plain, _, _, _, _ = bb.reference(dataclasses.replace(p, activation=""), x, dy, w, b)
        assert (plain - gx).norm() > 0.1 * gx.norm()

    args = bb.parse_args(["--reps", "1", "--warmup", "0", "--seed", "5"])
    bench = bb.Bench(args, None, bb.Report(env={}, command="", date_utc="", settings={}),
                     1 << 16, cuda=False)
    p = dataclasses.replace(gn, shape=(4, 64, 6, 6))
    x = bench.random(p.shape, "f32", p.dists[0])
    dy = bench.random(p.shape, "f32", bb.DY)
    w = (1 + 0.5 * normal(64)).float()
    bias = normal(64).float()

    def grads(q, b):
        rdx, wterm, bterm, _, _ = bb.reference(q, x, dy, w.double(), b)
        return rdx.float(), bb.param_sum(q, wterm).float(), bb.param_sum(q, bterm).float()
    assert bench.check(p, x, dy, w, grads(p, bias.double()), bias).passed
    c = bench.check(p, x, dy, w, grads(dataclasses.replace(p, activation=""), None), bias)
    assert not c.passed and c.dx_err > 1e-2 and c.dw_err > c.dw_bound and c.db_err > c.db_bound
    c = bench.check(p, x, dy, w, grads(p, None), bias)  # z without the bias
    assert not c.passed and c.dx_err > 1e-5
    assert not bench.check(p, x, dy, w, grads(p, bias.double())).passed  # the check's own bias


def test_sd_silu_group(capsys):
    """The GroupNorm -> SiLU group (no torch needed): its problems, spec texts (activation=
    in its canonical place, before layout= and backward=true), selection, Liger's n/a."""
    import dataclasses

    import bench_backward as bb
    problems = bb.default_problems()
    silu = bb.select(bb.parse_args(["--only", "sd_silu"]))
    assert silu == [p for p in problems if p.group == "sd_silu"] and len(silu) == 10
    assert {p.shape for p in silu} == {(2, 320, 64, 64), (2, 640, 32, 32), (2, 1280, 16, 16),
                                       (8, 320, 64, 64), (8, 1280, 32, 32), (1, 128, 512, 512),
                                       (1, 256, 256, 256), (1, 512, 128, 128)}
    assert [p.shape for p in silu if p.layout == "nhwc"] == [(8, 320, 64, 64), (1, 128, 512, 512)]
    assert len({p.key for p in problems}) == len(problems)
    for p in silu:
        p.validate()
        assert (p.op, p.dtype, p.groups, p.affine, p.eps, p.activation) == (
            "groupnorm", "bf16", 32, "both", 1e-5, "silu")
        spec = bb.backward_spec(p)
        assert " activation=silu" in spec and spec.endswith(" backward=true")
        assert spec.index(" eps=1e-05") < spec.index(" activation=silu") < spec.index(
            " backward=true")
        if p.layout:
            assert spec.index(" activation=silu") < spec.index(" layout=nhwc"), spec
        assert spec == bb.backward_spec(dataclasses.replace(p, activation="")).replace(
            " eps=1e-05", " eps=1e-05 activation=silu"), spec
        assert "then SiLU" in p.describe()
        assert bb.liger_support(p) == ("LigerGroupNormFunction has no activation: SiLU's "
                                       "backward would be another kernel (PyTorch's, as "
                                       "eager's), not Liger's")
        assert bb.backward_bytes(p) == bb.backward_bytes(dataclasses.replace(p, activation=""))
    assert bb.backward_spec(silu[0]) == ("op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 "
                                         "affine=both eps=1e-05 activation=silu backward=true")
    assert "SiLU" in bb.GROUP_TITLES["sd_silu"]
    # Not in the other groups' selections; --only silu picks the group, --quick none of it.
    assert not set(silu) & set(bb.select(bb.parse_args(["--only", "sd_nhwc"])))
    assert bb.select(bb.parse_args(["--only", "silu"])) == silu
    assert not bb.select(bb.parse_args(["--only", "sd_silu", "--quick"]))
    with pytest.raises(SystemExit):
        bb.parse_args(["--help"])
    assert "sd_silu" in capsys.readouterr().out
    for bad in ("relu", "gelu_tanh"):
        with pytest.raises(AssertionError):
            dataclasses.replace(silu[0], activation=bad).validate()
    dataclasses.replace(silu[0], activation="gelu").validate()


def library_file():
    """A built libnormjit.so: $NORMJIT_LIBRARY, an installed package's (the scripts put this
    checkout's python/ first on sys.path, whose folder has none), or build/'s; else None."""
    import os
    candidates = [os.environ.get("NORMJIT_LIBRARY")]
    candidates += [str(Path(d) / "normjit" / "libnormjit.so") for d in sys.path if d]
    candidates.append(str(REPO / "build" / "libnormjit.so"))
    return next((c for c in candidates if c and Path(c).is_file()), None)


def test_backward_specs_reach_the_library(tmp_path, monkeypatch):
    """The spec texts bench_backward hands to normjit_prepare: the LLM rows compile for sm_90;
    a seed the library has no backward kernel for yet is refused as unsupported, with a reason
    (the n/a of the table), or compiles once it has one."""
    import bench_backward as bb
    from normjit import _capi
    lib = library_file()
    if lib is None:
        pytest.skip("no libnormjit.so built (NORMJIT_LIBRARY, an installed package, build/)")
    api = bb.CApi(Path(lib), str(tmp_path))
    by = {p.key: p for p in bb.default_problems()}

    def precompile(spec):
        compiled = ctypes.c_int()
        api.lib.check(api.lib.normjit_precompile(api.engine, spec.encode(), b"sm_90",
                                                 ctypes.byref(compiled)))
        return compiled.value
    try:
        for key in ("llm rmsnorm h4096 t1024 bf16", "llm layernorm h8192 t1024 bf16"):
            assert precompile(bb.backward_spec(by[key])) == 1
        # GroupNorm -> SiLU's backward (activation=silu), channels first and last.
        for key in ("sd groupnorm silu c320 64x64 b2 bf16",
                    "sd groupnorm silu c128 512x512 b1 channels last bf16"):
            assert precompile(bb.backward_spec(by[key])) == 1, key
        for key in ("seed groupnorm bf16", "seed rmsnorm bf16"):
            try:
                precompile(bb.backward_spec(by[key]))
            except _capi.UnsupportedError as e:
                assert "backward" in e.message, e.message
    finally:
        api.close()


class ChannelsStandIn:
    """normjit's engine and launch for CPU tensors, for the functions bench_vision calls:
    LayerNorm over dim 1 and GroupNorm (with SiLU when the spec says activation=silu)."""

    def __init__(self, torch):
        self.torch, self.specs, self.launches = torch, [], []

    def prepare(self, spec):
        self.specs.append(dict(f.split("=", 1) for f in spec.split()))
        return len(self.specs)

    def launch(self, kernel, x, y, weight, bias, batch, eps, stream, *rest):
        torch = self.torch
        f = self.specs[kernel - 1]
        self.launches.append((f["op"], batch))
        shape = [int(s) for s in f["shape"].split(",")]
        shape[0] = batch
        dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[f["dtype"]]
        nhwc = f.get("layout") == "nhwc"  # memory [N, *spatial, C]
        memory = [shape[0], *shape[2:], shape[1]] if nhwc else shape
        xt = host_tensor(torch, x, memory, dt).double()
        if nhwc:
            xt = xt.movedim(-1, 1)
        if f["op"] == "groupnorm":
            g = xt.reshape(batch, int(f["groups"]), -1)
            g = (g - g.mean(-1, keepdim=True)) / torch.sqrt(
                g.var(-1, unbiased=False, keepdim=True) + eps)
            yt = g.reshape(shape)
        else:
            assert f["op"] == "layernorm" and f["normalized_dims"] == "0"
            yt = (xt - xt.mean(1, keepdim=True)) / torch.sqrt(
                xt.var(1, unbiased=False, keepdim=True) + eps)
        view = (1, -1) + (1,) * (len(shape) - 2)
        if weight:
            yt = yt * host_tensor(torch, weight, (shape[1],), dt).double().view(view)
        if bias:
            yt = yt + host_tensor(torch, bias, (shape[1],), dt).double().view(view)
        if f.get("activation") == "silu":
            yt = torch.nn.functional.silu(yt)
        host_tensor(torch, y, memory, dt).copy_(yt.movedim(1, -1) if nhwc else yt)
        return 0


def test_vision_flow_on_cpu(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch", reason=NO_TORCH)

    import bench_vision as bv
    import compare_torch as ct
    import normjit
    from normjit.torch import _ops
    stand_in = ChannelsStandIn(torch)
    # bench_vision.run() sets NORMJIT_LIBRARY where it is unset: set here, restored after.
    monkeypatch.setenv("NORMJIT_LIBRARY", str(normjit.library_path()))
    monkeypatch.setattr(_ops, "_on_device", lambda x: True)
    monkeypatch.setattr(normjit, "engine", lambda: stand_in)
    monkeypatch.setattr(torch.cuda, "device", NoDeviceGuard)
    monkeypatch.setattr(_ops, "_raw_stream", lambda device: 0)
    for name in ("_launch", "_launch_ex", "_launch_backward"):
        monkeypatch.setattr(_ops, name, stand_in.launch)
    monkeypatch.setattr(_ops, "_kernels", {})
    monkeypatch.setattr(_ops, "_calls", {})
    C = bv.Case
    cases = [C("ln2d small", "ln2d", "ln2d", (4, 24, 6, 5), "f32", 1e-6),
             C("ln2d small", "ln2d", "ln2d", (4, 24, 6, 5), "bf16", 1e-6),
             C("ln2d cl", "nhwc", "ln2d", (4, 24, 6, 5), "bf16", 1e-6, channels_last=True),
             C("gn small", "gn-silu", "gn-silu", (2, 64, 4, 4), "f16", 1e-5, groups=32)]
    doc, out = tmp_path / "performance.md", tmp_path / "v.json"
    args = bv.parse_args(["--reps", "2", "--warmup", "1", "--compile-backend", "aot_eager",
                          "--doc", str(doc), "--json-out", str(out), "--seed", "4"])
    assert bv.run(args, cases, "test", cuda=False) == 0
    rep = bv.report_from_json(json.loads(out.read_text()))
    rows = {r.case.key: r for r in rep.rows}
    for r in rep.rows:
        assert not r.error, r.error
        for impl in ("eager", "compile"):
            assert r.impl(impl).status == "ok" and r.impl(impl).passed, (r.case.key, impl)
        assert r.copy.status == "ok" and r.rotation > 1
    for key in ("ln2d small f32", "ln2d small bf16"):
        r = rows[key]
        assert r.normjit.status == "ok" and r.passed and r.normjit.rel_err < 1e-2
        assert r.nhwc.status == "ok" and r.nhwc.passed and r.best_peer() is not None
    # A channels_last input is read in place (layout=nhwc), not copied.
    cl = rows["ln2d cl bf16 nhwc"]
    assert cl.normjit.status == "ok" and cl.passed, cl.normjit.message
    assert any(f.get("layout") == "nhwc" for f in stand_in.specs), stand_in.specs
    gn = rows["gn small f16"]
    assert gn.nhwc.status == "—"
    if gn.normjit.status == "n/a":  # this normjit.torch.group_norm has no activation keyword
        assert "activation" in gn.normjit.message, gn.normjit.message
    else:
        assert gn.normjit.status == "ok" and gn.passed
    assert ("layernorm", 4) in stand_in.launches
    md = doc.read_text()
    assert md.startswith(ct.VISION_BEGIN) and md.rstrip().endswith(ct.VISION_END)
    assert "it fell back" not in md
    ct.check_tables(md)


def test_vision_checks_fail_a_wrong_output():
    torch = pytest.importorskip("torch", reason=NO_TORCH)
    import bench_vision as bv
    import compare_torch as ct
    args = bv.parse_args(["--seed", "1"])
    rep = bv.Report(env={}, command="", date_utc="", settings={})
    bench = bv.Bench(args, None, rep, 1 << 16, cuda=False)
    case = bv.Case("gn", "gn-silu", "gn-silu", (2, 64, 4, 4), "bf16", 1e-5, groups=32)
    x = bench.random(case.shape, "bf16", bv.X_DIST)
    w, b = torch.randn(64).bfloat16(), torch.randn(64).bfloat16()
    good, bad = ct.Measurement(), ct.Measurement()
    y = torch.nn.functional.silu(torch.nn.functional.group_norm(x.float(), 32, w.float(),
                                                                b.float(), 1e-5))
    bench.check(case, good, "normjit", x, w, b, y.bfloat16())
    assert good.passed and good.rel_err < 1e-2
    wrong = torch.nn.functional.group_norm(x.float(), 32, w.float(), b.float(), 1e-5)  # no SiLU
    bench.check(case, bad, "eager", x, w, b, wrong)
    assert bad.passed is False and bad.rel_err > 1e-2 and rep.warnings


def test_liger_function_signatures():
    """Where Liger-Kernel is importable, its autograd Functions take the arguments
    bench_backward passes to apply."""
    pytest.importorskip("torch", reason=NO_TORCH)
    import inspect

    import bench_backward as bb
    import compare_torch as ct
    fns, version = ct.load_liger(*bb.LIGER_FUNCTIONS.values())
    if not fns:
        pytest.skip(f"Liger-Kernel: {version}")
    params = {k: list(inspect.signature(f.forward).parameters) for k, f in fns.items()}
    assert params == {
        "rms_norm.LigerRMSNormFunction": ["ctx", "X", "W", "eps", "offset", "casting_mode",
                                          "in_place", "row_mode"],
        "layer_norm.LigerLayerNormFunction": ["ctx", "X", "W", "B", "eps"],
        "group_norm.LigerGroupNormFunction": ["ctx", "X", "affine_scaling_weight",
                                              "affine_shifting_bias", "num_channels",
                                              "num_groups", "eps"]}, params


def test_the_backward_rows_copy_is_the_faster_of_its_two():
    """bench_backward.faster_copy: the lower median of the copies timed at a row's start and end,
    both medians in its message; a failed one is passed over; both failed: the last."""
    import compare_torch as ct
    import bench_backward as bb

    def timed(ms):
        return ct.Measurement(status="ok", ms=ms, times_ms=[ms])
    first, last = timed(0.0133), timed(0.0103)
    best = bb.faster_copy(first, last)
    assert best is last and best.message == "start 13.30 µs, end 10.30 µs"
    first, last = timed(0.0101), timed(0.0103)
    assert bb.faster_copy(first, last) is first
    failed = ct.Measurement(status="failed", message="OOM")
    last = timed(0.0103)
    best = bb.faster_copy(failed, last)
    assert best is last and best.message == "end 10.30 µs"
    other = ct.Measurement(status="failed", message="OOM again")
    assert bb.faster_copy(failed, other) is other and other.message == "OOM again"


def test_a_copy_of_the_exact_bytes_not_whole_4_kib_is_marked():
    """A row's copy from a run before the 4 KiB rounding (no message) whose half of the bytes
    is not whole 4 KiB gets a footnote saying it reads slow; a copy of the current method (its
    two timings in the message), or of bytes whose half is whole 4 KiB, is a plain time."""
    import compare_torch as ct
    import bench_backward as bb
    p = bb.default_problems()[0]

    def cell(nbytes, message):
        row = bb.Row(p, nbytes, spec="", rotation=1)
        row.copy = ct.Measurement(status="ok", ms=0.0133, times_ms=[0.0133], message=message)
        notes: list = []
        return bb.time_cell(row, "copy", notes), notes
    text, notes = cell(2 * (4096 * 3074 + 2048), "")
    assert text == "13.3 [1]" and len(notes) == 1 and "not whole 4 KiB" in notes[0]
    assert cell(2 * 4096 * 3077, "") == ("13.3", [])
    assert cell(2 * (4096 * 3074 + 2048), "start 13.30 µs, end 13.40 µs") == ("13.3", [])
