#!/usr/bin/env python3
"""Vision and diffusion normalization (issue 19), on the GPU machine: normjit against the same
PyTorch module chain run eagerly and under torch.compile, and a device-to-device copy of the
bytes the chain must move.

Rows:
  gn-silu  GroupNorm (32 groups) then SiLU, the pair of every diffusers ResNet block: SD 1.5 and
           SDXL UNet shapes (batch 2: classifier-free guidance) and the SD VAE decoder's
           (batch 1), f16 and bf16. Eager: nn.GroupNorm's function then F.silu; compile: the
           same chain under torch.compile; normjit: normjit.torch.group_norm(...,
           activation="silu") (one kernel), n/a with the reason where this normjit.torch has
           no such keyword.
  ln2d     LayerNorm2d (LayerNorm over the channels of NCHW): ConvNeXt-T and -B stage shapes
           (batch 32), f32 and bf16. Eager: timm's permute + F.layer_norm + permute (F.layer_norm
           copies the permuted input to contiguous); compile: the same under torch.compile;
           NHWC: F.layer_norm of a channels_last tensor's permuted view (no copy: the model
           kept channels_last); normjit: normjit.torch.layer_norm_channels.
  nhwc     both of the above on channels_last inputs, passed as they are: normjit is n/a with
           its reason where it falls back (its NormjitFallbackWarning: it would copy or run
           PyTorch) instead of reading the channels-last layout.
Every output is checked against float64 (the chain's function, two-pass statistics).

normjit is called through this checkout's Python package (python/normjit, its library
--lib / $NORMJIT_LIBRARY / BUILD/libnormjit.so); the timing method is tools/compare_torch.py's
(CUDA events, median, rotating inputs, a sleep kernel queued first). The section goes into
docs/performance.md between compare_torch.VISION_BEGIN/END (compare_torch.py keeps it) and the
raw results into a JSON file.

    python3 tools/bench_vision.py                     # every row (several minutes)
    python3 tools/bench_vision.py --only ln2d --quick
    python3 tools/bench_vision.py --list              # the rows, no GPU needed
    python3 tools/bench_vision.py --selftest          # the non-GPU parts, no torch needed
    python3 tools/bench_vision.py --from-json A.json,B.json   # re-render (runs merged)

Exit status: 0 when every normjit result that ran passed its check, 1 when a check failed or a
normjit call errored, 2 when it could not start. Only the standard library is imported at
module level.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import shlex
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tools"))
import compare_torch as ct  # noqa: E402

IMPLS = ("normjit", "eager", "compile", "nhwc", "copy")
PEERS = ("eager", "compile", "nhwc")
TITLES = {"normjit": "normjit", "eager": "eager", "compile": "compile",
          "nhwc": "F.layer_norm NHWC", "copy": "copy"}
TOLERANCE = {"f32": 1e-5, "f16": 1e-2, "bf16": 1e-2}
X_DIST = ct.InputDist(1.0, 2.0)
GROUP_TITLES = {
    "gn-silu": "GroupNorm -> SiLU (diffusion: SD 1.5 / SDXL UNet, SD VAE decoder; 32 groups)",
    "ln2d": "LayerNorm2d (ConvNeXt-T / -B stages, batch 32)",
    "nhwc": "channels_last inputs (memory format NHWC, passed as they are)",
}


@dataclass(frozen=True)
class Case:
    """One row. kind: gn-silu | ln2d; group: the table (gn-silu, ln2d, nhwc)."""
    name: str
    group: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    eps: float
    groups: int = 0
    channels_last: bool = False
    quick: bool = False

    @property
    def key(self) -> str:
        return f"{self.name} {self.dtype}" + (" nhwc" if self.channels_last else "")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes_moved(self) -> int:
        """x read and y written once, weight and bias [C] read once."""
        return (2 * self.numel + 2 * self.shape[1]) * ct.ELEMENT_BYTES[self.dtype]

    def describe(self) -> str:
        return (f"GroupNorm G={self.groups} + SiLU" if self.kind == "gn-silu"
                else "LayerNorm over C")


def default_cases() -> list[Case]:
    cases: list[Case] = []
    unet = [("sd15 unet", 2, 320, 64), ("sd15 unet", 2, 640, 32), ("sd15 unet", 2, 1280, 16),
            ("sd15 unet", 2, 1280, 8), ("sdxl unet", 2, 320, 128), ("sdxl unet", 2, 640, 64),
            ("sdxl unet", 2, 1280, 32)]
    vae = [("sd vae", 1, 512, 64), ("sd vae", 1, 512, 128), ("sd vae", 1, 512, 256),
           ("sd vae", 1, 256, 512), ("sd vae", 1, 128, 512)]
    for dtype in ("f16", "bf16"):
        for model, n, c, hw in unet + vae:
            eps = 1e-6 if "vae" in model else 1e-5  # diffusers: the VAE's GroupNorm eps 1e-6
            cases.append(Case(f"{model} c{c} {hw}x{hw} b{n}", "gn-silu", "gn-silu",
                              (n, c, hw, hw), dtype, eps, groups=32,
                              quick=(c, hw, dtype) == (320, 64, "f16")))
    convnext = [("convnext-t", 96, 56), ("convnext-t", 192, 28), ("convnext-t", 384, 14),
                ("convnext-t", 768, 7), ("convnext-b", 128, 56), ("convnext-b", 256, 28),
                ("convnext-b", 512, 14), ("convnext-b", 1024, 7)]
    for dtype in ("f32", "bf16"):
        for model, c, hw in convnext:
            cases.append(Case(f"{model} c{c} {hw}x{hw} b32", "ln2d", "ln2d", (32, c, hw, hw),
                              dtype, 1e-6, quick=(c, dtype) == (96, "bf16")))
    for model, n, c, hw in unet[:4] + [vae[1], vae[3]]:
        eps = 1e-6 if "vae" in model else 1e-5
        cases.append(Case(f"{model} c{c} {hw}x{hw} b{n}", "nhwc", "gn-silu", (n, c, hw, hw),
                          "f16", eps, groups=32, channels_last=True, quick=c == 320))
    for model, c, hw in convnext[:4]:
        cases.append(Case(f"{model} c{c} {hw}x{hw} b32", "nhwc", "ln2d", (32, c, hw, hw),
                          "bf16", 1e-6, channels_last=True, quick=c == 96))
    return cases


def select_cases(cases: list[Case], only: Optional[str], dtypes: list[str],
                 quick: bool) -> list[Case]:
    """--only: comma-separated tokens, each a group (gn-silu, ln2d, nhwc) or a substring of the
    row's name; a row is kept when any token matches."""
    tokens = [t.strip() for t in only.split(",") if t.strip()] if only else []
    return [c for c in cases if c.dtype in dtypes and (c.quick or not quick)
            and (not tokens or any(t == c.group or t in c.name for t in tokens))]


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------

