#!/usr/bin/env python3
"""The backward of normalization (issue 20), on the GPU machine: normjit's backward kernel
against PyTorch eager autograd, torch.compile's generated backward, Liger-Kernel's autograd
Functions and a device-to-device copy of the bytes a backward must move.

Problems: the seed problems of docs/design.md (f32 and bf16), LLM rows (bf16 [tokens,
hidden], hidden 4096/8192/16384, tokens 1024/4096/16384; RMSNorm with a weight, LayerNorm with
weight and bias), the forward table's ViT/BERT LayerNorm rows, and Gemma's RMSNorm (bf16 x, an
f32 weight used as 1 + w: the spec's param_dtype=f32 weight_offset=1; Gemma 2 and 3 hidden
sizes, 4096 and 16384 tokens), and the fused residual add + RMSNorm (bf16 x and residual, hidden
4096 and 8192, 4096 and 16384 tokens: the gradients of x, residual and weight, given those of y
and of h = x + residual), ConvNeXt-T's LayerNorm2d channels last (convnext), Stable Diffusion's
GroupNorm channels last (sd_nhwc) and its GroupNorm -> SiLU (sd_silu: y = silu(group_norm(x) *
w + b), bf16, 32 groups, SD 1.5's UNet and VAE maps, two also channels last: the gradients for
dy of y, the backward kernel of the spec with activation=silu). For each one and each
implementation the gradients of x, weight and bias for a fixed dy are checked against float64
and timed:
  normjit   its backward kernel alone (spec backward=true, normjit_prepare once, then
            normjit_launch_backward through the C API by ctypes), given x, dy and the
            statistics (mean, rstd in f32) a forward with save_stats writes; for add + RMSNorm,
            torch.autograd.grad of normjit.torch.add_rms_norm's (y, h) (its training op, whose
            backward is the RMSNorm backward kernel of the spec with residual on h: h's own
            gradient loaded with h and dy and added as dx is stored, one pass); with an
            activation (sd_silu) the kernel of the spec with activation=, given the bias too
            (it takes dy through the activation's derivative at z = xhat * w + b);
  eager     torch.autograd.grad(y, [x, weight, bias], dy, retain_graph=True) on the PyTorch
            module's output (the backward kernels of nn.LayerNorm, nn.GroupNorm, nn.RMSNorm;
            the channel RMSNorm's autograd of its expression); with an activation, on
            F.silu (F.gelu) of the module's output: F.silu(F.group_norm(x, 32, w, b, eps));
  compile   the same on the output of torch.compile(module, dynamic=False): AOTAutograd's
            backward graph, compiled by Inductor at the first backward call (excluded);
            torch._functorch.config.donated_buffer is off, since a backward with donated
            buffers refuses retain_graph=True (it only lets the backward reuse saved tensors'
            memory for its outputs: the same kernels);
  liger     the same on the output of Liger-Kernel's LigerRMSNormFunction /
            LigerLayerNormFunction / LigerGroupNormFunction (in_place=False for RMSNorm, so
            dy is kept; Gemma's with offset 1.0); LigerFusedAddRMSNormFunction for add +
            RMSNorm (its one backward kernel takes h's gradient); n/a with an activation
            (Liger's norms have none: the activation's backward would be PyTorch's kernel);
  copy      a copy_ of the problem's backward bytes: x, dy and dx, the statistics (rstd; mean
            too for LayerNorm and GroupNorm, f32 per row or per (n, group)), the parameters
            and their gradients, each once (what `normjit bench --backward` counts).
A spec normjit refuses is shown as n/a with normjit's reason. The float64 reference takes dy
through the activation's derivative (autograd of torch.nn.functional's, in float64) where the
problem has one.

    python3 tools/bench_backward.py                     # everything (about 10 minutes)
    python3 tools/bench_backward.py --only seeds --quick
    python3 tools/bench_backward.py --only sd_nhwc,sd_silu  # the Stable Diffusion groups
    python3 tools/bench_backward.py --list              # the problems, no GPU needed
    python3 tools/bench_backward.py --selftest          # the non-GPU parts, no torch needed
    python3 tools/bench_backward.py --from-json A.json,B.json  # re-render (runs merged)

The timing method is tools/compare_torch.py's (CUDA events around each call, median, a sleep
kernel queued first, input sets rotated past L2), with a longer sleep: an autograd.grad call
costs more host time than a kernel launch. The section goes into docs/performance.md between
compare_torch.BACKWARD_BEGIN/END (compare_torch.py keeps it) and the raw results into a JSON.

Exit status: 0 when every normjit result that ran passed its check, 1 when a check failed or a
normjit call errored, 2 when it could not start. Outputs are rewritten after every problem.
Only the standard library is imported at module level (torch where it is used).
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import json
import math
import os
import shlex
import statistics
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
from normjit import _capi  # noqa: E402


@dataclass(frozen=True)
class Problem(ct.Problem):
    """compare_torch's problem with the variant axes a backward kernel takes: weight_offset
    (the weight used is weight_offset + weight, in f32: Gemma's 1) and param_dtype (weight and
    its gradient in their own dtype; "" for x's)."""
    weight_offset: float = 0.0
    param_dtype: str = ""
    residual: str = ""  # the residual's dtype: the backward of add + norm (h = x + residual)
    layout: str = ""    # "nhwc": x and dy channels last (channels_last; channel forms, GroupNorm)
    # The forward's activation after the affine step (y = act(xhat * w + b): "silu", or "gelu"
    # exact): the backward takes dy of y through act' at z = xhat * w + b (normjit reads b).
    activation: str = ""

    def describe(self) -> str:
        text = super().describe()
        if self.residual:
            text = f"h = x + r ({self.residual}), " + text
        if self.weight_offset:
            text += f" ({self.weight_offset:g} + w)"
        if self.param_dtype:
            text += f", {self.param_dtype} w"
        if self.activation:
            text += f", then {ACTIVATION_TITLES[self.activation]}"
        if self.layout:
            text += ", channels last"
        return text

    def validate(self) -> None:
        super().validate()
        assert not self.param_dtype or (self.param_dtype in ct.ELEMENT_BYTES
                                        and self.affine != "none"), self.param_dtype
        assert not self.weight_offset or self.affine != "none", self.weight_offset
        assert not self.residual or (self.residual == self.dtype and self.op == "rmsnorm"
                                     and self.normalized_dims == 1), self.residual
        assert not self.layout or (self.layout == "nhwc" and (self.op == "groupnorm"
                                                              or self.normalized_dims == 0)), \
            self.layout
        # The add + norm rows' flow (_run_add) takes no activation.
        assert self.activation in ("", *ACTIVATION_TITLES) and not (self.activation
                                                                    and self.residual), \
            self.activation

    @property
    def param_bytes(self) -> int:
        """Bytes of one element of weight, bias and their gradients."""
        return ct.ELEMENT_BYTES[self.param_dtype or self.dtype]


def as_backward(p: ct.Problem) -> Problem:
    """compare_torch's problem p as a backward problem (no variant axes)."""
    return Problem(**{f.name: getattr(p, f.name) for f in dataclasses.fields(ct.Problem)})


# The activations a backward takes dy through (normjit's activation=, torch.nn.functional's
# function of the same name: F.gelu exact).
ACTIVATION_TITLES = {"silu": "SiLU", "gelu": "GELU"}
IMPLS = ("normjit", "eager", "compile", "liger", "copy")
PEERS = ("eager", "compile", "liger")
TITLES = {"normjit": "normjit", "eager": "eager", "compile": "compile", "liger": "Liger",
          "copy": "copy"}
TOLERANCE = {"f32": 1e-5, "f16": 1e-2, "bf16": 1e-2}
# dweight and dbias are sums over every row of terms of both signs: a float32 sum is held to
# its rounding, this fraction of the size of its terms (||sum of |term| over rows||), on top
# of TOLERANCE of its own size.
SUM_SLACK = 2.0 ** -23
DY = ct.InputDist(0.0, 1.0)
GROUP_TITLES = {"seeds": "Seed problems (docs/design.md)",
                "llm": "LLM rows (bf16 [tokens, hidden]; RMSNorm with weight, LayerNorm with "
                       "weight and bias)",
                "transformer": "Transformer rows of 768 and 1024 features (ViT, BERT "
                               "LayerNorm with weight and bias)",
                "gemma": "Gemma RMSNorm (bf16 [tokens, hidden], f32 weight used as 1 + w: "
                         "weight_offset=1)",
                "add": "add + RMSNorm (bf16 x and residual [tokens, hidden], weight; the "
                       "gradients of x, residual and weight from those of y and h)",
                "convnext": "ConvNeXt-T LayerNorm2d (bf16 [32, C, H, W] channels last, weight "
                            "and bias, over the channels: timm's LayerNorm2d)",
                "sd_nhwc": "Stable Diffusion GroupNorm channels last (bf16 [N, C, H, W] in "
                           "channels_last, 32 groups, weight and bias: UNet and VAE maps "
                           "trained channels last)",
                "sd_silu": "Stable Diffusion GroupNorm -> SiLU (bf16 [N, C, H, W], 32 groups, "
                           "weight and bias, SiLU after: diffusion training's norm; UNet and "
                           "VAE maps, two of them channels last too)"}
LLM_HIDDENS = (4096, 8192, 16384)
LLM_TOKENS = (1024, 4096, 16384)
GEMMA_HIDDENS = (2304, 3584, 5376)  # Gemma 2 2B and 9B, Gemma 3 27B
GEMMA_TOKENS = (4096, 16384)
ADD_HIDDENS = (4096, 8192)
ADD_TOKENS = (4096, 16384)
CONVNEXT_MAPS = ((96, 56), (192, 28), (384, 14), (768, 7))  # ConvNeXt-T's stages: C, H = W
# SD 1.5's UNet at 512x512 (latents 64x64, batch 2 with guidance, batch 8 in training) and its
# VAE decoder's largest maps (batch 1): N, C, H = W.
SD_NHWC_MAPS = ((2, 320, 64), (2, 640, 32), (2, 1280, 16), (8, 1280, 32), (8, 320, 64),
                (1, 128, 512), (1, 256, 256), (1, 512, 128))
# GroupNorm -> SiLU (the UNet's and the VAE's ResNet blocks): the same maps, channels first;
# the training UNet's largest map and the VAE decoder's largest also channels last.
SD_SILU_MAPS = ((2, 320, 64), (2, 640, 32), (2, 1280, 16), (8, 320, 64), (8, 1280, 32),
                (1, 128, 512), (1, 256, 256), (1, 512, 128))
SD_SILU_NHWC_MAPS = ((8, 320, 64), (1, 128, 512))
LIGER_ADD = "fused_add_rms_norm.LigerFusedAddRMSNormFunction"
LIGER_FUNCTIONS = {"rmsnorm": "rms_norm.LigerRMSNormFunction",
                   "layernorm": "layer_norm.LigerLayerNormFunction",
                   "groupnorm": "group_norm.LigerGroupNormFunction"}


def default_problems() -> list[Problem]:
    """The problem list. Add a line here to measure another shape."""
    problems = [as_backward(p) for p in ct.default_problems() if p.group == "seeds"]
    for hidden in LLM_HIDDENS:
        for tokens in LLM_TOKENS:
            quick = hidden == 4096 and tokens == 4096
            problems += [
                Problem(f"llm rmsnorm h{hidden} t{tokens}", "llm", "rmsnorm", (tokens, hidden),
                        "bf16", 1e-6, normalized_dims=1, affine="weight", quick=quick),
                Problem(f"llm layernorm h{hidden} t{tokens}", "llm", "layernorm",
                        (tokens, hidden), "bf16", 1e-5, normalized_dims=1, affine="both",
                        quick=quick),
            ]
    # The forward table's ViT/BERT LayerNorm rows (compare_torch.py), f32 and bf16: rows of
    # 768 and 1024 run in CTAs of several teams.
    problems += [dataclasses.replace(as_backward(p), quick=False) for p in ct.default_problems()
                 if p.group == "transformer" and p.dtype in ("f32", "bf16")]
    problems += [Problem(f"gemma rmsnorm h{hidden} t{tokens}", "gemma", "rmsnorm",
                         (tokens, hidden), "bf16", 1e-6, normalized_dims=1, affine="weight",
                         weight_offset=1.0, param_dtype="f32")
                 for hidden in GEMMA_HIDDENS for tokens in GEMMA_TOKENS]
    problems += [Problem(f"add rmsnorm h{hidden} t{tokens}", "add", "rmsnorm", (tokens, hidden),
                         "bf16", 1e-6, normalized_dims=1, affine="weight", residual="bf16")
                 for hidden in ADD_HIDDENS for tokens in ADD_TOKENS]
    problems += [Problem(f"convnext layernorm2d c{c} {hw}x{hw}", "convnext", "layernorm",
                         (32, c, hw, hw), "bf16", 1e-6, normalized_dims=0, affine="both",
                         layout="nhwc")
                 for c, hw in CONVNEXT_MAPS]
    problems += [Problem(f"sd groupnorm c{c} {hw}x{hw} b{n} channels last", "sd_nhwc",
                         "groupnorm", (n, c, hw, hw), "bf16", 1e-5, groups=32, affine="both",
                         layout="nhwc")
                 for n, c, hw in SD_NHWC_MAPS]
    problems += [Problem(f"sd groupnorm silu c{c} {hw}x{hw} b{n}" + (" channels last" if layout
                                                                     else ""),
                         "sd_silu", "groupnorm", (n, c, hw, hw), "bf16", 1e-5, groups=32,
                         affine="both", layout=layout, activation="silu")
                 for maps, layout in ((SD_SILU_MAPS, ""), (SD_SILU_NHWC_MAPS, "nhwc"))
                 for n, c, hw in maps]
    return problems


# ---------------------------------------------------------------------------------------
# What a backward is: spec, statistics, bytes
# ---------------------------------------------------------------------------------------

def channel_form(p: Problem) -> bool:
    """x [N, C, *spatial] reduced over dim 1 (GroupNorm: per group of channels)."""
    return p.op == "groupnorm" or p.normalized_dims == 0


def stats_shape(p: Problem) -> tuple[int, ...]:
    """The saved statistics, one f32 per row: [N, G] for GroupNorm, [N, *spatial] for the
    channel forms, the leading dims for the trailing forms."""
    if p.op == "groupnorm":
        return (p.shape[0], p.groups)
    if p.normalized_dims == 0:
        return (p.shape[0],) + tuple(p.shape[2:])
    return tuple(p.shape[:len(p.shape) - p.normalized_dims])


def has_mean(p: Problem) -> bool:
    return p.op != "rmsnorm"


def launch_batch(p: Problem) -> int:
    """normjit's batch: N for the channel and group forms, rows for the trailing forms (as
    NormSpec::batch())."""
    return p.shape[0] if channel_form(p) else math.prod(stats_shape(p))


def backward_bytes(p: Problem) -> int:
    """x and dy read, dx written; the parameters read and their gradients written; the
    statistics read: each once. add + norm: h, dy and h's gradient read, one gradient of x
    and of residual (the same values) written. With an activation the kernel reads the bias
    too (for z = xhat * w + b): counted already, as a parameter read (as `normjit bench
    --backward` counts every backward with a bias)."""
    e = ct.ELEMENT_BYTES[p.dtype]
    params = p.param_count * math.prod(p.param_shape) * p.param_bytes
    stats = (2 if has_mean(p) else 1) * math.prod(stats_shape(p)) * 4
    return (4 if p.residual else 3) * p.numel * e + 2 * params + stats


def backward_spec(p: Problem) -> str:
    """normjit's spec text of p's backward kernel (add + norm: the norm's on h, with the
    residual: h's gradient added to dx)."""
    form = f"groups={p.groups}" if p.op == "groupnorm" else f"normalized_dims={p.normalized_dims}"
    variants = (f" param_dtype={p.param_dtype}" if p.param_dtype else "") + \
        (f" residual={p.residual}" if p.residual else "") + \
        (f" weight_offset={p.weight_offset!r}" if p.weight_offset else "") + \
        (f" activation={p.activation}" if p.activation else "") + \
        (f" layout={p.layout}" if p.layout else "")
    return (f"op={p.op} shape={','.join(map(str, p.shape))} dtype={p.dtype} {form} "
            f"affine={p.affine} eps={p.eps!r}{variants} backward=true")


def liger_support(p: Problem) -> str:
    """Why Liger-Kernel (0.8.5, read from its source) has no backward of p, or "" when it has:
    its RMSNorm and LayerNorm normalize the last dim (several trailing dims given as one row),
    one row per Triton block of at most 65536."""
    fn = LIGER_FUNCTIONS[p.op].split(".")[1]
    if p.activation:
        return (f"{fn} has no activation: {ACTIVATION_TITLES[p.activation]}'s backward "
                "would be another kernel (PyTorch's, as eager's), not Liger's")
    if p.op == "groupnorm" and p.layout == "nhwc":
        return (f"{fn} reads x as [N, C, *spatial] in its row-major order; a channels-last x "
                "would need a contiguous copy")
    if p.normalized_dims == 0 and p.op != "groupnorm" and p.layout != "nhwc":
        return (f"{fn} normalizes the last dim only; this problem reduces dim 1 of "
                "[N, C, *spatial] (Liger would need a transposed copy of x)")
    if p.op in ("layernorm", "groupnorm") and p.affine != "both":
        return f"{fn} takes a weight and a bias: it has no form without them"
    if p.op != "groupnorm" and math.prod(p.param_shape) > ct.LIGER_MAX_ROW:
        return (f"rows over {ct.LIGER_MAX_ROW} elements: {fn} keeps a row in one Triton block "
                f"of at most {ct.LIGER_MAX_ROW} (its calculate_settings raises above)")
    return ""


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------

@dataclass
class GradCheck:
    """One implementation's gradients against float64: ||d - ref|| / ||ref|| of each, and the
    bound dweight and dbias are held to (TOLERANCE plus SUM_SLACK times the size of their
    terms, relative to ||ref||)."""
    dx_err: Optional[float] = None
    dw_err: Optional[float] = None
    db_err: Optional[float] = None
    dw_bound: Optional[float] = None
    db_bound: Optional[float] = None
    nonfinite: Optional[int] = None       # elements NaN/inf in dx, dweight, dbias
    passed: bool = False

    def text(self) -> str:
        parts = [f"dx {ct.fmt_err(self.dx_err)}"]
        if self.dw_err is not None:
            parts.append(f"dw {ct.fmt_err(self.dw_err)}")
        if self.db_err is not None:
            parts.append(f"db {ct.fmt_err(self.db_err)}")
        return ", ".join(parts)


@dataclass
class Row(ct.PeerRow):
    problem: Problem
    bytes_moved: int
    spec: str = ""
    rotation: int = 1
    normjit: ct.Measurement = field(default_factory=ct.Measurement)
    eager: ct.Measurement = field(default_factory=ct.Measurement)
    compile: ct.Measurement = field(default_factory=ct.Measurement)
    liger: ct.Measurement = field(default_factory=ct.Measurement)
    copy: ct.Measurement = field(default_factory=ct.Measurement)
    checks: dict[str, GradCheck] = field(default_factory=dict)
    error: str = ""            # the problem could not be run
    skipped: str = ""          # not run (time budget)
    peak_gib: Optional[float] = None
    PEERS = PEERS

    @property
    def passed(self) -> Optional[bool]:
        c = self.checks.get("normjit")
        return c.passed if c else None


Report = ct.BenchReport


def row_from_dict(d: dict) -> Row:
    names = {f.name for f in dataclasses.fields(Row)}
    kw = {k: v for k, v in d.items() if k in names}
    pd = dict(kw["problem"])
    pd["shape"] = tuple(pd["shape"])
    kw["problem"] = Problem(**pd)  # a JSON of before the variant axes: their defaults
    for impl in IMPLS:
        kw[impl] = ct.Measurement(**kw.get(impl, {}))
    checks = {}
    for k, c in (kw.get("checks") or {}).items():
        c = dict(c)
        # JSON writes NaN as null: an error a check measured (dx_err always is) was NaN.
        if c.get("dx_err") is None:
            c["dx_err"] = math.nan
        checks[k] = GradCheck(**c)
    kw["checks"] = checks
    return Row(**kw)


def report_from_json(data: dict) -> Report:
    return ct.bench_report_from_json(data, row_from_dict)


def merge_reports(reports: list[Report]) -> Report:
    """Several runs as one (ct.merge_runs): a problem measured in a later run replaces an
    earlier one's, a skipped one does not replace a measured one."""
    order = {p.key: i for i, p in enumerate(default_problems())}
    return ct.merge_runs(reports, lambda row: row.problem.key, order)


def report_json(rep: Report) -> dict:
    data = dataclasses.asdict(rep)
    for row, d in zip(rep.rows, data["rows"]):
        best = row.best_peer()
        d["derived"] = {"key": row.problem.key, "pct_copy": row.pct_copy, "passed": row.passed,
                        "best_peer": best, "speedup_vs_best": row.speedup(best),
                        **{f"speedup_vs_{k}": row.speedup(k) for k in PEERS}}
    return data


def write_json(rep: Report, path: Path) -> None:
    ct.write_json_file(report_json(rep), path)


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------

fmt_us = ct.fmt_us


def time_cell(row: Row, impl: str, footnotes: list[str]) -> str:
    """The time in µs, marked when the gradients were wrong; else the status, n/a with the
    number of its reason in footnotes (collected in order of appearance)."""
    m = row.impl(impl)
    if impl == "copy" and m.status == "ok" and not m.message and ct.copy_rounded(row.bytes_moved):
        # A run before 4026e8a (one copy, no message): the exact bytes, half not whole 4 KiB.
        note = ("copy of a run before the copy's halves were rounded to whole 4 KiB and timed "
                "twice (4026e8a): half of this row's bytes is not whole 4 KiB, which the "
                "device's memcpy copies a fixed time slower, so the copy reads slow and `% of "
                "copy` high (docs/performance-notes.md, \"Session 75\")")
        if note not in footnotes:
            footnotes.append(note)
        return f"{fmt_us(m.ms)} [{footnotes.index(note) + 1}]"
    if m.status == "ok":
        failed = row.checks[impl].passed is False if impl in row.checks else m.passed is False
        return fmt_us(m.ms) + (" **FAIL**" if failed else "")
    if m.status == "n/a":
        note = f"{TITLES[impl]} n/a: {m.message}"
        if note not in footnotes:
            footnotes.append(note)
        return f"n/a [{footnotes.index(note) + 1}]"
    return m.status


HEADERS = ["problem", "shape", "reduced", "dtype", "MB moved", "normjit µs", "eager µs",
           "compile µs", "Liger µs", "copy µs", "% of copy", "vs compile", "best peer",
           "vs best", "normjit rel. err", "check"]
RIGHT = set(range(4, 12)) | {HEADERS.index("vs best")}


def table_row(row: Row, footnotes: list[str]) -> list[str]:
    p = row.problem
    best = row.best_peer()
    check = row.checks.get("normjit")
    mb = row.bytes_moved / 1e6
    return [p.name, ct.shape_text(p.shape), p.describe(), p.dtype,
            f"{mb:.1f}" if mb >= 1 else f"{mb:.3g}",
            *(time_cell(row, k, footnotes) for k in IMPLS),
            ct.fmt_num(row.pct_copy, ".1f", "%"), ct.fmt_num(row.speedup("compile"), ".2f", "x"),
            TITLES[best] if best else "—", ct.fmt_num(row.speedup(best), ".2f", "x"),
            check.text() if check else "—", row.check_text()]


def summary(rows: list[Row]) -> tuple[str, str, str]:
    """(rows ahead of every peer, % of copy range, checks) of a group."""
    both = [r for r in rows if r.normjit.ms and r.best_peer()]
    ahead = sum(1 for r in both if r.normjit.ms <= r.impl(r.best_peer()).ms)
    pct = [r.pct_copy for r in rows if r.pct_copy is not None]
    checked = [r for r in rows if r.passed is not None]
    failed = sum(1 for r in checked if not r.passed)
    na = sum(1 for r in rows if r.normjit.status == "n/a")
    checks = f"{len(checked) - failed} of {len(checked)} pass" if checked else "—"
    if failed:
        checks = f"**{failed} FAIL**, " + checks
    if na:
        checks += f", {na} n/a"
    return (f"{ahead} of {len(both)}" if both else "—",
            f"{min(pct):.0f}–{max(pct):.0f}%" if pct else "—", checks)


def render_section(rep: Report) -> str:
    out = ct.section_intro(ct.BACKWARD_BEGIN, "Backward (issue 20): normjit's backward kernels "
                           "against eager, torch.compile and Liger", "tools/bench_backward.py",
                           "scripts/perf_backward.sh", rep, "problems")
    add = out.append
    s = rep.settings
    add("- Every implementation computes dx, dweight and dbias for the same x, parameters and "
        "dy (N(0, 1)). normjit: its backward kernel alone (`normjit_prepare` of the spec under "
        "each table's problem with `backward=true`, then `normjit_launch_backward` by ctypes), "
        "given x, dy and the statistics a forward with `save_stats` writes (f32 mean and rstd, "
        "computed by PyTorch in float64 from x and rounded). Eager: "
        "`torch.autograd.grad(y, [x, weight, bias], dy, retain_graph=True)` on the output of "
        "the PyTorch module (`nn.RMSNorm`, `nn.LayerNorm`, `nn.GroupNorm`; the channel RMSNorm "
        "as `x / sqrt(mean(x^2, dim=1) + eps)` in fp32 math; Gemma's RMSNorm as transformers' "
        "`GemmaRMSNorm` computes it, x normalized in f32 times `(1 + weight.float())`, cast to "
        "x's dtype): its backward kernels. Compile: "
        "the same call on the output of `torch.compile(module, dynamic=False)`, so that the "
        "backward graph AOTAutograd generates and Inductor compiles runs (compiled at the first "
        "call, excluded); `torch._functorch.config.donated_buffer` is off because a backward "
        "with donated buffers refuses `retain_graph=True` (donation only lets the backward "
        "reuse saved tensors' memory for its outputs). Liger: the same call on the output of "
        "Liger-Kernel's `LigerRMSNormFunction.apply(x, w, eps, 0.0, \"gemma\", False, None)` "
        "(in_place False: dy kept; offset 1.0 for Gemma's), "
        "`LigerLayerNormFunction.apply(x, w, b, eps)`, "
        "`LigerGroupNormFunction.apply(x, w, b, C, G, eps)`, several trailing dims as one row. "
        "Every peer's time includes whatever its backward launches (reductions of partial "
        "dweight sums, casts).")
    add("- add + RMSNorm rows: every implementation, normjit included, through "
        "`torch.autograd.grad([y, h], [x, residual, weight], [dy, dh], retain_graph=True)` of "
        "its (y, h): normjit `normjit.torch.add_rms_norm(x, r, H, w, eps)` (its training op: "
        "the RMSNorm backward kernel of the spec with `residual` on the saved h, which adds h's "
        "own gradient as it stores dx), "
        "eager and compile the expression of its docstring (`h = (x.float() + "
        "r.float()).to(r.dtype)`, `F.rms_norm(h, (H,), w, eps)`), Liger "
        "`LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 0.0, \"gemma\", False)` (one "
        "backward kernel that takes h's gradient). Their gradients of x and of residual are "
        "checked as dx - dh against the RMSNorm gradient at h (the worse of the two shown); "
        "`MB moved`: h, dy and dh read, one gradient written (the same values for x and "
        "residual), the weight and its gradient, rstd.")
    if any(r.problem.activation for r in rep.rows):
        add("- Norm -> activation rows (GroupNorm -> SiLU): the forward is y = silu(xhat * w + "
            "b) and every implementation computes the gradients of x, weight and bias for dy "
            "of y. normjit: the backward kernel of the spec with `activation=silu` alone (one "
            "kernel: dy taken through SiLU's derivative at z = xhat * w + b, which it "
            "recomputes from x, the statistics, the weight and the bias it reads); eager and "
            "compile: the call above on `F.silu(nn.GroupNorm(...)(x))` = "
            "`F.silu(F.group_norm(x, 32, w, b, eps))` (compile: that whole function's forward "
            "and backward graph); Liger: n/a (its GroupNorm has no activation). The float64 "
            "reference takes dy through the derivative of `F.silu` (autograd in float64 at "
            "z) before the norm's formulas. `MB moved` as the norm's (the bias, read here, "
            "counted among the parameters read).")
    add(f"- GPU times: CUDA events around each call, median of {s.get('reps')} calls after "
        f"{s.get('warmup')} warm-up calls, a sleep kernel queued first long enough that the "
        "host enqueues every timed call while the GPU is busy (the events bracket GPU work, "
        "not Python or autograd's dispatch). Problems whose x, dy and dx are smaller than 4x "
        "L2 rotate through several sets (each with its own graph), so no call finds its inputs "
        "in L2; dx is one buffer for every set (a peer's dx is a new tensor that PyTorch's "
        "caching allocator places in the block the previous call freed).")
    add("- `MB moved` = x and dy read and dx written, the statistics read (rstd, and mean for "
        "LayerNorm and GroupNorm: f32 per row, per (n, position) for the channel forms, per "
        "(n, group) for GroupNorm), the parameters read and their gradients written, each once "
        "(as `normjit bench --backward` counts). `copy µs`: a device-to-device `copy_` moving "
        "those bytes (half read, half written; " + ct.copy_rule_text(s) + "), its source rotated, "
        "its destination one buffer, "
        "timed the same way, at the row's start (before its inputs exist) and at its end (after "
        "every implementation's tensors are freed), the faster of the two (a floor; the JSON "
        "keeps both); `% of copy` = copy µs / normjit µs (the issue's goal: 85% or more).")
    add("- `vs compile`, `vs best` = their time / normjit's (above 1: normjit faster); `best "
        "peer`: the fastest of eager, compile and Liger whose gradients passed their check. "
        "The copy is a floor, not a peer.")
    add("- Checks against float64 (PyTorch on the device, the two-pass formulas, from the same "
        "inputs): `rel. err` = ||d - ref|| / ||ref|| of dx, dweight (dw) and dbias (db). Pass: "
        "every element written (normjit's outputs filled with NaN first) and finite; dx under "
        "1e-5 (f32) or 1e-2 (f16/bf16); dweight and dbias, sums over every row of terms of "
        "both signs, under that tolerance plus 2^-23 times the size of their terms "
        "(||sum over rows of |term|||, relative to ||ref||). Every peer is checked the same "
        "way; a time whose gradients failed is marked **FAIL** (and it is no best peer). "
        "`n/a [k]`: the implementation has no backward for that problem, for the reason in "
        "note k under the table (for normjit: the library's own message).")
    add(f"- x: RMSNorm N(1, 2), LayerNorm/GroupNorm N(3, 1.5); weight N(1, 0.5) (Gemma's "
        f"N(0, 0.5), used as 1 + w), bias N(0, 1); random seed {s.get('seed')}.")
    absent = [r.liger.message for r in rep.rows if r.liger.status == "absent"]
    if absent:
        add(f"- **Liger-Kernel is absent from this run**: {absent[0]}. scripts/perf_backward.sh "
            "puts its wheel (`liger_kernel-*.whl` in WHEELS, default .whl) on PYTHONPATH when "
            "`import liger_kernel` fails.")
    if rep.copy_gbps:
        add(f"- For scale: a device-to-device copy of 2 GiB runs at {rep.copy_gbps:.0f} GB/s "
            "(read + written).")
    add("")
    groups = [g for g in GROUP_TITLES if any(r.problem.group == g for r in rep.rows)]
    groups += sorted({r.problem.group for r in rep.rows} - set(groups))
    if groups:
        add("| problems | rows | normjit ahead of every peer | % of copy | normjit checks |")
        add("|---|---:|---:|---:|---|")
        for g in groups:
            rows = [r for r in rep.rows if r.problem.group == g]
            ahead, pct, checks = summary(rows)
            add(f"| {GROUP_TITLES.get(g, g)} | {len([r for r in rows if not r.skipped])} | "
                f"{ahead} | {pct} | {checks} |")
        add("")
    for g in groups:
        add(f"### {GROUP_TITLES.get(g, g)}")
        add("")
        footnotes: list[str] = []
        rows = [r for r in rep.rows if r.problem.group == g]
        out += ct.md_table(HEADERS, [table_row(r, footnotes) for r in rows], RIGHT)
        add("")
        for k, note in enumerate(footnotes, 1):
            add(f"- [{k}] {note}")
        specs = [r.spec for r in rows if r.spec]
        if specs:
            more = " ... (one per row; the JSON has each)" if len(specs) > 1 else ""
            add(f"- normjit's specs: `{specs[0]}`" + more)
        add("")
    problems = []
    for r in rep.rows:
        key = r.problem.key
        if r.error:
            problems.append(f"{key}: {r.error}")
        for impl in IMPLS:
            m = r.impl(impl)
            if m.status in ("error", "failed"):
                problems.append(f"{key}, {TITLES[impl]} {m.status}: {m.message}")
        for impl, c in r.checks.items():
            if not c.passed:
                problems.append(f"{key}, {TITLES[impl]}'s gradients off float64: {c.text()} "
                                f"(bounds: dw {ct.fmt_err(c.dw_bound)}, db "
                                f"{ct.fmt_err(c.db_bound)}), {c.nonfinite} non-finite elements")
    out += ct.failures_block(problems, rep, "problems")
    out.append(ct.BACKWARD_END)
    return "\n".join(out)


def write_section(rep: Report, doc: Path, section_out: Optional[Path] = None) -> None:
    ct.write_section_into(doc, ct.BACKWARD_BEGIN, ct.BACKWARD_END, render_section(rep), section_out)


def render_summary(rep: Report) -> str:
    headers = ["problem", "dtype", "normjit", "eager", "compile", "liger", "copy", "%copy",
               "best", "vs best", "check"]
    lines_rows = []
    for r in rep.rows:
        notes: list[str] = []
        best = r.best_peer()
        lines_rows.append([r.problem.name, r.problem.dtype,
                           *(time_cell(r, k, notes).replace("*", "") for k in IMPLS),
                           ct.fmt_num(r.pct_copy, ".0f", "%"), TITLES[best] if best else "—",
                           ct.fmt_num(r.speedup(best), ".2f", "x"),
                           r.check_text().replace("*", "")])
    return ct.text_table(headers, lines_rows)


# ---------------------------------------------------------------------------------------
# normjit's backward kernel through the C API
# ---------------------------------------------------------------------------------------

class CApi(ct.EngineApi):
    """libnormjit.so through the package's ctypes binding: prepare a spec, bind a backward
    launch to fixed pointers."""

    def bind(self, kernel: int, ptrs: dict[str, Optional[int]], batch: int,
             stream: int) -> Callable[[], None]:
        """A launch of the backward kernel on ptrs (x, dy, mean, rstd, weight, dx, dweight,
        dbias, and bias for a spec with an activation: device addresses or None), the
        arguments converted once."""
        args = _capi.BackwardArgs()
        self.lib.normjit_backward_args_init_sized(ctypes.byref(args), ctypes.sizeof(args))
        for name in ("x", "dy", "mean", "rstd", "weight", "dx", "dweight", "dbias", "bias"):
            setattr(args, name, ptrs.get(name))
        args.batch = batch
        fn, ref, lib = self.lib.normjit_launch_backward, ctypes.byref(args), self.lib

        def call() -> None:
            status = fn(kernel, ref, stream)
            if status:
                raise lib.error(status)
        call.keepalive = args  # type: ignore[attr-defined]
        return call


# ---------------------------------------------------------------------------------------
# The measurements (torch imported here)
# ---------------------------------------------------------------------------------------

def activation_function(name: str) -> Callable:
    """torch.nn.functional's activation of normjit's activation=name (F.gelu exact)."""
    import torch.nn.functional as F
    return {"silu": F.silu, "gelu": F.gelu}[name]


def reference(p: Problem, x, dy, weight, bias=None):
    """p's backward in float64 on a chunk of x along dim 0 (whole rows, items or groups):
    (dx, dz * xhat, dz, mean, rstd) with mean and rstd in stats_shape(p) of the chunk (mean
    None for RMSNorm); dz = dy, or with an activation dy taken through its derivative at
    z = xhat * weight + bias (float64 autograd of torch.nn.functional's activation). Two-pass
    statistics; weight and bias float64 or None."""
    import torch
    xd, dyd = x.double(), dy.double()
    nd = xd.dim()
    if channel_form(p):
        param_view = (1, -1) + (1,) * (nd - 2)
    else:
        param_view = p.param_shape
    # A view in which each row (or position, or group) is reduced over dims `dims`.
    if p.op == "groupnorm":
        view = lambda t: t.reshape(t.shape[0], p.groups, -1)  # noqa: E731
        dims = (-1,)
    elif p.normalized_dims == 0:
        view = lambda t: t  # noqa: E731
        dims = (1,)
    else:
        row = math.prod(p.param_shape)
        view = lambda t: t.reshape(-1, row)  # noqa: E731
        dims = (-1,)
    xv = view(xd)
    if p.op == "rmsnorm":
        mean = None
        rstd = torch.rsqrt(xv.pow(2).mean(dim=dims, keepdim=True) + p.eps)
        xhat = xv * rstd
    else:
        mean = xv.mean(dim=dims, keepdim=True)
        rstd = torch.rsqrt((xv - mean).pow(2).mean(dim=dims, keepdim=True) + p.eps)
        xhat = (xv - mean) * rstd
    if p.activation:
        z = xhat.reshape(xd.shape)
        if weight is not None:
            z = z * weight.reshape(param_view)
        if bias is not None:
            z = z + bias.reshape(param_view)
        with torch.enable_grad():
            zl = z.detach().requires_grad_()
            dzd, = torch.autograd.grad(activation_function(p.activation)(zl), zl, dyd)
        del z, zl
    else:
        dzd = dyd
    g = dzd * weight.reshape(param_view) if weight is not None else dzd
    gv = view(g)
    dx = gv - xhat * (gv * xhat).mean(dim=dims, keepdim=True)
    if p.op != "rmsnorm":
        dx = dx - gv.mean(dim=dims, keepdim=True)
    dx = (rstd * dx).reshape(xd.shape)
    n = xd.shape[0]
    sshape = (n,) + stats_shape(p)[1:] if channel_form(p) else (-1,)
    return (dx, dzd * xhat.reshape(xd.shape), dzd,
            None if mean is None else mean.reshape(sshape), rstd.reshape(sshape))


def gemma_rms_norm(p: Problem, weight):
    """transformers' GemmaRMSNorm (its forward's expression: x normalized in f32, times
    (1 + weight) in f32, cast back to x's dtype) with normjit's weight; weight_offset as
    its 1."""
    import torch

    class GemmaRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight.detach().clone())

        def forward(self, x):
            xf = x.float()
            out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + p.eps)
            return (out * (p.weight_offset + self.weight.float())).type_as(x)
    return GemmaRMSNorm()