@dataclass
class Row(ct.PeerRow):
    case: Case
    rotation: int = 1
    normjit: ct.Measurement = field(default_factory=ct.Measurement)
    eager: ct.Measurement = field(default_factory=ct.Measurement)
    compile: ct.Measurement = field(default_factory=ct.Measurement)
    nhwc: ct.Measurement = field(default_factory=ct.Measurement)
    copy: ct.Measurement = field(default_factory=ct.Measurement)
    error: str = ""
    skipped: str = ""
    PEERS = PEERS

    @property
    def passed(self) -> Optional[bool]:
        return self.normjit.passed if self.normjit.status == "ok" else None


Report = ct.BenchReport


def row_from_dict(d: dict) -> Row:
    names = {f.name for f in dataclasses.fields(Row)}
    kw = {k: v for k, v in d.items() if k in names}
    cd = dict(kw["case"])
    cd["shape"] = tuple(cd["shape"])
    kw["case"] = Case(**cd)
    for impl in IMPLS:
        m = dict(kw.get(impl, {}))
        if m.get("status") == "ok" and m.get("passed") is not None and m.get("rel_err") is None:
            m["rel_err"] = math.nan  # JSON wrote NaN as null
        kw[impl] = ct.Measurement(**m)
    return Row(**kw)


def report_from_json(data: dict) -> Report:
    return ct.bench_report_from_json(data, row_from_dict)


def merge_reports(reports: list[Report]) -> Report:
    """Several runs as one (ct.merge_runs): a row measured in a later run replaces an earlier
    one's; a skipped row does not replace a measured one."""
    order = {c.key: i for i, c in enumerate(default_cases())}
    return ct.merge_runs(reports, lambda row: row.case.key, order)


def write_json(rep: Report, path: Path) -> None:
    data = dataclasses.asdict(rep)
    for row, d in zip(rep.rows, data["rows"]):
        best = row.best_peer()
        d["derived"] = {"key": row.case.key, "bytes_moved": row.case.bytes_moved,
                        "pct_copy": row.pct_copy, "best_peer": best,
                        "speedup_vs_best": row.speedup(best), "passed": row.passed,
                        **{f"speedup_vs_{k}": row.speedup(k) for k in PEERS}}
    ct.write_json_file(data, path)


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------

fmt_us = ct.fmt_us


def time_cell(m: ct.Measurement, who: str, footnotes: list[str]) -> str:
    if m.status == "ok":
        return fmt_us(m.ms) + (" **FAIL**" if m.passed is False else "")
    if m.status == "n/a":
        note = f"{who} n/a: {m.message}"
        if note not in footnotes:
            footnotes.append(note)
        return f"n/a [{footnotes.index(note) + 1}]"
    return m.status


def headers(with_nhwc: bool) -> list[str]:
    return (["problem", "shape", "chain", "dtype", "layout", "MB moved", "normjit µs",
             "eager µs", "compile µs"] + (["F.layer_norm NHWC µs"] if with_nhwc else [])
            + ["copy µs", "% of copy", "vs compile", "best peer", "vs best", "rel. err",
               "check"])


def table_row(row: Row, with_nhwc: bool, footnotes: list[str]) -> list[str]:
    c = row.case
    best = row.best_peer()
    impls = ("normjit", "eager", "compile") + (("nhwc",) if with_nhwc else ()) + ("copy",)
    return ([c.name, ct.shape_text(c.shape), c.describe(), c.dtype,
             "channels_last" if c.channels_last else "contiguous", f"{c.bytes_moved / 1e6:.1f}"]
            + [time_cell(row.impl(k), TITLES[k], footnotes) for k in impls]
            + [ct.fmt_num(row.pct_copy, ".1f", "%"), ct.fmt_num(row.speedup("compile"), ".2f", "x"),
               TITLES[best] if best else "—", ct.fmt_num(row.speedup(best), ".2f", "x"),
               ct.fmt_err(row.normjit.rel_err) if row.normjit.status == "ok" else "—",
               row.check_text()])


def summary(rows: list[Row]) -> tuple[str, str, str, str]:
    """(ahead of compile, ahead of every peer, % of copy range, checks)."""
    vs_c = [r for r in rows if r.normjit.ms and r.compile.ms]
    ahead_c = sum(1 for r in vs_c if r.normjit.ms <= r.compile.ms)
    vs_b = [r for r in rows if r.normjit.ms and r.best_peer()]
    ahead_b = sum(1 for r in vs_b if r.normjit.ms <= r.impl(r.best_peer()).ms)
    pct = [r.pct_copy for r in rows if r.pct_copy is not None]
    checked = [r for r in rows if r.passed is not None]
    failed = sum(1 for r in checked if not r.passed)
    na = sum(1 for r in rows if r.normjit.status == "n/a")
    checks = f"{len(checked) - failed} of {len(checked)} pass" if checked else "—"
    if failed:
        checks = f"**{failed} FAIL**, " + checks
    if na:
        checks += f", {na} n/a"
    return (f"{ahead_c} of {len(vs_c)}" if vs_c else "—",
            f"{ahead_b} of {len(vs_b)}" if vs_b else "—",
            f"{min(pct):.0f}–{max(pct):.0f}%" if pct else "—", checks)