def layer_norm_2d(p: Problem, weight, bias):
    """timm's LayerNorm2d (x permuted channels last, F.layer_norm over C, permuted back) with
    normjit's weight and bias: ConvNeXt's norm."""
    import torch
    import torch.nn.functional as F

    class LayerNorm2d(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight.detach().clone())
            self.bias = torch.nn.Parameter(bias.detach().clone())

        def forward(self, x):
            x = x.permute(0, 2, 3, 1)
            x = F.layer_norm(x, (p.shape[1],), self.weight, self.bias, p.eps)
            return x.permute(0, 3, 1, 2)
    return LayerNorm2d()


def then_activation(norm, act: Callable):
    """A module computing act(norm(x)) (norm's parameters its own): eager's and compile's
    norm -> activation, F.silu(F.group_norm(x, G, w, b, eps)) for nn.GroupNorm."""
    import torch

    class ThenActivation(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return act(self.norm(x))
    return ThenActivation()


def param_sum(p: Problem, t):
    """t summed over every dim but the parameters' (dim 1 of the channel forms, the trailing
    dims of the others)."""
    if channel_form(p):
        return t.sum(dim=[d for d in range(t.dim()) if d != 1])
    lead = list(range(t.dim() - p.normalized_dims))
    return t.sum(dim=lead) if lead else t


def faster_copy(first: ct.Measurement, last: ct.Measurement) -> ct.Measurement:
    """The row's copy: of the copies timed at its start and at its end, the one with the lower
    median (a floor, whatever state the row's implementations leave; on the H100 the two agreed
    within 0.7 µs in session 75, whose slow copies came from their size: compare_torch.own_copy),
    its message giving both medians."""
    timed = [m for m in (first, last) if m.status == "ok" and m.ms is not None]
    if not timed:
        return last
    best = min(timed, key=lambda m: m.ms)
    best.message = ", ".join(f"{name} {m.ms * 1e3:.2f} µs" for name, m in
                             (("start", first), ("end", last)) if any(m is t for t in timed))
    return best


class Bench(ct.BenchRunner):
    """Runs the problems; holds what they share."""
    # An autograd.grad call costs up to a few hundred µs of host time (compile's backward the
    # most): 1 ms of GPU sleep per call keeps the host ahead.
    SLEEP_MS_PER_CALL = 1.0
    SLEEP_MS_MAX = 100.0

    def __init__(self, args: argparse.Namespace, nj: Any, rep: Report, l2_bytes: int,
                 cuda: bool):
        super().__init__(args, rep, l2_bytes, cuda)
        self.nj = nj
        self.liger, rep.env["Liger-Kernel"] = ct.load_liger(*LIGER_FUNCTIONS.values())
        self.liger_add, self.liger_add_why = ct.load_liger(LIGER_ADD)
        self.stream = self.torch.cuda.current_stream().cuda_stream if cuda else 0

    def rotation(self, p: Problem) -> int:
        per_set = (5 if p.residual else 3) * p.numel * ct.ELEMENT_BYTES[p.dtype]
        return max(1, min(256, math.ceil(4 * self.l2 / per_set)))

    # -- correctness ----------------------------------------------------------------------

    def statistics(self, p: Problem, x) -> tuple[Any, Any]:
        """(mean or None, rstd): f32, contiguous, stats_shape(p), from float64."""
        torch = self.torch
        means, rstds = [], []
        for s in self.chunks(p, x):
            _, _, _, mean, rstd = reference(p, x[s], x[s], None)
            rstds.append(rstd.float())
            if mean is not None:
                means.append(mean.float())
        shape = stats_shape(p)
        rstd = torch.cat(rstds).reshape(shape).contiguous()
        mean = torch.cat(means).reshape(shape).contiguous() if means else None
        return mean, rstd

    def chunks(self, p: Problem, x) -> list[slice]:
        rows = x.shape[0]
        per_item = max(1, x.numel() // rows)
        step = rows if p.reduces_dim0 else max(1, ct.REFERENCE_CHUNK_ELEMENTS // per_item)
        return [slice(a, min(rows, a + step)) for a in range(0, rows, step)]

    def check(self, p: Problem, x, dy, weight, grads: tuple, bias=None) -> GradCheck:
        """grads (dx, dweight or None, dbias or None) against float64 (bias: the forward's,
        which an activation's derivative depends on)."""
        torch = self.torch
        dx, dw, db = grads
        w64 = weight.double() + p.weight_offset if weight is not None else None  # the weight used
        b64 = bias.double() if bias is not None and p.activation else None
        zero = lambda: torch.zeros((), dtype=torch.float64, device=self.dev)  # noqa: E731
        err2, ref2 = zero(), zero()
        bad = torch.zeros((), dtype=torch.int64, device=self.dev)
        sums = {"dw": None, "dw_abs": None, "db": None, "db_abs": None}

        def add(key, t):
            sums[key] = t if sums[key] is None else sums[key] + t
        for s in self.chunks(p, x):
            rdx, wterm, bterm, _, _ = reference(p, x[s], dy[s], w64, b64)
            d = dx[s].double()
            bad += (~torch.isfinite(d)).sum()
            err2 += (d - rdx).pow(2).sum()
            ref2 += rdx.pow(2).sum()
            if dw is not None:
                add("dw", param_sum(p, wterm))
                add("dw_abs", param_sum(p, wterm.abs()))
            if db is not None:
                add("db", param_sum(p, bterm))
                add("db_abs", param_sum(p, bterm.abs()))
            del rdx, wterm, bterm, d
        c = GradCheck()
        r2 = ref2.item()
        e2 = err2.item()
        c.dx_err = math.sqrt(e2 / r2) if r2 > 0 else (0.0 if e2 == 0 else math.inf)
        tol = TOLERANCE[p.dtype]
        ok = c.dx_err < tol
        for name, got in (("dw", dw), ("db", db)):
            if got is None:
                continue
            ref = sums[name].reshape(p.param_shape)
            g = got.double().reshape(p.param_shape)
            bad += (~torch.isfinite(g)).sum()
            norm = ref.norm().item()
            err = (g - ref).norm().item() / norm if norm > 0 else (g - ref).norm().item()
            bound = tol + SUM_SLACK * sums[name + "_abs"].norm().item() / max(norm, 1e-300)
            setattr(c, f"{name}_err", err)
            setattr(c, f"{name}_bound", bound)
            ok = ok and err < bound  # NaN compares False
        c.nonfinite = int(bad.item())
        c.passed = bool(ok and c.nonfinite == 0)
        return c

    def record_check(self, row: Row, impl: str, c: GradCheck) -> None:
        row.checks[impl] = c
        if impl != "normjit":
            row.impl(impl).passed = c.passed
        row.impl(impl).rel_err = c.dx_err
        self.log(f"  {impl:8s} {c.text()}{'' if c.passed else '  ** FAIL **'}"
                 + (f" ({c.nonfinite} non-finite)" if c.nonfinite else ""))
        if not c.passed and impl in ("eager", "compile"):
            self.rep.warnings.append(f"{row.problem.key}: PyTorch {impl}'s gradients are off the "
                                     f"float64 reference ({c.text()})")

    # -- one problem ----------------------------------------------------------------------

    def run(self, p: Problem) -> Row:
        row = Row(p, backward_bytes(p), spec=backward_spec(p), rotation=self.rotation(p))
        return self.run_row(row, lambda: self._run(p, row))

    def _run(self, p: Problem, row: Row) -> None:
        if p.residual:
            self._run_add(p, row)
            return
        torch = self.torch
        n = row.rotation
        first_copy = self.measure_copy(row.bytes_moved, n)
        xs = [self.random(p.shape, p.dtype, p.dists[0]) for _ in range(n)]
        dys = [self.random(p.shape, p.dtype, DY) for _ in range(n)]
        if p.layout == "nhwc":  # channels last: [N, *spatial, C] in memory
            xs, dys = ([t.movedim(1, -1).contiguous().movedim(-1, 1) for t in ts]
                       for ts in (xs, dys))
        weight = bias = None
        param = p.param_dtype or p.dtype
        if p.affine in ("weight", "both"):
            # The weight used is near 1 either way (Gemma's own weights are near 0: 1 + w).
            weight = self.random(p.param_shape, param,
                                 ct.InputDist(1.0 - p.weight_offset, 0.5))
        if p.affine == "both":
            bias = self.random(p.param_shape, param, ct.InputDist(0.0, 1.0))

        with torch.no_grad():
            self.run_normjit(p, row, xs, dys, weight, bias)
        self.free()
        self.run_autograd(p, row, "eager", xs, dys, weight, bias)
        if self.args.skip_compile:
            row.compile.status = "skipped"
        else:
            self.run_autograd(p, row, "compile", xs, dys, weight, bias)
        if not self.liger:
            row.liger.status, row.liger.message = "absent", self.rep.env["Liger-Kernel"]
        elif liger_support(p):
            row.liger.status, row.liger.message = "n/a", liger_support(p)
        else:
            self.run_autograd(p, row, "liger", xs, dys, weight, bias)
        del xs, dys, weight, bias
        self.free()
        row.copy = faster_copy(first_copy, self.measure_copy(row.bytes_moved, n))

    def run_normjit(self, p: Problem, row: Row, xs: list, dys: list, weight, bias=None) -> None:
        """normjit's backward kernel, checked and timed; bias (read only) goes to a spec with
        an activation (z = xhat * w + b), to no other."""
        torch = self.torch
        m = row.normjit
        t0 = time.perf_counter()
        try:
            kernel = self.nj.prepare(row.spec)
        except _capi.NormjitError as e:
            unsupported = isinstance(e, (_capi.UnsupportedError, _capi.InvalidArgumentError))
            m.status, m.message = ("n/a" if unsupported else "error"), e.message or str(e)
            self.log(f"  normjit  {m.status}: {m.message}")
            return
        m.first_call_s = time.perf_counter() - t0
        self.log(f"  normjit  prepared in {m.first_call_s * 1e3:.0f} ms: {row.spec}")
        stats = [self.statistics(p, x) for x in xs]
        # One dx, as autograd's allocations give the peers.
        dxs = [torch.empty_like(xs[0])] * len(xs)
        dw = torch.empty_like(weight) if weight is not None else None
        db = torch.empty_like(weight) if p.affine == "both" else None
        ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
        b = bias if p.activation else None
        calls = [self.nj.bind(kernel, {"x": ptr(xs[i]), "dy": ptr(dys[i]), "mean": ptr(stats[i][0]),
                                       "rstd": ptr(stats[i][1]), "weight": ptr(weight),
                                       "dx": ptr(dxs[i]), "dweight": ptr(dw), "dbias": ptr(db),
                                       **({"bias": ptr(b)} if b is not None else {})},
                              launch_batch(p), self.stream)
                 for i in range(len(xs))]
        for t in (dxs[0], dw, db):  # poison: every element must be written
            if t is not None:
                t.fill_(math.nan)
        try:
            calls[0]()
            self.sync()
        except _capi.NormjitError as e:
            unsupported = isinstance(e, (_capi.UnsupportedError, _capi.InvalidArgumentError))
            m.status, m.message = ("n/a" if unsupported else "error"), e.message or str(e)
            self.log(f"  normjit  {m.status}: {m.message}")
            return
        m.status = "ok"
        self.record_check(row, "normjit",
                          self.check(p, xs[0], dys[0], weight, (dxs[0], dw, db), bias))
        self.timed(row.impl("normjit"), "normjit", lambda i: calls[i % len(calls)]())

    def forward_of(self, p: Problem, impl: str, weight, bias) -> tuple[Callable, list]:
        """(x -> y of impl, the parameters it differentiates): fresh parameters with
        normjit's values, requiring grad."""
        torch = self.torch
        if impl == "liger":
            fn = self.liger[LIGER_FUNCTIONS[p.op]]
            w = weight.detach().clone().requires_grad_() if weight is not None else None
            b = bias.detach().clone().requires_grad_() if bias is not None else None
            params = [t for t in (w, b) if t is not None]
            if p.op == "groupnorm":
                return (lambda x: fn.apply(x, w, b, p.shape[1], p.groups, p.eps)), params
            if p.layout == "nhwc":  # rows of C: x's channels-last memory, no copy
                c = p.shape[1]
                return (lambda x: fn.apply(x.movedim(1, -1).reshape(-1, c), w, b, p.eps)
                        .reshape(x.movedim(1, -1).shape).movedim(-1, 1)), params
            row = math.prod(p.param_shape)
            wf = w.reshape(row) if w is not None else None
            if p.op == "rmsnorm":
                return (lambda x: fn.apply(x.reshape(-1, row), wf, p.eps, p.weight_offset,
                                           "gemma", False, None)), params
            bf = b.reshape(row)
            return (lambda x: fn.apply(x.reshape(-1, row), wf, bf, p.eps)), params
        saved = ct.DEVICE
        ct.DEVICE = self.dev
        try:
            if p.op == "rmsnorm" and p.normalized_dims == 0:
                w = weight.detach().clone().requires_grad_() if weight is not None else None
                module = ct.make_channel_rmsnorm(p.eps, w)
            elif p.op == "layernorm" and p.normalized_dims == 0:
                module = layer_norm_2d(p, weight, bias)
            elif p.weight_offset:
                module = gemma_rms_norm(p, weight)
            else:
                module = ct.make_module(p, weight, bias)
        finally:
            ct.DEVICE = saved
        module.requires_grad_(True)
        params = [t for t in (getattr(module, "weight", None), getattr(module, "bias", None))
                  if t is not None]
        if p.activation:  # y = act(norm(x)): the module's output through F.silu / F.gelu
            module = then_activation(module, activation_function(p.activation))
        if impl == "compile":
            import torch._dynamo
            import torch._functorch.config
            torch._dynamo.reset()  # fresh cache: no recompile limit, no dynamic shapes
            torch._functorch.config.donated_buffer = False
            return torch.compile(module, dynamic=False, backend=self.args.compile_backend), params
        return module, params

    def run_autograd(self, p: Problem, row: Row, impl: str, xs: list, dys: list, weight,
                     bias) -> None:
        """impl's backward: torch.autograd.grad of its output, graphs kept (retain_graph) and
        rotated like the inputs."""
        torch = self.torch
        m = row.impl(impl)
        try:
            forward, params = self.forward_of(p, impl, weight, bias)
        except Exception as e:  # noqa: BLE001
            m.status, m.message = "failed", ct.short_error(e)
            self.log(f"  {impl:8s} failed: {m.message}")
            return
        leaves = [x.detach().requires_grad_() for x in xs]
        ys: list = []

        def grad(i: int):
            y, dy = ys[i % len(ys)], dys[i % len(ys)]
            return torch.autograd.grad(y, [leaves[i % len(ys)]] + params,
                                       dy.reshape(y.shape), retain_graph=True)

        def first():
            ys.append(forward(leaves[0]))
            return grad(0)
        grads = self.first_call(m, impl, first)
        if grads is None:
            return
        if m.first_call_s > 0.5:
            self.log(f"  {impl:8s} first forward and backward in {m.first_call_s:.1f} s")
        dx = grads[0]
        dw = grads[1] if weight is not None else None
        db = grads[2] if bias is not None else None
        self.record_check(row, impl, self.check(p, xs[0], dys[0], weight, (dx, dw, db), bias))
        del grads, dx, dw, db
        self.time_graphs(row, impl, lambda: ys.extend(forward(x) for x in leaves[1:]), grad)
        ys = leaves = forward = params = None  # the graphs freed (the closures' too)
        self.free()

    def time_graphs(self, row: Row, impl: str, build: Callable[[], None],
                    grad: Callable[[int], Any]) -> None:
        """build() makes the graphs of the other rotating sets (grad mode on), then grad is
        timed; a failure of build marks impl failed."""
        m = row.impl(impl)
        try:
            with self.torch.enable_grad():
                build()
        except Exception as e:  # noqa: BLE001
            m.status, m.message = "failed", ct.short_error(e)
            self.log(f"  {impl:8s} failed: {m.message}")
            return
        finally:
            self.sync()
        self.timed(row.impl(impl), impl, grad)

    # -- add + RMSNorm: every implementation through autograd --------------------------------

    def _run_add(self, p: Problem, row: Row) -> None:
        n = row.rotation
        first_copy = self.measure_copy(row.bytes_moved, n)
        xs = [self.random(p.shape, p.dtype, p.dists[0]) for _ in range(n)]
        rs = [self.random(p.shape, p.residual, p.dists[0]) for _ in range(n)]
        dys = [self.random(p.shape, p.dtype, DY) for _ in range(n)]
        dhs = [self.random(p.shape, p.residual, DY) for _ in range(n)]
        weight = self.random(p.param_shape, p.param_dtype or p.dtype,
                             ct.InputDist(1.0 - p.weight_offset, 0.5))
        for impl in ("normjit", "eager", "compile", "liger"):
            m = row.impl(impl)
            if impl == "compile" and self.args.skip_compile:
                m.status = "skipped"
            elif impl == "liger" and not self.liger_add:
                m.status, m.message = "absent", self.liger_add_why
            else:
                self.run_add_autograd(p, row, impl, xs, rs, dys, dhs, weight)
            self.free()
        del xs, rs, dys, dhs, weight
        self.free()
        row.copy = faster_copy(first_copy, self.measure_copy(row.bytes_moved, n))

    def add_forward_of(self, p: Problem, impl: str, weight) -> tuple[Callable, Any]:
        """((x, residual) -> (y, h) of impl, the weight it differentiates: a fresh copy of
        weight that requires grad)."""
        torch = self.torch
        w = weight.detach().clone().requires_grad_()
        shape, eps = p.param_shape, p.eps
        if impl == "normjit":
            import normjit.torch as njt
            return (lambda x, r: njt.add_rms_norm(x, r, shape, w, eps)), w
        if impl == "liger":
            fn, row = self.liger_add[LIGER_ADD], math.prod(shape)
            return (lambda x, r: fn.apply(x.reshape(-1, row), r.reshape(-1, row), w, eps, 0.0,
                                          "gemma", False)), w

        def expression(x, r):  # normjit.torch.add_rms_norm's docstring
            h = (x.float() + r.float()).to(r.dtype)
            return torch.nn.functional.rms_norm(h, shape, w, eps), h
        if impl == "compile":
            import torch._dynamo
            import torch._functorch.config
            torch._dynamo.reset()
            torch._functorch.config.donated_buffer = False
            return torch.compile(expression, dynamic=False,
                                 backend=self.args.compile_backend), w
        return expression, w

    def run_add_autograd(self, p: Problem, row: Row, impl: str, xs: list, rs: list, dys: list,
                         dhs: list, weight) -> None:
        """impl's backward of (y, h): torch.autograd.grad([y, h], [x, residual, weight],
        [dy, dh]), graphs kept and rotated like the inputs. normjit n/a where its call fell
        back to PyTorch (the warning's text)."""
        torch = self.torch
        m = row.impl(impl)
        try:
            forward, w = self.add_forward_of(p, impl, weight)
        except Exception as e:  # noqa: BLE001
            m.status, m.message = "failed", ct.short_error(e)
            self.log(f"  {impl:8s} failed: {m.message}")
            return
        xl = [x.detach().requires_grad_() for x in xs]
        rl = [r.detach().requires_grad_() for r in rs]
        outs: list = []

        def grad(i: int):
            k = i % len(outs)
            y, h = outs[k]
            return torch.autograd.grad([y, h], [xl[k], rl[k], w],
                                       [dys[k].reshape(y.shape), dhs[k].reshape(h.shape)],
                                       retain_graph=True)

        def first():
            outs.append(forward(xl[0], rl[0]))
            return grad(0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            grads = self.first_call(m, impl, first)
        fell_back = [str(c.message) for c in caught
                     if c.category.__name__ == "NormjitFallbackWarning"]
        if grads is None:
            return
        if impl == "normjit" and fell_back:
            m.status, m.message = "n/a", "it fell back: " + fell_back[0]
            self.log(f"  normjit  n/a: {m.message}")
            return
        h = (xs[0].float() + rs[0].float()).to(rs[0].dtype)
        dx, dr, dw = grads
        c = self.check(p, h, dys[0], weight, (dx.double() - dhs[0].double(), dw, None))
        cr = self.check(p, h, dys[0], weight, (dr.double() - dhs[0].double(), None, None))
        c.dx_err = max(c.dx_err, cr.dx_err)  # the worse of x's and residual's gradients
        c.passed = c.passed and cr.passed
        c.nonfinite += cr.nonfinite
        self.record_check(row, impl, c)
        del grads, dx, dr, dw, h
        self.time_graphs(row, impl,
                         lambda: outs.extend(forward(x, r) for x, r in zip(xl[1:], rl[1:])), grad)
        outs = xl = rl = forward = w = None  # the graphs freed (the closures' too)
        self.free()

    def measure_copy(self, nbytes: int, sets: int) -> ct.Measurement:
        m = ct.Measurement()
        try:
            copy = ct.own_copy(nbytes, sets, self.dev)
            m.times_ms = self.time_calls(copy)
            m.ms, m.status = statistics.median(m.times_ms), "ok"
            del copy
        except Exception as e:  # noqa: BLE001 - the kernels' numbers stand without it
            m.status, m.message = "failed", ct.short_error(e)
        self.free()
        return m


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Time normjit's backward kernels against PyTorch eager autograd, "
                    "torch.compile's backward, Liger-Kernel and a copy of their bytes; write "
                    "docs/performance.md's backward section and a JSON file.")
    ap.add_argument("--build", default="build", help="build directory (libnormjit.so)")
    ap.add_argument("--lib", default=None,
                    help="libnormjit.so (default: $NORMJIT_LIBRARY, else BUILD/libnormjit.so)")
    ap.add_argument("--only", default=None,
                    help="comma-separated groups (" + ", ".join(GROUP_TITLES) + "), ops "
                         "or substrings of problem names")
    ap.add_argument("--dtypes", default="f32,bf16", help="comma-separated dtypes (f32,bf16)")
    ap.add_argument("--quick", action="store_true",
                    help="the seeds and hidden 4096 at 4096 tokens; 10 timed calls")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (20; --quick 10)")
    ct.add_run_args(ap, "problems", 540.0)
    ap.add_argument("--compile-backend", default="inductor", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", default=None, help="normjit cache directory")
    ct.add_output_args(ap, "backward", "problems")
    return ct.finish_bench_args(ap, ap.parse_args(argv), "backward")


def write_outputs(rep: Report, args: argparse.Namespace) -> None:
    write_section(rep, Path(args.doc), Path(args.section_out) if args.section_out else None)
    write_json(rep, Path(args.json_out))


def run(args: argparse.Namespace, problems: list[Problem], command: str, nj: Any = None,
        cuda: bool = True) -> int:
    """Measures problems (compare_torch's taken as backward problems without variant axes);
    nj (a stand-in of CApi) and cuda=False run the flow on the CPU."""
    problems = [p if isinstance(p, Problem) else as_backward(p) for p in problems]
    try:
        import torch
    except ImportError as e:
        print(f"bench_backward: PyTorch is needed for the measurements ({e}); --list, "
              "--selftest and --from-json work without it", file=sys.stderr)
        return 2
    if cuda:
        if not torch.cuda.is_available():
            print("bench_backward: no CUDA device visible to PyTorch", file=sys.stderr)
            return 2
        # normjit.torch (the add + norm rows) loads the library measured, into the same cache.
        os.environ.setdefault("NORMJIT_LIBRARY", str(args.lib))
        if args.cache_dir:
            os.environ.setdefault("NORMJIT_CACHE_DIR", args.cache_dir)
        # normjit launches in the context current on the thread: PyTorch's primary context.
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        try:
            nj = CApi(Path(args.lib), args.cache_dir)
        except (OSError, ImportError, _capi.NormjitError) as e:
            print(f"bench_backward: cannot use {args.lib}: {e}", file=sys.stderr)
            return 2
        env, l2 = ct.collect_environment(Path(args.lib))
    else:
        env = {"device": "CPU (a stand-in for normjit; wall-clock times)",
               "PyTorch": torch.__version__}
        l2 = 1 << 16
    rep = Report(env=env, command=command,
                 date_utc=datetime.datetime.now(datetime.timezone.utc).strftime(
                     "%Y-%m-%d %H:%M UTC"),
                 settings={"copy_grain": ct.COPY_GRAIN, "reps": args.reps,
                           "warmup": args.warmup, "seed": args.seed,
                           "quick": args.quick, "only": args.only, "dtypes": args.dtype_list,
                           "budget_s": args.budget_s, "skip_compile": args.skip_compile},
                 planned=len(problems))
    try:
        bench = Bench(args, nj, rep, l2, cuda)
        for k, v in rep.env.items():
            print(f"{k}: {v}")
        if cuda:
            rep.copy_gbps, _ = ct.measure_copy(args.reps, args.warmup)
            print(f"copy bandwidth (2 GiB): {rep.copy_gbps:.0f} GB/s", flush=True)
        bench.started = time.perf_counter()
        for i, p in enumerate(problems, 1):
            print(f"[{i}/{len(problems)}] {p.key} {ct.shape_text(p.shape)} {p.describe()}, "
                  f"{backward_bytes(p) / 1e6:.1f} MB moved", flush=True)
            rep.rows.append(bench.run(p))
            print(f"  ({time.perf_counter() - bench.started:.0f} s so far)", flush=True)
            write_outputs(rep, args)
        write_outputs(rep, args)
    finally:
        if cuda:
            nj.close()
    print()
    print(render_summary(rep))
    print(f"\nwrote {args.doc}, {args.json_out}"
          + (f", {args.section_out}" if args.section_out else ""))
    bad = [r for r in rep.rows
           if r.error or r.passed is False or r.normjit.status not in ("ok", "n/a", "not run")]
    return 1 if bad else 0


def select(args: argparse.Namespace) -> list[Problem]:
    problems = ct.select_problems(default_problems(), args.only, args.dtype_list, args.quick)
    for p in problems:
        p.validate()
    return problems


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.selftest:
        return selftest()
    if args.from_json:
        return ct.render_from_json(args, "backward", report_from_json, merge_reports,
                                   write_section, write_json)
    problems = select(args)
    if args.list:
        for p in problems:
            print(f"{p.key:36s} {ct.shape_text(p.shape):22s} {p.describe():16s} "
                  f"{backward_bytes(p) / 1e6:10.1f} MB  {backward_spec(p)}")
        return 0
    if not problems:
        print("bench_backward: no problem selected", file=sys.stderr)
        return 2
    argv_text = sys.argv if argv is None else ["tools/bench_backward.py", *argv]
    return run(args, problems, shlex.join(["python3", *argv_text]))


# ---------------------------------------------------------------------------------------
# Self-test (no GPU, no torch)
# ---------------------------------------------------------------------------------------

def fake_report() -> Report:
    def ok(ms, passed=None):
        return ct.Measurement(status="ok", ms=ms, times_ms=[ms] * 3, passed=passed)
    good = lambda **kw: GradCheck(**{"dx_err": 2e-7, "dw_err": None, "db_err": None,  # noqa: E731
                                     "nonfinite": 0, "passed": True, **kw})
    ps = {p.key: p for p in default_problems()}
    rows = []
    p = ps["seed rmsnorm f32"]
    rows.append(Row(p, backward_bytes(p), spec=backward_spec(p),
                    normjit=ct.Measurement(status="n/a", message="backward=true is not yet "
                                           "supported for the channel form of rmsnorm"),
                    eager=ok(40.0, True), compile=ok(16.0, True),
                    liger=ct.Measurement(status="n/a", message=liger_support(p)), copy=ok(14.9),
                    checks={"eager": good(), "compile": good()}))
    p = ps["seed layernorm bf16"]
    rows.append(Row(p, backward_bytes(p), spec=backward_spec(p), normjit=ok(0.30),
                    eager=ok(0.90, True), compile=ok(0.35, True),
                    liger=ct.Measurement(status="n/a", message=liger_support(p)), copy=ok(0.27),
                    checks={"normjit": good(dx_err=3e-3, dw_err=2e-3, db_err=1e-3, dw_bound=1e-2,
                                            db_bound=1e-2),
                            "eager": good(), "compile": good()}))
    p = ps["llm rmsnorm h4096 t1024 bf16"]
    rows.append(Row(p, backward_bytes(p), spec=backward_spec(p), rotation=8, normjit=ok(0.012),
                    eager=ok(0.040, True), compile=ok(0.015, True), liger=ok(0.011, False),
                    copy=ok(0.010),
                    checks={"normjit": good(dx_err=3e-3, dw_err=4e-3, dw_bound=1.1e-2),
                            "liger": good(dx_err=3e-3, dw_err=0.5, dw_bound=1.1e-2,
                                          passed=False)}))
    p = ps["llm layernorm h16384 t16384 bf16"]
    rows.append(Row(p, backward_bytes(p), spec=backward_spec(p), normjit=ok(1.10),
                    eager=ok(2.0, True), compile=ok(1.0, True), liger=ok(1.3, True),
                    copy=ok(1.0),
                    checks={"normjit": GradCheck(dx_err=math.nan, dw_err=1e-3, db_err=1e-3,
                                                 dw_bound=1e-2, db_bound=1e-2, nonfinite=5)}))
    p = ps["llm layernorm h8192 t1024 bf16"]
    rows.append(Row(p, backward_bytes(p), error="OutOfMemoryError: x"))
    p = ps["llm rmsnorm h8192 t4096 bf16"]
    rows.append(Row(p, backward_bytes(p), skipped="the time budget (--budget-s 540) ran out"))
    p = ps["gemma rmsnorm h2304 t4096 bf16"]
    rows.append(Row(p, backward_bytes(p), spec=backward_spec(p), normjit=ok(0.020),
                    eager=ok(0.070, True), compile=ok(0.024, True), liger=ok(0.026, True),
                    copy=ok(0.018), checks={"normjit": good(dx_err=3e-3, dw_err=2e-6,
                                                            dw_bound=1e-2)}))
    return Report(env={"device": "FakeGPU (132 SMs)", "PyTorch": "2.11.0", "Liger-Kernel": "0.8.5"},
                  command="python3 tools/bench_backward.py --selftest",
                  date_utc="2026-01-01 00:00 UTC", settings={"reps": 20, "warmup": 3, "seed": 7},
                  copy_gbps=3000.0, rows=rows, planned=8,
                  warnings=["seed rmsnorm f32: a warning"])


def col_of(header: str) -> int:
    return HEADERS.index(header)


def selftest() -> int:
    problems = default_problems()
    for p in problems:
        p.validate()
    keys = [p.key for p in problems]
    assert len(keys) == len(set(keys)) == 6 + 18 + 8 + 6 + 4 + 4 + 8 + 10, keys
    by = {p.key: p for p in problems}
    rms, ln, gn = by["seed rmsnorm f32"], by["seed layernorm bf16"], by["seed groupnorm f32"]
    n = 112 * 64 * 512 * 512
    assert stats_shape(rms) == (112, 512, 512) and launch_batch(rms) == 112
    assert backward_bytes(rms) == 3 * n * 4 + 112 * 512 * 512 * 4
    assert stats_shape(gn) == (112, 8) and launch_batch(gn) == 112
    assert backward_bytes(gn) == 3 * n * 4 + 4 * 64 * 4 + 2 * 112 * 8 * 4
    m = 16 * 64 * 256 * 256
    assert stats_shape(ln) == (16,) and launch_batch(ln) == 16
    assert backward_bytes(ln) == 3 * m * 2 + 4 * (m // 16) * 2 + 2 * 16 * 4
    llm = by["llm rmsnorm h16384 t4096 bf16"]
    assert stats_shape(llm) == (4096,) and launch_batch(llm) == 4096
    assert backward_bytes(llm) == 3 * 4096 * 16384 * 2 + 2 * 16384 * 2 + 4096 * 4
    assert backward_spec(llm) == ("op=rmsnorm shape=4096,16384 dtype=bf16 normalized_dims=1 "
                                  "affine=weight eps=1e-06 backward=true")
    assert backward_spec(gn) == ("op=groupnorm shape=112,64,512,512 dtype=f32 groups=8 "
                                 "affine=both eps=1e-05 backward=true")
    assert backward_spec(rms).endswith("normalized_dims=0 affine=none eps=1e-05 backward=true")
    assert "LigerRMSNormFunction normalizes the last dim" in liger_support(rms)
    assert "65536" in liger_support(ln) and liger_support(gn) == ""
    assert liger_support(by["llm layernorm h16384 t1024 bf16"]) == ""
    # Selection.
    a = parse_args(["--only", "llm", "--quick"])
    assert [p.key for p in select(a)] == ["llm rmsnorm h4096 t4096 bf16",
                                          "llm layernorm h4096 t4096 bf16"]
    assert a.reps == 10 and a.budget_s == 540
    assert len(select(parse_args(["--only", "seeds"]))) == 6
    assert {p.dtype for p in select(parse_args(["--dtypes", "f32"]))} == {"f32"}
    assert len(select(parse_args(["--only", "h8192"]))) == 6 + 2
    tr = select(parse_args(["--only", "transformer"]))
    assert [(p.name, p.dtype, p.shape) for p in tr[:2]] == [
        ("vit-b layernorm", "f32", (12608, 768)), ("vit-b layernorm", "bf16", (12608, 768))], tr
    assert len(tr) == 8 and {p.affine for p in tr} == {"both"}
    assert backward_spec(tr[1]) == ("op=layernorm shape=12608,768 dtype=bf16 normalized_dims=1 "
                                    "affine=both eps=1e-06 backward=true"), backward_spec(tr[1])
    gemma = select(parse_args(["--only", "gemma"]))
    assert len(gemma) == 6 and not select(parse_args(["--only", "gemma", "--quick"]))
    g = by["gemma rmsnorm h3584 t4096 bf16"]
    assert backward_spec(g) == ("op=rmsnorm shape=4096,3584 dtype=bf16 normalized_dims=1 "
                                "affine=weight eps=1e-06 param_dtype=f32 weight_offset=1.0 "
                                "backward=true"), backward_spec(g)
    assert backward_bytes(g) == 3 * 4096 * 3584 * 2 + 2 * 3584 * 4 + 4096 * 4
    assert g.describe() == "last dim, w (1 + w), f32 w" and liger_support(g) == ""
    assert as_backward(ct.default_problems()[0]).weight_offset == 0.0
    add = by["add rmsnorm h4096 t16384 bf16"]
    assert [q.key for q in select(parse_args(["--only", "add"]))][:1] == [
        "add rmsnorm h4096 t4096 bf16"] and len(select(parse_args(["--only", "add"]))) == 4
    assert backward_spec(add) == ("op=rmsnorm shape=16384,4096 dtype=bf16 normalized_dims=1 "
                                  "affine=weight eps=1e-06 residual=bf16 backward=true"), \
        backward_spec(add)
    assert backward_bytes(add) == 4 * 16384 * 4096 * 2 + 2 * 4096 * 2 + 16384 * 4
    assert add.describe() == "h = x + r (bf16), last dim, w", add.describe()
    cnx = select(parse_args(["--only", "convnext"]))
    assert [q.shape for q in cnx] == [(32, 96, 56, 56), (32, 192, 28, 28), (32, 384, 14, 14),
                                      (32, 768, 7, 7)], cnx
    assert backward_spec(cnx[3]) == ("op=layernorm shape=32,768,7,7 dtype=bf16 normalized_dims=0 "
                                     "affine=both eps=1e-06 layout=nhwc backward=true")
    assert liger_support(cnx[0]) == "" and "channels last" in cnx[0].describe()
    assert backward_bytes(cnx[0]) == 3 * 32 * 96 * 56 * 56 * 2 + 4 * 96 * 2 + 2 * 32 * 56 * 56 * 4
    assert "transposed copy" in liger_support(dataclasses.replace(cnx[0], layout=""))
    sd = select(parse_args(["--only", "sd_nhwc"]))
    assert len(sd) == len(SD_NHWC_MAPS) and sd[0].shape == (2, 320, 64, 64), sd
    assert backward_spec(sd[0]) == ("op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 "
                                    "affine=both eps=1e-05 layout=nhwc backward=true"), \
        backward_spec(sd[0])
    assert "contiguous copy" in liger_support(sd[0]) and "channels last" in sd[0].describe()
    assert backward_bytes(sd[0]) == 3 * 2 * 320 * 64 * 64 * 2 + 4 * 320 * 2 + 2 * 2 * 32 * 4
    silu = select(parse_args(["--only", "sd_silu"]))
    assert [q.shape for q in silu] == [(n, c, hw, hw) for n, c, hw in
                                       SD_SILU_MAPS + SD_SILU_NHWC_MAPS], silu
    assert [q.layout for q in silu] == [""] * 8 + ["nhwc"] * 2
    assert {(q.activation, q.groups, q.affine, q.dtype) for q in silu} == {
        ("silu", 32, "both", "bf16")}
    assert backward_spec(silu[0]) == ("op=groupnorm shape=2,320,64,64 dtype=bf16 groups=32 "
                                      "affine=both eps=1e-05 activation=silu backward=true"), \
        backward_spec(silu[0])
    assert backward_spec(silu[-1]) == ("op=groupnorm shape=1,128,512,512 dtype=bf16 groups=32 "
                                       "affine=both eps=1e-05 activation=silu layout=nhwc "
                                       "backward=true"), backward_spec(silu[-1])
    assert silu[0].describe() == "G=32, w+b, then SiLU", silu[0].describe()
    assert silu[-1].describe() == "G=32, w+b, then SiLU, channels last", silu[-1].describe()
    # The same bytes as the norm's backward: the bias, which this kernel reads, is counted.
    assert backward_bytes(silu[0]) == backward_bytes(dataclasses.replace(silu[0], activation=""))
    assert all("has no activation" in liger_support(q) for q in silu), liger_support(silu[-1])
    assert {q.key for q in select(parse_args(["--only", "silu"]))} == {q.key for q in silu}
    for bad in (dict(activation="relu"), dict(activation="silu", residual="bf16", op="rmsnorm",
                                              groups=0, affine="weight", normalized_dims=1)):
        try:
            dataclasses.replace(silu[0], **bad).validate()
        except AssertionError:
            pass
        else:
            raise AssertionError(f"validated: {bad}")

    # Markdown of a fake run.
    rep = fake_report()
    md = render_section(rep)
    assert md.startswith(ct.BACKWARD_BEGIN) and md.endswith(ct.BACKWARD_END)
    tables = ct.check_tables(md)
    summ = [t for t in tables if t[0][0] == "problems"]
    assert len(summ) == 1 and len(summ[0]) == 4, summ
    assert summ[0][1][2:] == ["1 of 1", "90–90%", "1 of 1 pass, 1 n/a"], summ[0][1]
    assert summ[0][2][1:] == ["3", "1 of 2", "83–91%", "**1 FAIL**, 1 of 2 pass"], summ[0][2]
    assert summ[0][3][1:] == ["1", "1 of 1", "90–90%", "1 of 1 pass"], summ[0][3]
    per = [t for t in tables if t[0] == HEADERS]
    assert len(per) == 3
    r = per[2][1]
    assert r[col_of("reduced")] == "last dim, w (1 + w), f32 w" and r[col_of("vs best")] == "1.20x"
    col = {h: i for i, h in enumerate(HEADERS)}
    seeds = {r[col["problem"]] + " " + r[col["dtype"]]: r for r in per[0][1:]}
    r = seeds["seed rmsnorm f32"]
    assert r[col["normjit µs"]] == "n/a [1]" and r[col["Liger µs"]] == "n/a [2]", r
    assert r[col["best peer"]] == "compile" and r[col["vs best"]] == "—"
    assert r[col["check"]] == "n/a"
    assert r[col["eager µs"]] == "40000" and r[col["copy µs"]] == "14900"
    r = seeds["seed layernorm bf16"]
    assert r[col["normjit µs"]] == "300.0" and r[col["% of copy"]] == "90.0%", r
    assert r[col["vs compile"]] == "1.17x" and r[col["best peer"]] == "compile", r
    assert r[col["normjit rel. err"]] == "dx 3.0e-03, dw 2.0e-03, db 1.0e-03"
    assert r[col["check"]] == "pass"
    assert r[col["Liger µs"]] == "n/a [3]"
    llm_rows = per[1][1:]
    r = llm_rows[0]
    # Liger is the fastest, but its dweight is wrong: marked, and no best peer.
    assert r[col["Liger µs"]] == "11.0 **FAIL**" and r[col["best peer"]] == "compile", r
    assert r[col["vs best"]] == "1.25x" and r[col["MB moved"]] == "25.2", r
    r = llm_rows[1]
    assert r[col["check"]] == "**FAIL**" and r[col["normjit rel. err"]].startswith("dx NaN"), r
    assert r[col["best peer"]] == "compile" and r[col["vs best"]] == "0.91x"
    assert llm_rows[2][col["check"]] == "error" and llm_rows[3][col["check"]] == "skipped"
    for needle in ("- [1] normjit n/a: backward=true is not yet supported for the channel form",
                   "- [2] Liger n/a: LigerRMSNormFunction normalizes the last dim only",
                   "Incomplete run: 6 of 8 problems", "FakeGPU", "random seed 7",
                   "`python3 tools/bench_backward.py --selftest`", "3000 GB/s",
                   "OutOfMemoryError: x", "1 problems skipped", "Liger's gradients off float64",
                   "5 non-finite", "a warning", "retain_graph=True", "donated_buffer",
                   "normjit's specs: `op=rmsnorm shape=112,64,512,512 dtype=f32 normalized_dims=0"):
        assert needle in md, needle
    print(render_summary(rep))
    # A GroupNorm -> SiLU row: its group's table, Liger's reason, the method's note.
    p = silu[0]
    ok = ct.Measurement(status="ok", ms=0.02, times_ms=[0.02] * 3, passed=True)
    act = dataclasses.replace(rep, rows=[Row(p, backward_bytes(p), spec=backward_spec(p),
                                             normjit=ok, eager=ok, compile=ok, copy=ok,
                                             liger=ct.Measurement(status="n/a",
                                                                  message=liger_support(p)))],
                              planned=1, warnings=[])
    amd = render_section(act)
    for needle in (f"### {GROUP_TITLES['sd_silu']}", "- [1] Liger n/a: LigerGroupNormFunction "
                   "has no activation", "`activation=silu`", "F.silu(F.group_norm(x, 32, w, b, "
                   "eps))", "G=32, w+b, then SiLU", "activation=silu backward=true`"):
        assert needle in amd, needle
    assert "`activation=silu`" not in md
    assert report_from_json(json.loads(json.dumps(report_json(act)))).rows[0].problem == p

    # JSON round trip, the section in performance.md, merged runs.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "b.json"
        write_json(rep, path)
        data = json.loads(path.read_text())
        assert data["rows"][3]["checks"]["normjit"]["dx_err"] is None  # NaN as null
        assert data["rows"][1]["derived"]["best_peer"] == "compile"
        assert render_section(report_from_json(data)) == md, "re-rendered from JSON"
        doc = Path(tmp) / "docs" / "performance.md"
        base = "# normjit performance\n\n## Results\n\nx\n\n## Analysis per kernel\n\nnotes\n"
        doc.parent.mkdir(parents=True)
        doc.write_text(base)
        assert main(["--from-json", str(path), "--doc", str(doc)]) == 0
        text = doc.read_text()
        assert text.count(ct.BACKWARD_BEGIN) == 1 and text.endswith("notes\n")
        assert text.index(ct.BACKWARD_BEGIN) < text.index("## Analysis per kernel")
        # Kept when compare_torch.py regenerates the document.
        args = argparse.Namespace(notes=str(Path(tmp) / "notes.md"), plot=str(Path(tmp) / "p.png"),
                                  doc=str(doc), json_out=str(Path(tmp) / "perf.json"),
                                  host_cost=str(Path(tmp) / "host-cost.md"))
        ct.write_outputs(ct.fake_report(), args, final=False)
        assert md in doc.read_text() and "## Copy bandwidth" in doc.read_text()
        # A second run of the skipped problem, merged.
        second = fake_report()
        second.rows = [dataclasses.replace(second.rows[1], problem=rep.rows[5].problem)]
        second.command = "python3 tools/bench_backward.py --only h8192"
        second.settings = {**second.settings, "seed": 11}
        path2 = Path(tmp) / "b2.json"
        write_json(second, path2)
        merged_json = Path(tmp) / "merged.json"
        assert main(["--from-json", f"{path},{path2}", "--doc", str(doc),
                     "--json-out", str(merged_json)]) == 0
        merged = doc.read_text()
        again = Path(tmp) / "again.md"
        again.write_text("# doc\n")
        assert main(["--from-json", str(merged_json), "--doc", str(again)]) == 0
        assert ct.section_block(again.read_text(), ct.BACKWARD_BEGIN, ct.BACKWARD_END) == \
            ct.section_block(merged, ct.BACKWARD_BEGIN, ct.BACKWARD_END), "the merged JSON"
        assert "problems skipped" not in merged and merged.count(ct.BACKWARD_BEGIN) == 1
        assert "--selftest` ; `python3 tools/bench_backward.py --only h8192`" in merged
        assert "Incomplete run" not in ct.section_block(merged, ct.BACKWARD_BEGIN, ct.BACKWARD_END)
        # Each run's seed, once, merged again into the merged JSON.
        assert "random seed 7, 11." in merged, "the seeds of both runs"
        assert main(["--from-json", f"{merged_json},{path2}", "--doc", str(again)]) == 0
        assert "random seed 7, 11." in again.read_text()
    assert main(["--list", "--only", "seeds"]) == 0
    print("selftest: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