def render_section(rep: Report) -> str:
    out = ct.section_intro(ct.VISION_BEGIN, "Vision and diffusion (issue 19): normjit against "
                           "the same module chain", "tools/bench_vision.py",
                           "scripts/perf_vision.sh", rep, "rows")
    add = out.append
    s = rep.settings
    add("- GroupNorm -> SiLU: eager is `F.silu(F.group_norm(x, 32, w, b, eps))` (nn.GroupNorm's "
        "function, then SiLU: two kernels and y written twice), compile is that chain under "
        "`torch.compile(dynamic=False)` (Inductor fuses it), normjit is "
        "`normjit.torch.group_norm(x, 32, w, b, eps, activation=\"silu\")` (n/a where this "
        "normjit.torch has no `activation` keyword: the reason is under the table). eps 1e-5 "
        "(UNet) and 1e-6 (VAE), as diffusers.")
    add("- LayerNorm2d: eager is timm's `F.layer_norm(x.permute(0, 2, 3, 1), (C,), w, b, eps)"
        ".permute(0, 3, 1, 2)` (F.layer_norm makes the permuted input contiguous first), compile "
        "is that under `torch.compile(dynamic=False)`, `F.layer_norm NHWC` is the same expression "
        "on a channels_last copy of x (its permuted view is contiguous: no copy; the model kept "
        "channels_last), normjit is `normjit.torch.layer_norm_channels(x, w, b, eps)` "
        "(eps 1e-6, ConvNeXt's).")
    add("- channels_last rows: x in `torch.channels_last` memory format, given as it is to every "
        "implementation. normjit is n/a where it falls back (its NormjitFallbackWarning, whose "
        "text is the note) instead of reading the channels-last layout.")
    add(f"- GPU times: CUDA events around each call, median of {s.get('reps')} calls after "
        f"{s.get('warmup')} warm-up calls, a sleep kernel queued first (the events bracket GPU "
        "work, not Python or dispatch); inputs rotate through enough sets that the bytes touched "
        "between two uses of one set exceed 4x L2. normjit's time is its kernel's (the "
        "package's call allocates y with PyTorch's caching allocator, no GPU work).")
    add("- `MB moved` = x read, y written, weight and bias read, once each; `copy µs`: a "
        "device-to-device `copy_` of those bytes (half read, half written; "
        + ct.copy_rule_text(s) + "), its source rotated, "
        "its destination one buffer (every implementation's y is one block of the caching "
        "allocator), timed the same way; `% of copy` = copy µs / normjit µs (the issue's goal: "
        "within 10% of it, "
        "90% or more, on the large rows). `vs compile`, `vs best` = their time / normjit's "
        "(above 1: normjit faster; the issue's goal: ahead of compile on every row); `best "
        "peer`: the fastest of eager, compile (and F.layer_norm NHWC) whose output passed.")
    add("- `rel. err` = ||y - ref|| / ||ref|| against float64 (the chain with two-pass "
        "statistics, from the same x, weight and bias); pass: every element finite and under "
        "1e-5 (f32) or 1e-2 (f16/bf16). Every peer is checked the same way; a time whose output "
        "failed is marked **FAIL**.")
    add(f"- x N(1, 2), weight N(1, 0.5), bias N(0, 1); random seed {s.get('seed')}.")
    if rep.copy_gbps:
        add(f"- For scale: a device-to-device copy of 2 GiB runs at {rep.copy_gbps:.0f} GB/s "
            "(read + written).")
    add("")
    groups = [g for g in GROUP_TITLES if any(r.case.group == g for r in rep.rows)]
    if groups:
        add("| rows | count | normjit at or ahead of compile | ahead of every peer | % of copy "
            "| normjit checks |")
        add("|---|---:|---:|---:|---:|---|")
        for g in groups:
            rows = [r for r in rep.rows if r.case.group == g]
            a, b, pct, checks = summary(rows)
            add(f"| {GROUP_TITLES[g]} | {len([r for r in rows if not r.skipped])} | {a} | {b} | "
                f"{pct} | {checks} |")
        add("")
    for g in groups:
        rows = [r for r in rep.rows if r.case.group == g]
        with_nhwc = any(r.case.kind == "ln2d" for r in rows)
        add(f"### {GROUP_TITLES[g]}")
        add("")
        footnotes: list[str] = []
        hs = headers(with_nhwc)
        right = set(range(5, len(hs) - 2)) - {hs.index("best peer")}
        out += ct.md_table(hs, [table_row(r, with_nhwc, footnotes) for r in rows], right)
        add("")
        for k, note in enumerate(footnotes, 1):
            add(f"- [{k}] {note}")
        if footnotes:
            add("")
    problems = []
    for r in rep.rows:
        if r.error:
            problems.append(f"{r.case.key}: {r.error}")
        for impl in IMPLS:
            m = r.impl(impl)
            if m.status in ("error", "failed"):
                problems.append(f"{r.case.key}, {TITLES[impl]} {m.status}: {m.message}")
            elif m.status == "ok" and m.passed is False:
                problems.append(f"{r.case.key}, {TITLES[impl]} off float64: rel. err "
                                f"{ct.fmt_err(m.rel_err)}, {m.nonfinite} non-finite elements")
    out += ct.failures_block(problems, rep, "rows")
    out.append(ct.VISION_END)
    return "\n".join(out)


def write_section(rep: Report, doc: Path, section_out: Optional[Path] = None) -> None:
    ct.write_section_into(doc, ct.VISION_BEGIN, ct.VISION_END, render_section(rep), section_out)


def render_summary(rep: Report) -> str:
    hs = ["row", "normjit", "eager", "compile", "nhwc", "copy", "%copy", "best", "vs best",
          "check"]
    lines_rows = []
    for r in rep.rows:
        notes: list[str] = []
        best = r.best_peer()
        lines_rows.append([r.case.key, *(time_cell(r.impl(k), k, notes) for k in IMPLS),
                           ct.fmt_num(r.pct_copy, ".0f", "%"), best or "—",
                           ct.fmt_num(r.speedup(best), ".2f", "x"),
                           r.check_text().replace("*", "")])
    return ct.text_table(hs, lines_rows)


# ---------------------------------------------------------------------------------------
# The measurements (torch imported here)
# ---------------------------------------------------------------------------------------

def reference(case: Case, x, weight, bias):
    """The chain in float64 (two-pass statistics)."""
    import torch
    xd = x.double()
    view = (1, -1) + (1,) * (xd.dim() - 2)
    if case.kind == "gn-silu":
        g = xd.reshape(xd.shape[0], case.groups, -1)
        gc_ = g - g.mean(-1, keepdim=True)
        y = (gc_ / torch.sqrt(gc_.pow(2).mean(-1, keepdim=True) + case.eps)).reshape(xd.shape)
    else:
        xc = xd - xd.mean(1, keepdim=True)
        y = xc / torch.sqrt(xc.pow(2).mean(1, keepdim=True) + case.eps)
    y = y * weight.double().view(view) + bias.double().view(view)
    return torch.nn.functional.silu(y) if case.kind == "gn-silu" else y


def peer_functions(case: Case, w, b) -> dict[str, Callable]:
    """The PyTorch chains, x -> y."""
    import torch.nn.functional as F
    if case.kind == "gn-silu":
        return {"eager": lambda x: F.silu(F.group_norm(x, case.groups, w, b, case.eps))}
    c = case.shape[1]
    timm = lambda x: F.layer_norm(x.permute(0, 2, 3, 1), (c,), w, b,  # noqa: E731
                                  case.eps).permute(0, 3, 1, 2)
    return {"eager": timm, "nhwc": timm}


def normjit_function(njt: Any, case: Case, w, b) -> tuple[Optional[Callable], str]:
    """(x -> y by normjit.torch, "") or (None, why this normjit has no such call)."""
    if case.kind == "gn-silu":
        fn = njt.group_norm
        return (lambda x: fn(x, case.groups, w, b, case.eps, activation="silu")), ""
    fn = getattr(njt, "layer_norm_channels", None)
    if fn is None:
        return None, "this normjit.torch has no layer_norm_channels (LayerNorm2d)"
    return (lambda x: fn(x, w, b, case.eps)), ""


class Bench(ct.BenchRunner):
    def __init__(self, args: argparse.Namespace, njt: Any, rep: Report, l2_bytes: int,
                 cuda: bool):
        super().__init__(args, rep, l2_bytes, cuda)
        self.njt = njt

    def check(self, case: Case, m: ct.Measurement, name: str, x, w, b, y) -> None:
        torch = self.torch
        ref = reference(case, x, w, b)
        yd = y.double()
        m.nonfinite = int((~torch.isfinite(yd)).sum().item())
        r2 = ref.pow(2).sum().item()
        e2 = (yd - ref).pow(2).sum().item()
        m.rel_err = math.sqrt(e2 / r2) if r2 > 0 else (0.0 if e2 == 0 else math.inf)
        m.passed = m.nonfinite == 0 and m.rel_err < TOLERANCE[case.dtype]
        self.log(f"  {name:8s} rel. err {ct.fmt_err(m.rel_err)}"
                 + ("" if m.passed else "  ** FAIL **"))
        if not m.passed and name in ("eager", "compile", "nhwc"):
            self.rep.warnings.append(f"{case.key}: PyTorch {TITLES[name]} is off the float64 "
                                     f"reference by {ct.fmt_err(m.rel_err)}")

    def normjit_first_call(self, m: ct.Measurement, fn: Callable, x):
        """normjit's y, or None with m n/a (it fell back: the warning's text; or it has no
        such call) or error."""
        from normjit.torch import _ops
        _ops._warned.clear()  # each reason warns once per process: make this call's show
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", _ops.NormjitFallbackWarning)
            try:
                y = fn(x)
                if self.cuda:
                    self.torch.cuda.synchronize()
            except TypeError as e:  # a keyword this normjit.torch does not take
                m.status = "n/a"
                m.message = f"this normjit.torch refuses the call ({ct.short_error(e)})"
                self.log(f"  normjit  n/a: {m.message}")
                return None
            except Exception as e:  # noqa: BLE001
                m.status, m.message = "error", ct.short_error(e)
                self.log(f"  normjit  error: {m.message}")
                return None
        fell_back = [str(w.message) for w in caught
                     if issubclass(w.category, _ops.NormjitFallbackWarning)]
        if fell_back:
            m.status, m.message = "n/a", "it fell back: " + fell_back[0]
            self.log(f"  normjit  n/a: {m.message}")
            return None
        m.status = "ok"
        return y

    def run(self, case: Case) -> Row:
        per_set = 2 * case.numel * ct.ELEMENT_BYTES[case.dtype]
        row = Row(case, rotation=max(1, min(256, math.ceil(4 * self.l2 / per_set))))

        def body() -> None:
            with self.torch.no_grad():
                self._run(case, row)
        return self.run_row(row, body)

    def _run(self, case: Case, row: Row) -> None:
        torch = self.torch
        n = row.rotation
        fmt = torch.channels_last if case.channels_last else torch.contiguous_format
        xs = [self.random(case.shape, case.dtype, X_DIST).contiguous(memory_format=fmt)
              for _ in range(n)]
        c = case.shape[1]
        w = self.random((c,), case.dtype, ct.InputDist(1.0, 0.5))
        b = self.random((c,), case.dtype, ct.InputDist(0.0, 1.0))
        fns = peer_functions(case, w, b)
        # normjit
        nj, why = normjit_function(self.njt, case, w, b)
        if nj is None:
            row.normjit.status, row.normjit.message = "n/a", why
        else:
            y = self.normjit_first_call(row.normjit, nj, xs[0])
            if y is not None:
                self.check(case, row.normjit, "normjit", xs[0], w, b, y)
                del y
                self.timed(row.normjit, "normjit", lambda i: nj(xs[i % n]))
        # eager, compile
        eager = fns["eager"]
        y = self.first_call(row.eager, "eager", lambda: eager(xs[0]))
        if y is not None:
            self.check(case, row.eager, "eager", xs[0], w, b, y)
            del y
            self.timed(row.eager, "eager", lambda i: eager(xs[i % n]))
        if self.args.skip_compile:
            row.compile.status = "skipped"
        else:
            import torch._dynamo
            torch._dynamo.reset()
            compiled = torch.compile(eager, dynamic=False, backend=self.args.compile_backend)
            y = self.first_call(row.compile, "compile", lambda: compiled(xs[0]))
            if y is not None:
                self.check(case, row.compile, "compile", xs[0], w, b, y)
                del y
                self.timed(row.compile, "compile", lambda i: compiled(xs[i % n]))
        # F.layer_norm of a channels_last tensor (LayerNorm2d rows)
        if "nhwc" in fns:
            nhwc = fns["nhwc"]
            cl = xs if case.channels_last else [x.contiguous(memory_format=torch.channels_last)
                                                for x in xs]
            y = self.first_call(row.nhwc, "nhwc", lambda: nhwc(cl[0]))
            if y is not None:
                self.check(case, row.nhwc, "nhwc", xs[0], w, b, y)
                del y
                self.timed(row.nhwc, "nhwc", lambda i: nhwc(cl[i % n]))
            del cl
        else:
            row.nhwc.status = "—"
        xs = fns = nj = None
        self.free()
        try:
            copy = ct.own_copy(case.bytes_moved, n, self.dev)
            self.timed(row.copy, "copy", copy)
            row.copy.status = "ok" if row.copy.ms is not None else row.copy.status
            del copy
        except Exception as e:  # noqa: BLE001
            row.copy.status, row.copy.message = "failed", ct.short_error(e)


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Time normjit's GroupNorm -> SiLU and LayerNorm2d (and channels_last "
                    "inputs) against the PyTorch chains eager and compiled and a copy of their "
                    "bytes; write docs/performance.md's vision section and a JSON file.")
    ap.add_argument("--build", default="build", help="build directory (libnormjit.so)")
    ap.add_argument("--lib", default=None,
                    help="libnormjit.so (default: $NORMJIT_LIBRARY, else BUILD/libnormjit.so)")
    ap.add_argument("--only", default=None,
                    help="comma-separated groups (gn-silu, ln2d, nhwc) or substrings of names")
    ap.add_argument("--dtypes", default="f32,f16,bf16", help="comma-separated dtypes")
    ap.add_argument("--quick", action="store_true", help="one row of each group; 10 timed calls")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (20; --quick 10)")
    ct.add_run_args(ap, "rows", 540.0)
    ap.add_argument("--compile-backend", default="inductor", help=argparse.SUPPRESS)
    ct.add_output_args(ap, "vision", "rows")
    return ct.finish_bench_args(ap, ap.parse_args(argv), "vision")


def write_outputs(rep: Report, args: argparse.Namespace) -> None:
    write_section(rep, Path(args.doc), Path(args.section_out) if args.section_out else None)
    write_json(rep, Path(args.json_out))


def run(args: argparse.Namespace, cases: list[Case], command: str, cuda: bool = True) -> int:
    """Measures cases through normjit.torch; cuda=False runs the flow on CPU tensors (the
    caller stands in for the library)."""
    try:
        import torch
    except ImportError as e:
        print(f"bench_vision: PyTorch is needed for the measurements ({e}); --list, --selftest "
              "and --from-json work without it", file=sys.stderr)
        return 2
    if cuda and not torch.cuda.is_available():
        print("bench_vision: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    os.environ.setdefault("NORMJIT_LIBRARY", args.lib)
    try:
        import normjit.torch as njt
    except (ImportError, OSError) as e:
        print(f"bench_vision: cannot import normjit.torch ({e})", file=sys.stderr)
        return 2
    if cuda:
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        env, l2 = ct.collect_environment(Path(os.environ["NORMJIT_LIBRARY"]))
    else:
        env, l2 = {"device": "CPU (wall-clock times)", "PyTorch": torch.__version__}, 1 << 16
    env["normjit.torch"] = str(Path(njt.__file__).parent)
    rep = Report(env=env, command=command,
                 date_utc=datetime.datetime.now(datetime.timezone.utc).strftime(
                     "%Y-%m-%d %H:%M UTC"),
                 settings={"copy_grain": ct.COPY_GRAIN, "reps": args.reps,
                           "warmup": args.warmup, "seed": args.seed,
                           "quick": args.quick, "only": args.only, "dtypes": args.dtype_list,
                           "budget_s": args.budget_s, "skip_compile": args.skip_compile},
                 planned=len(cases))
    bench = Bench(args, njt, rep, l2, cuda)
    for k, v in rep.env.items():
        print(f"{k}: {v}")
    if cuda:
        rep.copy_gbps, _ = ct.measure_copy(args.reps, args.warmup)
        print(f"copy bandwidth (2 GiB): {rep.copy_gbps:.0f} GB/s", flush=True)
    bench.started = time.perf_counter()
    for i, case in enumerate(cases, 1):
        print(f"[{i}/{len(cases)}] {case.key} {ct.shape_text(case.shape)} {case.describe()}, "
              f"{case.bytes_moved / 1e6:.1f} MB moved", flush=True)
        rep.rows.append(bench.run(case))
        write_outputs(rep, args)
    write_outputs(rep, args)
    print()
    print(render_summary(rep))
    print(f"\nwrote {args.doc}, {args.json_out}"
          + (f", {args.section_out}" if args.section_out else ""))
    bad = [r for r in rep.rows
           if r.error or r.passed is False or r.normjit.status not in ("ok", "n/a", "not run")]
    return 1 if bad else 0


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.selftest:
        return selftest()
    if args.from_json:
        return ct.render_from_json(args, "vision", report_from_json, merge_reports,
                                   write_section, write_json)
    cases = select_cases(default_cases(), args.only, args.dtype_list, args.quick)
    if args.list:
        for c in cases:
            print(f"{c.key:40s} {ct.shape_text(c.shape):22s} {c.describe():24s} "
                  f"{c.bytes_moved / 1e6:8.1f} MB")
        return 0
    if not cases:
        print("bench_vision: no row selected", file=sys.stderr)
        return 2
    argv_text = sys.argv if argv is None else ["tools/bench_vision.py", *argv]
    return run(args, cases, shlex.join(["python3", *argv_text]))


# ---------------------------------------------------------------------------------------
# Self-test (no GPU, no torch)
# ---------------------------------------------------------------------------------------

def fake_report() -> Report:
    ok = lambda ms, err=3e-3, passed=True: ct.Measurement(  # noqa: E731
        status="ok", ms=ms, times_ms=[ms] * 3, rel_err=err, nonfinite=0, passed=passed)
    cs = {c.key: c for c in default_cases()}
    rows = [
        Row(cs["sd15 unet c320 64x64 b2 f16"], normjit=ct.Measurement(
            status="n/a", message="this normjit.torch refuses the call (TypeError: group_norm() "
                                  "got an unexpected keyword argument 'activation')"),
            eager=ok(0.030), compile=ok(0.012), nhwc=ct.Measurement(status="—"), copy=ok(0.008)),
        Row(cs["sd vae c128 512x512 b1 bf16"], normjit=ok(0.050), eager=ok(0.150),
            compile=ok(0.060), nhwc=ct.Measurement(status="—"), copy=ok(0.046)),
        Row(cs["convnext-t c96 56x56 b32 f32"], normjit=ok(0.040, 2e-7), eager=ok(0.110, 2e-7),
            compile=ok(0.045, 2e-7), nhwc=ok(0.038, 2e-7), copy=ok(0.037)),
        Row(cs["convnext-t c768 7x7 b32 bf16"], normjit=ok(0.010, math.nan, False),
            eager=ok(0.020), compile=ok(0.012, 0.5, False), nhwc=ok(0.011), copy=ok(0.008)),
        Row(cs["convnext-t c96 56x56 b32 bf16 nhwc"], normjit=ct.Measurement(
            status="n/a", message="it fell back: normjit.torch.layer_norm_channels: "
                                  "non-contiguous input (shape [32, 96, 56, 56], ...)"),
            eager=ok(0.030), compile=ok(0.025), nhwc=ok(0.030), copy=ok(0.020)),
        Row(cs["sd15 unet c640 32x32 b2 f16 nhwc"], error="OutOfMemoryError: x"),
        Row(cs["convnext-b c1024 7x7 b32 bf16"],
            skipped="the time budget (--budget-s 540) ran out"),
    ]
    return Report(env={"device": "FakeGPU", "PyTorch": "2.11.0"},
                  command="python3 tools/bench_vision.py --selftest",
                  date_utc="2026-01-01 00:00 UTC", settings={"reps": 20, "warmup": 3, "seed": 9},
                  copy_gbps=3000.0, rows=rows, planned=8, warnings=["a warning"])


def selftest() -> int:
    cases = default_cases()
    keys = [c.key for c in cases]
    assert len(keys) == len(set(keys)) == 24 + 16 + 10, len(keys)
    by = {c.key: c for c in cases}
    c = by["sd15 unet c320 64x64 b2 f16"]
    assert c.bytes_moved == (2 * 2 * 320 * 64 * 64 + 2 * 320) * 2 and c.groups == 32
    assert c.eps == 1e-5 and by["sd vae c512 64x64 b1 bf16"].eps == 1e-6
    assert by["convnext-b c1024 7x7 b32 f32"].bytes_moved == (2 * 32 * 1024 * 49 + 2048) * 4
    assert by["convnext-t c96 56x56 b32 bf16 nhwc"].channels_last
    assert {c.group for c in cases} == {"gn-silu", "ln2d", "nhwc"}
    sel = select_cases(cases, "ln2d", ["f32", "f16", "bf16"], True)
    assert [c.key for c in sel] == ["convnext-t c96 56x56 b32 bf16"], sel
    assert len(select_cases(cases, None, ["f32", "f16", "bf16"], True)) == 4
    assert all(c.dtype == "f16" for c in select_cases(cases, "nhwc,vae", ["f16"], False))
    assert len(select_cases(cases, "sdxl", ["bf16"], False)) == 3
    a = parse_args(["--quick"])
    assert a.reps == 10 and a.dtype_list == ["f32", "f16", "bf16"]

    rep = fake_report()
    md = render_section(rep)
    assert md.startswith(ct.VISION_BEGIN) and md.endswith(ct.VISION_END)
    tables = ct.check_tables(md)
    summ = [t for t in tables if t[0][0] == "rows"][0]
    assert summ[1][2:] == ["1 of 1", "1 of 1", "92–92%", "1 of 1 pass, 1 n/a"], summ[1]
    assert summ[2][2:] == ["2 of 2", "1 of 2", "80–92%", "**1 FAIL**, 1 of 2 pass"], summ[2]
    gn = [t for t in tables if t[0] == headers(False)]
    ln = [t for t in tables if t[0] == headers(True)]
    assert len(gn) == 1 and len(ln) == 2, (len(gn), len(ln))
    col = {h: i for i, h in enumerate(headers(False))}
    assert gn[0][1][col["normjit µs"]] == "n/a [1]" and gn[0][1][col["best peer"]] == "compile"
    assert gn[0][2][col["% of copy"]] == "92.0%" and gn[0][2][col["vs compile"]] == "1.20x"
    col = {h: i for i, h in enumerate(headers(True))}
    r = ln[0][1]
    assert r[col["F.layer_norm NHWC µs"]] == "38.0" and r[col["best peer"]] == "F.layer_norm NHWC"
    assert (r[col["vs best"]] == "0.95x" and r[col["rel. err"]] == "2.0e-07"
            and r[col["check"]] == "pass")
    r = ln[0][2]
    assert r[col["check"]] == "**FAIL**" and r[col["compile µs"]] == "12.0 **FAIL**", r
    assert r[col["best peer"]] == "F.layer_norm NHWC" and r[col["rel. err"]] == "NaN", r
    nh = ln[1]
    assert nh[1][col["layout"]] == "channels_last" and nh[1][col["normjit µs"]] == "n/a [1]"
    assert nh[2][col["check"]] == "error" and len(nh) == 3
    for needle in ("- [1] normjit n/a: this normjit.torch refuses the call (TypeError",
                   "- [1] normjit n/a: it fell back: normjit.torch.layer_norm_channels",
                   "Incomplete run: 6 of 8 rows", "random seed 9", "FakeGPU", "a warning",
                   "1 rows skipped", "OutOfMemoryError: x", "compile off float64",
                   "activation=\"silu\"", "`python3 tools/bench_vision.py --selftest`"):
        assert needle in md, needle
    print(render_summary(rep))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.json"
        write_json(rep, path)
        data = json.loads(path.read_text())
        assert data["rows"][3]["normjit"]["rel_err"] is None
        assert render_section(report_from_json(data)) == md, "re-rendered from JSON"
        doc = Path(tmp) / "performance.md"
        doc.write_text("# normjit performance\n\n## Analysis per kernel\n\nnotes\n")
        assert main(["--from-json", str(path), "--doc", str(doc)]) == 0
        text = doc.read_text()
        assert text.index(ct.VISION_BEGIN) < text.index("## Analysis per kernel")
        second = fake_report()
        second.rows = [dataclasses.replace(second.rows[1], case=rep.rows[6].case)]
        path2 = Path(tmp) / "v2.json"
        write_json(second, path2)
        merged = Path(tmp) / "merged.json"
        assert main(["--from-json", f"{path},{path2}", "--doc", str(doc),
                     "--json-out", str(merged)]) == 0
        block = ct.section_block(doc.read_text(), ct.VISION_BEGIN, ct.VISION_END)
        assert "rows skipped" not in block and doc.read_text().count(ct.VISION_BEGIN) == 1
        # the merged JSON renders the same section, so a later partial run merges into it
        assert render_section(report_from_json(json.loads(merged.read_text()))) == block
    assert main(["--list", "--only", "nhwc"]) == 0
    print("selftest: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
