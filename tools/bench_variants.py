#!/usr/bin/env python3
"""The variants of issue 18 on LLM shapes, on the GPU machine: normjit against the same PyTorch
expression run eagerly and under torch.compile, against Liger-Kernel and the hand-written CUDA
kernels of FlashInfer and vLLM (tools/kernel_peers.py) where they have the variant, and against a
device-to-device copy of the bytes the variant must move.

Variants (bf16 activations [tokens, hidden]):
  1 add-rmsnorm    h = x + r written over r, y = rmsnorm(h) * w over x (vLLM fused_add_rms_norm)
  2 f32-weight     rmsnorm of bf16 x with an f32 weight (param_dtype=f32), bf16 out
  3 fp8-out        rmsnorm * w * scale saturated to fp8 e4m3 (out_dtype=e4m3)
  4 gemma          Gemma's rmsnorm: (1 + w) in f32 (weight_offset=1)
  5 qk-norm        per-head rmsnorm over 128 of the q slice of a qkv tensor, two-level strides
  6 combined       residual in place + f32 weight + offset 1 + fp8 e4m3 out
  7 add-layernorm  h = x + r over r, y = layernorm(h) * w + b over x

normjit is called through its C API (python/normjit/_capi.py: normjit_prepare once per
(variant, hidden), normjit_launch_ex with the variant's launch arguments); the measuring method
is tools/compare_torch.py's (CUDA events, median, rotating buffers, a sleep kernel queued first),
whose helpers are imported. Every normjit result is checked against the PyTorch expression in
float64. The results go into docs/performance.md between the markers of
compare_torch.VARIANTS_BEGIN/END (compare_torch.py keeps that section when it regenerates the
file) and into a JSON file.

    python3 tools/bench_variants.py                       # the grid, about 5 minutes on an H100
    python3 tools/bench_variants.py --quick               # hidden 4096, tokens 16 and 16384
    python3 tools/bench_variants.py --only 1,qk-norm      # variants by number or name
    python3 tools/bench_variants.py --list                # the cases, no GPU needed
    python3 tools/bench_variants.py --selftest            # the non-GPU parts, no torch needed
    python3 tools/bench_variants.py --precompile sm_90    # every spec through NVRTC, no GPU
    python3 tools/bench_variants.py --from-json A.json,B.json  # re-render the section from
                                                          # runs (merged), no GPU needed
    python3 tools/bench_variants.py --cpu-check           # the whole flow on the CPU (torch
                                                          # standing in for normjit), tiny shapes

Exit status: 0 when every normjit result that ran passed its check, 1 when a check failed or a
normjit call errored, 2 when it could not start. Outputs are rewritten after every case, so a
run cut off by a time limit leaves what it measured; --budget-s skips the cases left once the
measuring has taken that long.

Only the standard library is imported at module level (torch where it is used), so that
--list, --selftest, --precompile and --from-json run without torch.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import inspect
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
# This checkout's binding of the C API first (an installed normjit package may be older than the
# library's launch arguments), then compare_torch.py's helpers (stdlib only at import).
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tools"))
import compare_torch as ct  # noqa: E402
import kernel_peers  # noqa: E402
from normjit import _capi  # noqa: E402

# Set by load_torch(): the PyTorch expressions below use them as globals, so that their source
# (shown in the document) is the code that runs.
torch: Any = None
F: Any = None

# ---------------------------------------------------------------------------------------
# The variants
# ---------------------------------------------------------------------------------------

# The inference engines whose hand-written kernels are peers (tools/kernel_peers.py), and the
# peers' titles: compare_torch.py's.
ENGINES = ct.ENGINES

EPS_RMS = 1e-6           # Llama, Gemma, Qwen
EPS_LN = 1e-5
FP8_E4M3_MAX = 448.0
FP8_SCALE = 128.0        # large enough that some outputs saturate
QK_HEADS, QK_KV_HEADS, QK_DIM = 32, 8, 128
QKV_WIDTH = (QK_HEADS + 2 * QK_KV_HEADS) * QK_DIM   # 6144: q, k, v of one token
Q_WIDTH = QK_HEADS * QK_DIM                          # 4096

TOKENS = (1, 16, 128, 1024, 4096, 16384)
HIDDENS = (2048, 4096, 8192, 16384)
SWEEP_HIDDENS = (4096, 8192)        # every token count
EDGE_TOKENS = (1, 1024, 16384)      # the other hidden sizes
QUICK_HIDDENS = (4096,)
QUICK_TOKENS = (16, 16384)
LARGE_TOKENS = 4096                 # "large token counts" of the goal

ELEMENT_BYTES = {"f32": 4, "bf16": 2, "e4m3": 1, "e5m2": 1}
# Output dtype -> (mantissa bits, exponent of the smallest normal): one step (ulp) at a value.
FORMATS = {"bf16": (7, -126), "e4m3": (3, -6), "e5m2": (2, -14)}
REL_TOLERANCE = {"bf16": 1e-2}      # gpu.md; fp8 outputs are held to one step instead
# bf16 steps are taken at no less than this fraction of the reference's rms, so that a value
# that cancels (layernorm's h - mean, y = n * w + b near 0) is judged by the row's scale.
BF16_STEP_FLOOR = 1e-3
REFERENCE_CHUNK_ELEMENTS = 1 << 25


def pt_add_rmsnorm(x, r, w):
    h = x + r
    hf = h.float()
    y = w * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS_RMS)).to(x.dtype)
    return y, h


def pt_rmsnorm_f32_weight(x, w32):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS_RMS) * w32).to(x.dtype)


def pt_rmsnorm_fp8(x, w, scale):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS_RMS) * w.float() * scale
    return y.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def pt_gemma_rmsnorm(x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS_RMS)
    return (y * (1.0 + w.float())).type_as(x)


def pt_qk_rmsnorm(q, w):  # q = qkv[:, :4096].view(T, 32, 128), not contiguous
    qf = q.float()
    return w * (qf * torch.rsqrt(qf.pow(2).mean(-1, keepdim=True) + EPS_RMS)).to(q.dtype)


def pt_combined(x, r, w32, scale):
    h = x + r
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS_RMS) * (1.0 + w32) * scale
    return y.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn), h


def pt_add_layernorm(x, r, w, b):
    h = x + r
    return F.layer_norm(h, (h.shape[-1],), w, b, EPS_LN), h


@dataclass(frozen=True)
class Variant:
    number: int
    key: str
    title: str
    op: str                        # rmsnorm | layernorm
    eps: float
    expression: Callable           # the PyTorch expression (eager, and compiled)
    launch: str                    # how normjit is launched, for the document
    affine: str = "weight"         # weight | both
    param_dtype: str = "bf16"      # weight and bias: bf16 | f32
    out_dtype: str = "bf16"        # bf16 | e4m3
    residual: bool = False         # h = x + r (bf16) normalized, written over r
    weight_offset: float = 0.0
    qk: bool = False               # rows of 128 of the q slice of [T, 6144], two-level strides
    y_over_x: bool = False         # normjit writes y into x
    liger: str = ""                # Liger-Kernel's forward of the variant, if it has one
    flashinfer: str = ""           # FlashInfer's function of the variant (kernel_peers.py)
    vllm: str = ""                 # vLLM's function of the variant (kernel_peers.py)

    def engine_function(self, engine: str) -> str:
        return getattr(self, engine)

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines (ENGINES) with a kernel of the variant."""
        return tuple(e for e in ENGINES if self.engine_function(e))

    @property
    def fp8(self) -> bool:
        return self.out_dtype in ("e4m3", "e5m2")

    @property
    def token_inputs(self) -> int:
        """The expression's leading arguments with a token dim (marked dynamic)."""
        return 2 if self.residual else 1

    def width(self, hidden: int) -> int:
        """Elements of x per token (the q heads for QK-norm)."""
        return Q_WIDTH if self.qk else hidden

    def row_length(self, hidden: int) -> int:
        return QK_DIM if self.qk else hidden

    def rows(self, tokens: int) -> int:
        """Rows normjit normalizes (its launch's batch)."""
        return tokens * QK_HEADS if self.qk else tokens

    def spec(self, hidden: int) -> str:
        """normjit's spec text; the kernel does not depend on the number of rows (shape 1, ...)."""
        shape = f"1,{QK_HEADS},{QK_DIM}" if self.qk else f"1,{hidden}"
        text = (f"op={self.op} shape={shape} dtype=bf16 normalized_dims=1 affine={self.affine} "
                f"eps={self.eps!r}")
        if self.param_dtype != "bf16":
            text += f" param_dtype={self.param_dtype}"
        if self.out_dtype != "bf16":
            text += f" out_dtype={self.out_dtype}"
        if self.residual:
            text += " residual=bf16"
        if self.weight_offset:
            text += f" weight_offset={self.weight_offset:g}"
        return text

    def bytes_moved(self, tokens: int, hidden: int) -> int:
        """x read, residual read and h written, y written, parameters read once."""
        n = tokens * self.width(hidden)
        moved = n * ELEMENT_BYTES["bf16"] + n * ELEMENT_BYTES[self.out_dtype]
        if self.residual:
            moved += 2 * n * ELEMENT_BYTES["bf16"]
        params = 2 if self.affine == "both" else 1
        return moved + params * self.row_length(hidden) * ELEMENT_BYTES[self.param_dtype]

    def bytes_text(self) -> str:
        parts = ["x read (bf16)"]
        if self.residual:
            parts += ["residual read and h written (bf16)"]
        parts += [f"y written ({self.out_dtype})",
                  ("weight and bias" if self.affine == "both" else "weight")
                  + f" read once ({self.param_dtype})"]
        return ", ".join(parts)

    def hidden_text(self, hidden: int) -> str:
        return f"{QK_HEADS}x{QK_DIM}" if self.qk else str(hidden)

    def source(self) -> str:
        return textwrap.dedent(inspect.getsource(self.expression)).strip("\n")


VARIANTS = (
    Variant(1, "add-rmsnorm",
            "add + RMSNorm, residual updated in place (vLLM's fused_add_rms_norm)",
            "rmsnorm", EPS_RMS, pt_add_rmsnorm,
            "y written over x, h over the residual (residual_out = residual)",
            residual=True, y_over_x=True, liger="fused_add_rms_norm",
            flashinfer="fused_add_rmsnorm", vllm="fused_add_rmsnorm"),
    Variant(2, "f32-weight",
            "RMSNorm of bf16 x with an f32 weight (param_dtype=f32), bf16 out",
            "rmsnorm", EPS_RMS, pt_rmsnorm_f32_weight, "y a separate bf16 tensor",
            param_dtype="f32", liger="rms_norm"),
    Variant(3, "fp8-out", "RMSNorm to fp8 e4m3 with a per-tensor scale (out_dtype=e4m3)",
            "rmsnorm", EPS_RMS, pt_rmsnorm_fp8,
            f"y a separate e4m3 tensor, scale a device pointer to one f32 ({FP8_SCALE:g})",
            out_dtype="e4m3", flashinfer="rmsnorm_quant", vllm="rmsnorm_quant"),
    Variant(4, "gemma", "Gemma RMSNorm (weight_offset=1: (1 + w) in f32, as transformers' "
                        "GemmaRMSNorm)",
            "rmsnorm", EPS_RMS, pt_gemma_rmsnorm, "y a separate bf16 tensor",
            weight_offset=1.0, liger="rms_norm", flashinfer="gemma_rmsnorm"),
    Variant(5, "qk-norm",
            f"per-head QK-norm: RMSNorm over {QK_DIM} of the q heads of a qkv tensor "
            f"[T, {QKV_WIDTH}] viewed [T, {QK_HEADS}, {QK_DIM}]",
            "rmsnorm", EPS_RMS, pt_qk_rmsnorm,
            f"x the q slice of qkv in place (batch T*{QK_HEADS}, inner_rows {QK_HEADS}, "
            f"x_strides [{QKV_WIDTH}, {QK_DIM}]), y a contiguous [T, {QK_HEADS}, {QK_DIM}] "
            "tensor (PyTorch's result is contiguous too)",
            qk=True, flashinfer="rmsnorm", vllm="rmsnorm"),
    Variant(6, "combined",
            "all combined: residual in place + f32 weight + weight_offset=1 + fp8 e4m3 out",
            "rmsnorm", EPS_RMS, pt_combined,
            "h over the residual, y a separate e4m3 tensor, scale a device pointer",
            residual=True, param_dtype="f32", weight_offset=1.0, out_dtype="e4m3"),
    Variant(7, "add-layernorm", "add + LayerNorm (weight and bias), residual updated in place",
            "layernorm", EPS_LN, pt_add_layernorm,
            "y written over x, h over the residual", affine="both", residual=True,
            y_over_x=True),
)
VARIANT_BY_KEY = {v.key: v for v in VARIANTS}


def in_place(v: Variant) -> Callable:
    """A residual variant's expression with its outputs written into its inputs, where
    normjit's in-place launch writes them: h over the residual, and y over x where the variant
    has y over x (else y is returned, a new tensor). torch.compile of it is the in-place peer
    (Inductor stores into the mutated inputs)."""
    expression, y_over_x = v.expression, v.y_over_x

    def expression_in_place(x, r, *rest):
        y, h = expression(x, r, *rest)
        r.copy_(h)
        if y_over_x:
            x.copy_(y)
            return None
        return y
    return expression_in_place


@dataclass(frozen=True)
class Case:
    variant: Variant
    hidden: int
    tokens: int

    @property
    def key(self) -> str:
        return f"{self.variant.number} {self.variant.key} h{self.hidden} t{self.tokens}"


def select_variants(only: Optional[str]) -> list[Variant]:
    """--only: comma-separated numbers (1-7), names, or substrings of names. A number selects
    its variant only (`3` is fp8-out, not also f32-weight, whose name holds a 3)."""
    tokens = [t.strip() for t in only.split(",") if t.strip()] if only else []
    if not tokens:
        return list(VARIANTS)
    return [v for v in VARIANTS
            if any(t == str(v.number) if t.isdigit() else t in v.key for t in tokens)]


def grid(variants: list[Variant], quick: bool, tokens: Optional[list[int]] = None,
         hiddens: Optional[list[int]] = None) -> list[list[Case]]:
    """Groups of cases, one per (variant, hidden): each is compiled once by torch.compile and
    prepared once by normjit. Within a group the largest token count comes first (dynamo
    compiles with the token dim dynamic on it; tokens = 1 is specialized and compiles again).
    Default: every token count at hidden 4096 and 8192, EDGE_TOKENS at 2048 and 16384; QK-norm
    (hidden 32 x 128) every token count. The groups at 4096 and 8192 of every variant come
    first."""
    groups = []
    for v in variants:
        hs = [Q_WIDTH] if v.qk else (hiddens or list(QUICK_HIDDENS if quick else HIDDENS))
        for h in hs:
            if tokens:
                ts = tokens
            elif quick:
                ts = list(QUICK_TOKENS)
            elif v.qk or h in SWEEP_HIDDENS:
                ts = list(TOKENS)
            else:
                ts = list(EDGE_TOKENS)
            groups.append([Case(v, h, t) for t in sorted(set(ts), reverse=True)])
    # Every variant at the swept hidden sizes first: a run cut short by --budget-s loses the
    # edge sizes of the last variants, not whole variants.
    return sorted(groups, key=lambda g: (not (g[0].variant.qk or g[0].hidden in SWEEP_HIDDENS)
                                         and not (quick or hiddens), g[0].variant.number))


def launch_fields(v: Variant, tokens: int, ptr: dict[str, Optional[int]]) -> dict[str, Any]:
    """normjit_launch_args of one case: ptr has x, y (None: y over x), r, w, b, scale (device
    addresses or None), and optionally h (h written there, not over the residual). Strides in
    elements; 0 is contiguous."""
    y_over_x = v.y_over_x and ptr.get("h") is None  # separate outputs: y where given
    f: dict[str, Any] = {
        "x": ptr["x"], "y": ptr["x"] if y_over_x else ptr["y"], "weight": ptr["w"],
        "bias": ptr.get("b") if v.affine == "both" else None, "batch": v.rows(tokens),
        "eps": v.eps, "inner_rows": 1, "x_strides": (0, 0), "y_strides": (0, 0),
        "residual": None, "residual_out": None, "scale": None,
    }
    if v.residual:
        f["residual"] = ptr["r"]
        f["residual_out"] = ptr.get("h") or ptr["r"]
    if v.fp8:
        f["scale"] = ptr["scale"]
    if v.qk:
        f["inner_rows"] = QK_HEADS
        f["x_strides"] = (QKV_WIDTH, QK_DIM)
    return f


def fill_launch_args(a: Any, fields: dict[str, Any]) -> None:
    """Sets the fields of an initialised _capi.LaunchArgs."""
    for k, val in fields.items():
        if k.endswith("_strides"):
            getattr(a, k)[0], getattr(a, k)[1] = val
        else:
            setattr(a, k, val)


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------

IMPLS = ("normjit", "eager", "compile", "liger", "flashinfer", "vllm", "copy", "separate",
         "compile_inplace")
PEERS = ct.PEERS


@dataclass
class Timing:
    status: str = "not run"    # ok | unsupported | error | failed | absent | skipped | not run
    message: str = ""
    us: Optional[float] = None                          # median of times_us
    times_us: list[float] = field(default_factory=list)
    first_call_s: Optional[float] = None                # compile: includes (re)compiling
    rel_err: Optional[float] = None                     # y against float64
    ulps: Optional[float] = None                        # largest |y - ref| in output steps


@dataclass
class Check:
    """normjit's outputs against float64 (and h against x + r in bf16)."""
    rel_err: Optional[float] = None
    max_abs_err: Optional[float] = None
    ulps: Optional[float] = None          # largest |y - ref| in steps of the output dtype at ref
    nonfinite: Optional[int] = None       # y elements NaN/inf (poisoned and not written)
    h_mismatches: Optional[int] = None    # residual variants: h elements != x + r in bf16
    # Residual variants, the launch with separate outputs (set 0's inputs after the in-place
    # check): h elements != x + r in bf16, and y elements left unwritten (poisoned) or NaN.
    separate_h_mismatches: Optional[int] = None
    separate_nonfinite: Optional[int] = None
    untouched: Optional[bool] = None      # QK-norm: qkv unchanged by the launch
    passed: bool = False


@dataclass
class Row:
    variant: str              # Variant.key
    tokens: int
    hidden: int
    bytes_moved: int
    rotation: int = 1
    normjit: Timing = field(default_factory=Timing)
    eager: Timing = field(default_factory=Timing)
    compile: Timing = field(default_factory=Timing)
    liger: Timing = field(default_factory=Timing)
    # The engines' CUDA kernels of the variant; residual variants in place, as their
    # fused_add_rmsnorm writes (y over x, h over the residual), against normjit in place.
    flashinfer: Timing = field(default_factory=Timing)
    vllm: Timing = field(default_factory=Timing)
    copy: Timing = field(default_factory=Timing)
    # Residual variants: normjit writing y and h to separate buffers, one each for every input
    # set as the peers' outputs are, instead of over x and the residual (which rotate).
    separate: Timing = field(default_factory=Timing)
    # Residual variants: the expression compiled with its outputs written into its inputs
    # (in_place), as normjit's in-place launch writes them, its inputs rotating alike.
    compile_inplace: Timing = field(default_factory=Timing)
    check: Optional[Check] = None
    error: str = ""           # the case could not be run
    skipped: str = ""         # not run (time budget)
    peak_gib: Optional[float] = None

    def impl(self, name: str) -> Timing:
        return getattr(self, name)

    def speedup(self, other: str, mine: str = "normjit") -> Optional[float]:
        """their time / normjit's (mine: "separate" for the separate outputs): above 1, normjit
        is faster."""
        a, b = self.impl(other).us, self.impl(mine).us
        return a / b if a and b else None

    @property
    def pct_copy(self) -> Optional[float]:
        """normjit's share of the copy bandwidth: copy time of the same bytes / normjit time."""
        return 100.0 * self.copy.us / self.normjit.us if self.copy.us and self.normjit.us else None

    @property
    def passed(self) -> Optional[bool]:
        return self.check.passed if self.check else None


@dataclass
class Report(ct.BenchReport):
    prepares: list[dict] = field(default_factory=list)   # normjit: spec, seconds, kind, status
    compiles: list[dict] = field(default_factory=list)   # torch.compile first calls over 0.5 s
    notes: list[str] = field(default_factory=list)


def row_from_dict(d: dict) -> Row:
    names = {f.name for f in dataclasses.fields(Row)}
    kw = {k: v for k, v in d.items() if k in names}
    for impl in IMPLS:
        kw[impl] = Timing(**kw.get(impl, {}))
    if kw.get("check"):
        c = dict(kw["check"])
        # JSON writes NaN as null; a check that ran measured these, so null was NaN.
        for k in ("rel_err", "max_abs_err", "ulps"):
            c[k] = math.nan if c.get(k) is None else c[k]
        kw["check"] = Check(**c)
    else:
        kw["check"] = None
    return Row(**kw)


def report_from_json(data: dict) -> Report:
    return ct.bench_report_from_json(data, row_from_dict, Report)


def merge_reports(reports: list[Report]) -> Report:
    """One report of several runs (e.g. a run cut short by --budget-s and a run of what it
    skipped; ct.merge_runs): a case measured in a later run replaces the earlier one's, a
    skipped case does not replace a measured one; the prepares and compiles of every run, the
    notes of the last."""
    rep = ct.merge_runs(reports, lambda row: (row.variant, row.hidden, row.tokens))
    if len(reports) > 1:
        rep.prepares = [x for r in reports for x in r.prepares]
        rep.compiles = [x for r in reports for x in r.compiles]
        rep.notes = list(reports[-1].notes)
    return rep


def report_json(rep: Report) -> dict:
    data = dataclasses.asdict(rep)
    for row, d in zip(rep.rows, data["rows"]):
        d["derived"] = {"pct_copy": row.pct_copy, "passed": row.passed,
                        **{f"speedup_vs_{i}": row.speedup(i) for i in PEERS}}
    data["variants"] = {v.key: {"number": v.number, "title": v.title,
                                "spec_hidden_4096": v.spec(4096), "pytorch": v.source()}
                        for v in VARIANTS}
    return data


def write_json(rep: Report, path: Path) -> None:
    ct.write_json_file(report_json(rep), path)


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------

def fmt_us(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def fmt_mb(nbytes: int) -> str:
    mb = nbytes / 1e6
    return f"{mb:.1f}" if mb >= 1 else f"{mb:.3g}"


def timing_cell(t: Timing) -> str:
    return fmt_us(t.us) if t.status == "ok" else t.status


def error_cell(row: Row) -> str:
    c = row.check
    if c is None:
        return "—"
    text = ct.fmt_err(c.rel_err)
    if c.ulps is not None:
        text += " / " + ("NaN" if math.isnan(c.ulps) else f"{c.ulps:.2f} ulp")
    return text


def check_cell(row: Row) -> str:
    return ct.check_text(row.skipped, row.error, None if row.check is None else row.check.passed,
                         row.normjit.status)


def table_headers(with_liger: bool, with_separate: bool = False,
                  engines: tuple[str, ...] = ()) -> list[str]:
    return (["tokens", "hidden", "MB moved", "normjit µs"]
            + (["separate µs"] if with_separate else []) + ["eager µs", "compile µs"]
            + (["compile in place µs"] if with_separate else [])
            + (["Liger µs"] if with_liger else [])
            + [f"{ct.PEER_TITLES[e]} µs" for e in engines]
            + ["copy µs", "% of copy", "vs compile"]
            + (["vs compile in place", "separate vs compile"] if with_separate else [])
            + [f"vs {ct.PEER_TITLES[e]}" for e in engines]
            + ["error (rel. / max)", "check"])


def table_row(v: Variant, row: Row, with_liger: bool, engines: tuple[str, ...] = ()) -> list[str]:
    cells = [str(row.tokens), v.hidden_text(row.hidden), fmt_mb(row.bytes_moved),
             timing_cell(row.normjit)]
    if v.residual:
        cells.append(timing_cell(row.separate))
    cells += [timing_cell(row.eager), timing_cell(row.compile)]
    if v.residual:
        cells.append(timing_cell(row.compile_inplace))
    if with_liger:
        cells.append(timing_cell(row.liger))
    cells += [timing_cell(row.impl(e)) for e in engines]
    cells += [timing_cell(row.copy), ct.fmt_num(row.pct_copy, ".0f", "%"),
              ct.fmt_num(row.speedup("compile"), ".2f", "x")]
    if v.residual:
        cells.append(ct.fmt_num(row.speedup("compile_inplace"), ".2f", "x"))
        cells.append(ct.fmt_num(row.speedup("compile", "separate"), ".2f", "x"))
    cells += [ct.fmt_num(row.speedup(e), ".2f", "x") for e in engines]
    return cells + [error_cell(row), check_cell(row)]


def variant_summary(rows: list[Row]) -> tuple[str, str, str]:
    """(rows at or ahead of compile, % of copy at large token counts, checks)"""
    both = [r for r in rows if r.normjit.us and r.compile.us]
    ahead = sum(1 for r in both if r.normjit.us <= r.compile.us)
    sep = [r for r in rows if r.separate.us and r.compile.us]
    sep_text = (f"; y and h separate: {sum(1 for r in sep if r.separate.us <= r.compile.us)} "
                f"of {len(sep)}" if sep else "")
    inp = [r for r in rows if r.normjit.us and r.compile_inplace.us]
    if inp:
        sep_text += (f"; in place against compile in place: "
                     f"{sum(1 for r in inp if r.normjit.us <= r.compile_inplace.us)} of {len(inp)}")
    pct = [r.pct_copy for r in rows if r.tokens >= LARGE_TOKENS and r.pct_copy is not None]
    pct_text = f"{min(pct):.0f}–{max(pct):.0f}%" if pct else "—"
    checked = [r for r in rows if r.check]
    failed = sum(1 for r in rows if r.check and not r.check.passed)
    errors = sum(1 for r in rows if r.error or r.normjit.status == "error")
    checks = (f"{len(checked) - failed} of {len(checked)} pass" if checked else "—")
    if failed:
        checks = f"**{failed} FAIL**, " + checks
    if errors:
        checks += f", {errors} error"
    return (f"{ahead} of {len(both)}{sep_text}" if both else "—"), pct_text, checks


def engine_summary(v: Variant, rows: list[Row], engine: str) -> str:
    """Rows where normjit is at or ahead of the engine's kernel (in place against in place)."""
    if not v.engine_function(engine):
        return "no such kernel"
    both = [r for r in rows if r.normjit.us and r.impl(engine).us]
    if not both:
        statuses = sorted({r.impl(engine).status for r in rows if not r.skipped})
        return ", ".join(statuses) or "—"
    return f"{sum(1 for r in both if r.normjit.us <= r.impl(engine).us)} of {len(both)}"


def render_section(rep: Report) -> str:
    out = ct.section_intro(ct.VARIANTS_BEGIN, "Variants (issue 18): normjit against the same "
                           "PyTorch expression", "tools/bench_variants.py",
                           "scripts/perf_variants.sh", rep, "cases")
    add = out.append
    s = rep.settings
    add("- Each variant on bf16 activations [tokens, hidden], against the PyTorch expression "
        "shown under its table run eagerly and under `torch.compile` (default mode; Inductor "
        "fuses the add, the norm and the casts into one kernel). The expression is compiled "
        "once per (variant, hidden) with the token dim dynamic (`torch._dynamo.mark_dynamic` "
        "on the largest token count); dynamo specializes tokens = 1 and compiles that once "
        "more; compile time is excluded. Liger-Kernel's forward is timed where it has the "
        "variant (it also writes rstd; its fused add writes h to a new tensor).")
    add("- FlashInfer and vLLM: the inference engines' hand-written CUDA RMSNorm kernels, "
        "built from their releases on PyPI (how: their rows above) and called through "
        "`tools/kernel_peers.py`. FlashInfer (include/flashinfer/norm.cuh: its CUDA norm "
        "module, the kernels sgl-kernel carries; `scripts/peers/build_flashinfer.sh`), launched "
        "by FlashInfer's own host code: `fused_add_rmsnorm`, `rmsnorm_quant` (it divides by "
        f"its scale: given 1 / {FP8_SCALE:g}), `gemma_rmsnorm`, and `rmsnorm` of 3-D x for "
        "QK-norm (its per-head kernel on the same strided q view); programmatic dependent "
        "launch on, as its API has it on sm_90; FlashInfer 0.7's Python API runs CuTe DSL "
        "kernels by default on sm_90, not measured here. vLLM (csrc/layernorm_kernels.cu and "
        "layernorm_quant_kernels.cu; `scripts/peers/build_vllm.sh`), launched as vLLM's host "
        "code launches them: `fused_add_rms_norm`, `rms_norm_static_fp8_quant` (it divides by "
        "its scale too) and `rms_norm` of 3-D x for QK-norm (a CTA per head). The fused "
        "adds run in place (y over x, h over the residual): `vs FlashInfer` and `vs vLLM` "
        "there are normjit in place against them; elsewhere their y is a new tensor. `vs "
        "FlashInfer` = FlashInfer µs / normjit µs, `vs vLLM` alike.")
    how = ct.rounds_text(s, "row", "eager, compile, compile in place, Liger, separate, normjit")
    add(f"- GPU times: CUDA events around each call, {how}; a sleep kernel queued first (the "
        "events bracket GPU work, not Python or dispatch). The inputs rotate through enough "
        "sets that the bytes "
        "touched between two uses of one set exceed 4x L2, and L2 is flushed (a read of "
        "2x L2) between the warm-up and the timed calls. A separate output y is one buffer "
        "for every set, as the peers' outputs are (PyTorch's caching allocator hands each "
        "call the block the previous one freed); in-place outputs (h into the residual) "
        "rotate with their inputs.")
    add("- `copy µs`: a device-to-device `copy_` moving the variant's bytes (half read, half "
        "written; " + ct.copy_rule_text(s) + "), its source "
        "rotated, its destination one buffer, timed the same way; "
        "`% of copy` = copy µs / normjit µs (the "
        "issue's goal: 90% or more at large token counts). `MB moved` = the variant's bytes: "
        "x read, the residual read and h written, y written, parameters read once.")
    add("- `vs compile` = compile µs / normjit µs (above 1: normjit is faster).")
    add("- normjit: each (variant, hidden) prepared once, from the spec of one row (as an "
        "inference engine prepares a shape class), and launched for every token count: "
        "`prepare` compiles the kernel of each batch class (few rows: at most 256 to 512 by the "
        "row's team, `normjit dump --emit plan` says; or more; the same bits), and every launch "
        "runs its own (before ed2cecc every launch here ran the "
        "few-rows kernel).")
    add("- Residual variants (in place, as vLLM's fused_add_rms_norm) also have `separate µs`: "
        "the same kernel writing y and h to separate buffers, one y and one h for every input set, "
        "as the peers' outputs are (they return new tensors). In place, y and h go over "
        "inputs that rotate, so a problem under 4x L2 pays the write-back of earlier calls' "
        "outputs that the peers' reused blocks do not; `separate vs compile` = compile µs / "
        "separate µs. Checked on one set: h bit-equal to x + r, every element of y written, "
        "the inputs unchanged.")
    add("- Residual variants also have `compile in place µs`: the expression compiled with its "
        "outputs written into its inputs where normjit's in-place launch writes them "
        "(`r.copy_(h)`, "
        "and `x.copy_(y)` where y goes over x; y returned where it is a separate tensor), "
        "compiled once per (variant, hidden) like the expression, its inputs rotating as "
        "normjit's do; `vs compile in place` = compile in place µs / normjit µs, the in-place "
        "launch against the in-place peer. Its outputs are checked against float64 on a copy "
        "of one set (a warning where they are off).")
    add("- `error`: normjit's y against the expression in float64 (with h = x + r rounded to "
        "bf16, as the variant defines it): ||y - ref|| / ||ref||, and the largest |y - ref| in "
        "steps (ulp) of the output dtype at ref (bf16 steps taken at no less than "
        f"{BF16_STEP_FLOOR:g} x the rms of ref; fp8: the reference scaled and clamped to "
        f"±{FP8_E4M3_MAX:g} first). Pass: every element written (outputs filled with NaN "
        "first), rel. err under 1e-2 for bf16 outputs, every element within 1 ulp (fp8: "
        "within one step), h bit-equal to x + r in bf16, and for QK-norm the qkv tensor "
        "unchanged.")
    add(f"- Inputs: x N(1, 2) (LayerNorm: N(3, 1.5)), residual N(0, 1), weight N(1, 0.5) "
        f"(with weight_offset: N(0, 0.5)), bias N(0, 1), fp8 scale {FP8_SCALE:g} (some outputs "
        f"saturate); random seed {s.get('seed')}. In the expressions EPS_RMS = {EPS_RMS:g}, "
        f"EPS_LN = {EPS_LN:g}, FP8_E4M3_MAX = {FP8_E4M3_MAX:g}; normjit gets the same eps.")
    for note in rep.notes:
        add(f"- {note}")
    if rep.copy_gbps:
        add(f"- For scale: a device-to-device copy of 2 GiB runs at {rep.copy_gbps:.0f} GB/s "
            "(read + written).")
    add("")

    variants = [v for v in VARIANTS if any(r.variant == v.key for r in rep.rows)]
    if variants:
        add("| variant | cases | normjit at or ahead of compile | "
            + "".join(f"normjit at or ahead of {ct.PEER_TITLES[e]} | " for e in ENGINES)
            + f"% of copy at tokens ≥ {LARGE_TOKENS} | checks |")
        add("|---|---:|---:|" + "---:|" * len(ENGINES) + "---:|---|")
        for v in variants:
            rows = [r for r in rep.rows if r.variant == v.key]
            ahead, pct, checks = variant_summary(rows)
            add(f"| {v.number}. {v.key} | {len([r for r in rows if not r.skipped])} | "
                f"{ahead} | " + "".join(f"{engine_summary(v, rows, e)} | " for e in ENGINES)
                + f"{pct} | {checks} |")
        add("")

    for v in variants:
        rows = sorted((r for r in rep.rows if r.variant == v.key),
                      key=lambda r: (r.hidden, r.tokens))
        add(f"### {v.number}. {v.title}")
        add("")
        hidden = rows[0].hidden if rows else 4096
        add(f"normjit: `{v.spec(hidden)}`" + ("" if v.qk else " (shape 1,hidden)")
            + f"; {v.launch}. Bytes: {v.bytes_text()}.")
        add("")
        add("```python")
        add(v.source())
        add("```")
        add("")
        with_liger = bool(v.liger)
        headers = table_headers(with_liger, v.residual, v.engines)
        right = set(range(len(headers) - 2))
        out += ct.md_table(headers, [table_row(v, r, with_liger, v.engines) for r in rows], right)
        add("")

    problems = []
    for r in rep.rows:
        key = f"{r.variant} h{r.hidden} t{r.tokens}"
        if r.error:
            problems.append(f"{key}: {r.error}")
        for impl in IMPLS:
            t = r.impl(impl)
            if t.status in ("error", "failed") or (impl == "normjit" and t.status == "unsupported"):
                problems.append(f"{key}, {impl} {t.status}: {t.message}")
        c = r.check
        if c and not c.passed:
            problems.append(
                f"{key}, normjit check failed: rel. err {ct.fmt_err(c.rel_err)}, "
                f"max abs err {ct.fmt_err(c.max_abs_err)}, "
                f"{'NaN' if c.ulps is not None and math.isnan(c.ulps) else c.ulps} ulp, "
                f"{c.nonfinite} non-finite (unwritten) elements"
                + (f", {c.h_mismatches} h elements off" if c.h_mismatches else "")
                + (f"; separate outputs: {c.separate_h_mismatches} h elements off, "
                   f"{c.separate_nonfinite} y elements non-finite (or the inputs changed)"
                   if c.separate_h_mismatches is not None else "")
                + (", qkv changed" if c.untouched is False else ""))
    out += ct.failures_block(problems, rep, "cases")
    if rep.compiles:
        secs = [c["seconds"] for c in rep.compiles]
        add(f"torch.compile compiled {len(secs)} times (first calls over 0.5 s), "
            f"{sum(secs):.0f} s in all (median {statistics.median(secs):.1f} s); normjit "
            f"prepared {len(rep.prepares)} kernels, "
            f"{sum(p.get('seconds') or 0 for p in rep.prepares):.1f} s in all (JSON: each).")
        add("")
    out.append(ct.VARIANTS_END)
    return "\n".join(out)


def write_section(rep: Report, doc: Path, section_out: Optional[Path] = None) -> None:
    """The section into doc (replacing its previous one, or inserted where compare_torch.py
    puts it); doc is created with the section alone when it does not exist."""
    ct.write_section_into(doc, ct.VARIANTS_BEGIN, ct.VARIANTS_END, render_section(rep), section_out)


def render_summary(rep: Report) -> str:
    """The short table printed at the end of the run."""
    headers = ["case", "normjit", "separate", "eager", "compile", "comp-inpl", "liger",
               "flashinfer", "vllm", "copy", "%copy", "vs comp", "error", "check"]
    rows = []
    for r in rep.rows:
        v = VARIANT_BY_KEY[r.variant]
        rows.append([f"{v.number} {v.key} h{v.hidden_text(r.hidden)} t{r.tokens}",
                     timing_cell(r.normjit), timing_cell(r.separate) if v.residual else "",
                     timing_cell(r.eager), timing_cell(r.compile),
                     timing_cell(r.compile_inplace) if v.residual else "",
                     timing_cell(r.liger), timing_cell(r.flashinfer) if v.flashinfer else "",
                     timing_cell(r.vllm) if v.vllm else "",
                     timing_cell(r.copy), ct.fmt_num(r.pct_copy, ".0f", "%"),
                     ct.fmt_num(r.speedup("compile"), ".2f", "x"), error_cell(r),
                     check_cell(r).replace("*", "")])
    return ct.text_table(headers, rows)


# ---------------------------------------------------------------------------------------
# normjit: the C API, or a stand-in for --cpu-check
# ---------------------------------------------------------------------------------------

class CApi(ct.EngineApi):
    """libnormjit.so through the package's ctypes binding: prepare a spec, launch arguments."""

    def new_args(self) -> Any:
        a = _capi.LaunchArgs()
        self.lib.normjit_launch_args_init_sized(ctypes.byref(a), ctypes.sizeof(a))
        return a

    def bind(self, kernel: int, args: Any, stream: int) -> Callable[[], None]:
        fn, ref, lib = self.lib.normjit_launch_ex, ctypes.byref(args), self.lib

        def call() -> None:
            status = fn(kernel, ref, stream)
            if status:
                raise lib.error(status)
        call.keepalive = args  # type: ignore[attr-defined]
        return call

    def counters(self) -> tuple[int, int, int]:
        return self.nj.counters(self.engine)


class StandIn:
    """--cpu-check: normjit's launch arguments interpreted by PyTorch on CPU tensors, as
    normjit.h defines them (row r of a tensor at (r / inner_rows) * strides[0] +
    (r % inner_rows) * strides[1], 0 = contiguous; h = x + residual rounded to the residual
    dtype; y = norm(h) * (offset + w) (+ b) (* scale, saturated) in f32), so the flow's launch
    arguments are checked without a GPU."""

    def __init__(self):
        self.tensors: dict[int, Any] = {}
        self.specs: list[dict[str, str]] = []
        self.prepared = 0

    def register(self, *ts) -> None:
        for t in ts:
            if t is not None:
                self.tensors[t.data_ptr()] = t

    def prepare(self, spec: str) -> int:
        fields = dict(w.split("=", 1) for w in spec.split())
        self.specs.append(fields)
        self.prepared += 1
        return len(self.specs) - 1

    def new_args(self) -> Any:
        a = _capi.LaunchArgs()
        a.size, a.eps, a.inner_rows = ctypes.sizeof(a), 1e-5, 1
        return a

    def counters(self) -> tuple[int, int, int]:
        return self.prepared, 0, 0

    def close(self) -> None:
        pass

    def _rows(self, ptr: int, rows: int, length: int, inner_rows: int, strides) -> Any:
        t = self.tensors[ptr]
        inner = strides[1] if inner_rows > 1 and strides[1] else length
        outer = strides[0] or inner_rows * inner
        return torch.as_strided(t, (rows // inner_rows, inner_rows, length), (outer, inner, 1),
                                t.storage_offset())

    def bind(self, kernel: int, a: Any, stream: int) -> Callable[[], None]:
        spec = self.specs[kernel]

        def call() -> None:
            length = int(spec["shape"].split(",")[-1])
            rows, ir = a.batch, a.inner_rows
            x = self._rows(a.x, rows, length, ir, a.x_strides).float()
            if "residual" in spec:
                res = self._rows(a.residual, rows, length, ir, a.residual_strides)
                h = (x + res.float()).to(res.dtype)
                self._rows(a.residual_out, rows, length, ir, a.residual_out_strides).copy_(h)
                x = h.float()
            if spec["op"] == "layernorm":
                x = x - x.mean(-1, keepdim=True)
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a.eps)
            y = y * (self.tensors[a.weight].float() + float(spec.get("weight_offset", 0)))
            if a.bias:
                y = y + self.tensors[a.bias].float()
            if a.scale:
                y = (y * self.tensors[a.scale].float()).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
            out = self._rows(a.y, rows, length, ir, a.y_strides)
            out.copy_(y.to(out.dtype))
        return call


# ---------------------------------------------------------------------------------------
# The measurements (torch imported here)
# ---------------------------------------------------------------------------------------

def load_torch():
    global torch, F
    import torch as t
    torch, F = t, t.nn.functional
    return t


def liger_functions() -> tuple[dict[str, Callable], str]:
    """Liger-Kernel's forwards of the variants that it has, by variant key, called with the
    expression's arguments, returning what the expression returns; and its version or why
    not."""
    found, version = ct.load_liger("fused_add_rms_norm.fused_add_rms_norm_forward",
                                   "rms_norm.rms_norm_forward")
    if not found:
        return {}, version
    fused_add_rms_norm_forward = found["fused_add_rms_norm.fused_add_rms_norm_forward"]
    rms_norm_forward = found["rms_norm.rms_norm_forward"]
    fns = {
        # (Y, S, RSTD, ...): llama casting (rstd in f32, times w in bf16), like the expression.
        "add-rmsnorm": lambda x, r, w: fused_add_rms_norm_forward(x, r, w, EPS_RMS, 0.0,
                                                                  "llama")[:2],
        # gemma casting: everything in f32, one cast at the end, like the expressions.
        "f32-weight": lambda x, w32: rms_norm_forward(x, w32, EPS_RMS, 0.0, "gemma", None)[0],
        "gemma": lambda x, w: rms_norm_forward(x, w, EPS_RMS, 1.0, "gemma", None)[0],
    }
    return fns, version


def engine_functions(engine: str, args: argparse.Namespace,
                     cuda: bool) -> tuple[dict[str, Callable], str]:
    """The engine's CUDA kernels of the variants that have one, by variant key, called with the
    expression's arguments and returning what the expression returns (the residual variant:
    None, its outputs written over x and the residual); and what was built, or why not."""
    if not cuda:
        return {}, "absent: no GPU"
    found, what = kernel_peers.load(engine, Path(args.build))
    if not found:
        return {}, what
    reciprocals: dict[int, Any] = {}

    def over(scale):
        # FlashInfer divides by its scale: the reciprocal of the variant's, made once per scale
        # tensor (at the untimed first call) and kept.
        if scale.data_ptr() not in reciprocals:
            reciprocals[scale.data_ptr()] = (scale, scale.double().reciprocal().float())
        return reciprocals[scale.data_ptr()][1]

    by_name = {
        "fused_add_rmsnorm": lambda x, r, w: found["fused_add_rmsnorm"](x, r, w, EPS_RMS),
        "rmsnorm_quant": lambda x, w, scale: found["rmsnorm_quant"](x, w, over(scale), EPS_RMS),
        "gemma_rmsnorm": lambda x, w: found["gemma_rmsnorm"](x, w, EPS_RMS),
        "rmsnorm": lambda x, w: found["rmsnorm"](x, w, EPS_RMS),
    }
    return ({v.key: by_name[v.engine_function(engine)] for v in VARIANTS
             if v.engine_function(engine)}, what)


class Bench(ct.BenchRunner):
    """Runs the groups of cases; holds what they share. Its times are in µs (time_calls_us:
    L2 flushed before the timed calls, as the variants table always was), its rows measured in
    groups that share one torch.compile of the expression (measure_row: no dynamo reset a row)."""

    def __init__(self, args: argparse.Namespace, nj: Any, rep: Report, l2_bytes: int, cuda: bool):
        super().__init__(args, rep, l2_bytes, cuda)
        self.nj = nj
        self.flush_buf = (torch.ones(max(2 * l2_bytes, 1 << 20) // 4, device=self.dev)
                          if cuda else None)
        self.liger, liger_version = liger_functions()
        rep.env["Liger-Kernel"] = liger_version
        self.engines: dict[str, dict[str, Callable]] = {}
        for e in ENGINES:
            self.engines[e], rep.env[ct.PEER_TITLES[e]] = engine_functions(e, args, cuda)
        self.stream = torch.cuda.current_stream().cuda_stream if cuda else 0

    # -- tensors --------------------------------------------------------------------------

    def normal(self, shape, dtype, mean: float, std: float):
        t = torch.empty(shape, dtype=dtype, device=self.dev)
        return t.normal_(mean, std, generator=self.gen)

    def params(self, v: Variant, hidden: int) -> dict[str, Any]:
        n = v.row_length(hidden)
        pdt = torch.float32 if v.param_dtype == "f32" else torch.bfloat16
        p = {"w": self.normal((n,), pdt, 0.0 if v.weight_offset else 1.0, 0.5)}
        if v.affine == "both":
            p["b"] = self.normal((n,), pdt, 0.0, 1.0)
        if v.fp8:
            p["scale"] = torch.full((1,), FP8_SCALE, dtype=torch.float32, device=self.dev)
        return p

    def make_set(self, v: Variant, tokens: int, hidden: int) -> dict[str, Any]:
        bf16 = torch.bfloat16
        mean, std = (3.0, 1.5) if v.op == "layernorm" else (1.0, 2.0)
        s: dict[str, Any] = {}
        if v.qk:
            s["qkv"] = self.normal((tokens, QKV_WIDTH), bf16, mean, std)
            s["x"] = s["qkv"][:, :Q_WIDTH].view(tokens, QK_HEADS, QK_DIM)
        else:
            s["x"] = self.normal((tokens, hidden), bf16, mean, std)
        if v.residual:
            s["r"] = self.normal(s["x"].shape, bf16, 0.0, 1.0)
        if not v.y_over_x:
            s["y"] = torch.empty(s["x"].shape, dtype=out_torch_dtype(v), device=self.dev)
        return s

    @staticmethod
    def torch_args(v: Variant, s: dict, p: dict) -> tuple:
        """The expression's arguments: the token-dim inputs first (Variant.token_inputs)."""
        acts = (s["x"], s["r"]) if v.residual else (s["x"],)
        return acts + (p["w"],) + ((p["b"],) if "b" in p else ()) + (
            (p["scale"],) if "scale" in p else ())

    def rotation(self, per_set: int) -> int:
        return max(1, min(256, math.ceil(4 * self.l2 / max(1, per_set))))

    # -- timing ---------------------------------------------------------------------------

    def time_calls_us(self, fn: Callable[[int], Any], start: int = 0) -> list[float]:
        """fn(start + i), i selecting the rotating set; microseconds of each timed call."""
        reps, warmup = self.args.reps, self.args.warmup
        for i in range(warmup):
            fn(start + i)
        if not self.cuda:
            times = []
            for i in range(reps):
                t0 = time.perf_counter()
                fn(start + warmup + i)
                times.append((time.perf_counter() - t0) * 1e6)
            return times
        self.flush_buf.sum()  # evict what the warm-up left in L2 (reads: no dirty lines)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ct.gpu_sleep(min(50.0, 1.0 + 0.25 * reps))
        for i in range(reps):
            starts[i].record()
            fn(start + warmup + i)
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def timed_rounds(self, row: Row, timers: list[tuple[str, Callable[[int], Any]]]) -> None:
        """Times each (name, fn) in --rounds rounds, every one in turn within a round (--reps
        calls after --warmup each time), so that a drift of the clocks or of the host's pace
        during the row falls on all of them alike; each one's median is of all its calls. One
        that fails is marked failed and left out of the later rounds."""
        def failed(name: str, e: BaseException) -> None:
            t = row.impl(name)
            t.status, t.message, t.us = "failed", ct.short_error(e), None
            self.log(f"  {name:8s} timing failed: {t.message}")
            self.free()

        times = ct.time_rounds(timers, self.args.rounds, self.args.reps + self.args.warmup,
                               self.time_calls_us, failed)
        for name, ts in times.items():
            t = row.impl(name)
            t.times_us, t.us = ts, statistics.median(ts)

    def measure_copy(self, nbytes: int, sets: int) -> Timing:
        t = Timing()
        copy = ct.own_copy(nbytes, sets, self.dev)  # compare_torch.py times the same copy
        try:
            per_round = self.args.reps + self.args.warmup
            t.times_us = [us for k in range(self.args.rounds)
                          for us in self.time_calls_us(copy, k * per_round)]
            t.us, t.status = statistics.median(t.times_us), "ok"
        except Exception as e:  # noqa: BLE001
            t.status, t.message = "failed", ct.short_error(e)
        del copy
        return t

    # -- correctness ----------------------------------------------------------------------

    def reference(self, v: Variant, x, r, p: dict):
        """(y, h) of the expression in float64 on a chunk of rows; h (the exact bf16 x + r)
        for the residual variants, else None."""
        h = x + r if v.residual else None
        hd = (h if h is not None else x).double()
        if v.op == "layernorm":
            hd = hd - hd.mean(-1, keepdim=True)
        y = hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + v.eps)
        y = y * (p["w"].double() + v.weight_offset)
        if "b" in p:
            y = y + p["b"].double()
        if v.fp8:
            y = (y * FP8_SCALE).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
        return y, h

    def compare(self, v: Variant, x, r, p: dict, outs: dict[str, dict]) -> dict[str, Check]:
        """Each implementation's outputs ({"y": y, "h": h}) against float64, chunk by chunk
        of tokens, accumulated on the device."""
        mbits, emin = FORMATS[v.out_dtype]
        tokens = x.shape[0]
        step_rows = max(1, REFERENCE_CHUNK_ELEMENTS // max(1, x[0].numel()))
        zero = lambda dt=torch.float64: torch.zeros((), dtype=dt, device=self.dev)  # noqa: E731
        ref2 = zero()
        acc = {k: {"err2": zero(), "maxabs": zero(), "ulps": zero(), "bad": zero(torch.int64),
                   "hbad": zero(torch.int64)} for k in outs}
        for start in range(0, tokens, step_rows):
            sl = slice(start, min(tokens, start + step_rows))
            ref, h = self.reference(v, x[sl], r[sl] if r is not None else None, p)
            ref2 += ref.pow(2).sum()
            if v.fp8:
                mag = ref.abs().clamp_min(2.0 ** emin)
            else:
                floor = (BF16_STEP_FLOOR * ref.pow(2).mean().sqrt()).clamp_min(1e-30)
                mag = torch.maximum(ref.abs(), floor)
            step = torch.exp2(torch.floor(torch.log2(mag)) - mbits)
            del mag
            for k, o in outs.items():
                a = acc[k]
                yd = o["y"][sl].float().double()
                a["bad"] += (~torch.isfinite(yd)).sum()
                d = yd - ref
                a["err2"] += d.pow(2).sum()
                # amax ignores nothing: a NaN in d makes it NaN, which is what we want.
                a["maxabs"] = torch.maximum(a["maxabs"], d.abs().amax())
                a["ulps"] = torch.maximum(a["ulps"], (d.abs() / step).amax())
                if h is not None and "h" in o:
                    a["hbad"] += (o["h"][sl].view(torch.int16) != h.view(torch.int16)).sum()
                del yd, d
            del ref, h, step
        r2 = ref2.item()
        result = {}
        for k, a in acc.items():
            e2 = a["err2"].item()
            rel = math.sqrt(e2 / r2) if r2 > 0 else (0.0 if e2 == 0 else math.inf)
            c = Check(rel_err=rel, max_abs_err=a["maxabs"].item(), ulps=a["ulps"].item(),
                      nonfinite=int(a["bad"].item()),
                      h_mismatches=int(a["hbad"].item()) if v.residual else None)
            tol = REL_TOLERANCE.get(v.out_dtype)
            # NaN compares False: a NaN never passes.
            c.passed = (c.nonfinite == 0 and c.ulps <= 1.0 and (tol is None or rel < tol)
                        and not c.h_mismatches)
            result[k] = c
        return result

    # -- one (variant, hidden) ------------------------------------------------------------

    def prepare(self, v: Variant, hidden: int) -> tuple[Optional[int], Timing]:
        spec = v.spec(hidden)
        t = Timing()
        before = self.nj.counters()
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"spec": spec}
        try:
            kernel = self.nj.prepare(spec)
        except _capi.UnsupportedError as e:
            t.status, t.message = "unsupported", e.message
        except _capi.NormjitError as e:
            t.status, t.message = "error", str(e)
        else:
            after = self.nj.counters()
            entry["seconds"] = time.perf_counter() - t0
            entry["kind"] = ("nvrtc" if after[0] > before[0] else
                             "disk hit" if after[2] > before[2] else "memory hit")
            entry["status"] = "ok"
            self.rep.prepares.append(entry)
            t.status = "ok"
            self.log(f"  normjit  prepared in {entry['seconds'] * 1e3:.0f} ms ({entry['kind']}): "
                     f"{spec}")
            return kernel, t
        entry.update(status=t.status, message=t.message)
        self.rep.prepares.append(entry)
        self.log(f"  normjit  {t.status}: {t.message}")
        return None, t

    def run_group(self, cases: list[Case], on_row: Callable[[], None]) -> None:
        import torch._dynamo
        v, hidden = cases[0].variant, cases[0].hidden
        rows = [Row(v.key, c.tokens, c.hidden, v.bytes_moved(c.tokens, c.hidden)) for c in cases]
        if self.broken or self.over_budget():
            why = (f"the CUDA context broke ({self.broken})" if self.broken else
                   f"the time budget (--budget-s {self.args.budget_s:g}) ran out")
            for row in rows:
                row.skipped = why
            self.rep.rows += rows
            on_row()
            return
        self.log(f"{v.number}. {v.key}, hidden {v.hidden_text(hidden)}: tokens "
                 + ", ".join(str(c.tokens) for c in cases))
        kernel, prep = self.prepare(v, hidden)
        torch._dynamo.reset()  # a fresh cache per group: no recompile limit reached
        compiled = None if self.args.skip_compile else torch.compile(v.expression)
        compiled_inplace = (torch.compile(in_place(v)) if v.residual and not self.args.skip_compile
                            else None)
        p = self.params(v, hidden)
        compile_failed = inplace_failed = ""
        for row in rows:
            if self.broken or self.over_budget():
                row.skipped = (f"the CUDA context broke ({self.broken})" if self.broken else
                               f"the time budget (--budget-s {self.args.budget_s:g}) ran out")
            else:
                t0 = time.perf_counter()
                self.measure_row(v, row, kernel, prep, compiled, compiled_inplace, p)
                if compile_failed:  # not tried again: each try would compile again
                    row.compile.status, row.compile.message = "failed", compile_failed
                elif row.compile.status == "failed":
                    compiled = None
                    compile_failed = f"as at tokens {row.tokens}: {row.compile.message}"
                if inplace_failed:
                    row.compile_inplace.status = "failed"
                    row.compile_inplace.message = inplace_failed
                elif row.compile_inplace.status == "failed":
                    compiled_inplace = None
                    inplace_failed = f"as at tokens {row.tokens}: {row.compile_inplace.message}"
                self.log(f"  t{row.tokens}: normjit {timing_cell(row.normjit)}, eager "
                         f"{timing_cell(row.eager)}, compile {timing_cell(row.compile)}, liger "
                         f"{timing_cell(row.liger)}, flashinfer {timing_cell(row.flashinfer)}, "
                         f"vllm {timing_cell(row.vllm)}, "
                         f"copy {timing_cell(row.copy)} µs; "
                         f"{ct.fmt_num(row.pct_copy, '.0f', '% of copy')}; {error_cell(row)} "
                         f"{check_cell(row).replace('*', '')} ({time.perf_counter() - t0:.1f} s)")
            self.rep.rows.append(row)
            on_row()
        del p, compiled, compiled_inplace
        torch._dynamo.reset()
        self.free()

    def measure_row(self, v: Variant, row: Row, kernel: Optional[int], prep: Timing, compiled,
                    compiled_inplace, p: dict) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            with torch.no_grad():
                self._run_row(v, row, kernel, prep, compiled, compiled_inplace, p)
        except Exception as e:  # noqa: BLE001 - one case must not end the run
            row.error = ct.short_error(e)
            self.log(f"  error: {row.error}")
        finally:
            try:
                if self.cuda:
                    row.peak_gib = torch.cuda.max_memory_allocated() / 2**30
                self.free()
            except Exception as e:  # noqa: BLE001 - a sticky CUDA error: stop
                self.broken = ct.short_error(e)
                row.error = row.error or self.broken

    def _run_row(self, v: Variant, row: Row, kernel: Optional[int], prep: Timing, compiled,
                 compiled_inplace, p: dict) -> None:
        T, hidden = row.tokens, row.hidden
        n = row.rotation = self.rotation(row.bytes_moved)
        sets = [self.make_set(v, T, hidden) for _ in range(n)]
        for s in sets[1:]:  # one y, as each peer's allocator gives it: only the inputs rotate
            if "y" in s:
                s["y"] = sets[0]["y"]
        targs = [self.torch_args(v, s, p) for s in sets]
        ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
        calls = []
        if kernel is not None:
            for s in sets:
                a = self.nj.new_args()
                fill_launch_args(a, launch_fields(v, T, {
                    "x": ptr(s["x"]), "y": ptr(s.get("y")), "r": ptr(s.get("r")),
                    "w": ptr(p["w"]), "b": ptr(p.get("b")), "scale": ptr(p.get("scale"))}))
                if isinstance(self.nj, StandIn):
                    self.nj.register(s.get("qkv", s["x"]), s.get("y"), s.get("r"), *p.values())
                calls.append(self.nj.bind(kernel, a, self.stream))
        else:
            row.normjit.status, row.normjit.message = prep.status, prep.message

        # Correctness on set 0: the peers first (they write no input), then normjit.
        s0 = sets[0]
        x0 = s0["x"].clone() if v.y_over_x else s0["x"]
        r0 = s0["r"].clone() if v.residual else None
        qkv0 = s0["qkv"].clone() if v.qk else None
        as_out = (lambda o: {"y": o[0], "h": o[1]}) if v.residual else (lambda o: {"y": o})
        outs: dict[str, dict] = {}
        o = self.first_call(row.eager, "eager", lambda: v.expression(*targs[0]))
        if o is not None:
            outs["eager"] = as_out(o)
        if compiled is None:
            row.compile.status = "skipped"
        else:
            if T >= 2:  # dynamo specializes a size of 1: it cannot be marked dynamic
                for t in targs[0][:v.token_inputs]:
                    torch._dynamo.mark_dynamic(t, 0)
            o = self.first_call(row.compile, "compile", lambda: compiled(*targs[0]))
            if o is not None:
                outs["compile"] = as_out(o)
                if row.compile.first_call_s > 0.5:
                    self.rep.compiles.append({"variant": v.key, "hidden": hidden, "tokens": T,
                                              "seconds": row.compile.first_call_s})
                    self.log(f"  compile  compiled in {row.compile.first_call_s:.1f} s")
        if v.residual and compiled_inplace is None:
            row.compile_inplace.status = "skipped"
        elif v.residual:
            # On copies of set 0's x and residual: normjit's check below reads set 0 as made.
            tin = list(targs[0])
            tin[0], tin[1] = tin[0].clone(), tin[1].clone()
            if T >= 2:
                for t in tin[:v.token_inputs]:
                    torch._dynamo.mark_dynamic(t, 0)
            o = self.first_call(row.compile_inplace, "compile in place",
                                lambda: compiled_inplace(*tin))
            if row.compile_inplace.status == "ok":
                outs["compile_inplace"] = {"y": tin[0] if v.y_over_x else o, "h": tin[1]}
            del tin
        liger = self.liger.get(v.key)
        if liger is None:
            row.liger.status = "absent"
        else:
            o = self.first_call(row.liger, "liger", lambda: liger(*targs[0]))
            if o is not None:
                outs["liger"] = as_out(o)
        engines = {e: self.engines[e].get(v.key) for e in ENGINES}
        for e, fn in engines.items():
            t = row.impl(e)
            if fn is None:
                t.status = "absent"
            elif v.residual:  # in place: on copies of set 0's x and residual, as compile in place
                tin = list(targs[0])
                tin[0], tin[1] = tin[0].clone(), tin[1].clone()
                if self.first_call(t, e, lambda: fn(*tin)) is None and t.status == "ok":
                    outs[e] = {"y": tin[0], "h": tin[1]}
                del tin
            else:
                o = self.first_call(t, e, lambda: fn(*targs[0]))
                if o is not None:
                    outs[e] = as_out(o)
        if calls:
            y = s0["x"] if v.y_over_x else s0["y"]
            if not v.y_over_x:  # poison: every element must be written
                (y.view(torch.uint8).fill_(0x7F) if v.fp8 else y.fill_(math.nan))
            t0 = time.perf_counter()
            try:
                calls[0]()
                self.sync()
                row.normjit.status = "ok"
                row.normjit.first_call_s = time.perf_counter() - t0
                outs["normjit"] = {"y": y, "h": s0["r"]} if v.residual else {"y": y}
            except _capi.NormjitError as e:
                row.normjit.status, row.normjit.message = (
                    "unsupported" if isinstance(e, _capi.UnsupportedError) else "error", str(e))
                self.log(f"  normjit  {row.normjit.status}: {e}")
        if outs:
            checks = self.compare(v, x0, r0, p, outs)
            for k, c in checks.items():
                t = row.impl(k)
                t.rel_err, t.ulps = c.rel_err, c.ulps
                if k == "normjit":
                    if qkv0 is not None:
                        c.untouched = bool(torch.equal(s0["qkv"], qkv0))
                        c.passed = c.passed and c.untouched
                    row.check = c
                elif not (c.rel_err < 0.05 and c.nonfinite == 0):
                    self.rep.warnings.append(
                        f"{v.key} h{hidden} t{T}: PyTorch {k} is off the float64 reference by "
                        f"{ct.fmt_err(c.rel_err)} ({c.nonfinite} non-finite)")
        outs.clear()
        del x0, r0, qkv0
        self.free()
        separate = self.separate_calls(v, row, kernel, sets, p) if calls and v.residual else []

        # Timing, in rounds that take the implementations in turn (the order rotated each
        # round). normjit's in-place variants change their inputs' values between the peers'
        # calls: the checks above are done, and no implementation's time depends on the values.
        timers = []
        if row.eager.status == "ok":
            timers.append(("eager", lambda i: v.expression(*targs[i % n])))
        if row.compile.status == "ok":
            timers.append(("compile", lambda i: compiled(*targs[i % n])))
        if row.compile_inplace.status == "ok":
            timers.append(("compile_inplace", lambda i: compiled_inplace(*targs[i % n])))
        if row.liger.status == "ok":
            timers.append(("liger", lambda i: liger(*targs[i % n])))
        for e, fn in engines.items():
            if row.impl(e).status == "ok":
                timers.append((e, lambda i, fn=fn: fn(*targs[i % n])))
        if row.separate.status == "ok":
            timers.append(("separate", lambda i: separate[i % n]()))
        if row.normjit.status == "ok":
            timers.append(("normjit", lambda i: calls[i % n]()))
        self.timed_rounds(row, timers)
        sets = targs = calls = separate = None
        self.free()
        row.copy = self.measure_copy(row.bytes_moved, n)

    def separate_calls(self, v: Variant, row: Row, kernel: int, sets: list[dict],
                       p: dict) -> list[Callable[[], None]]:
        """The launches of a residual variant with y and h written to separate buffers, one
        each for every set (as the peers' outputs are), and their check on set 0, whose x and
        residual hold the in-place check's y and h by now: h bit-equal to x + r in bf16, every
        element of y written (poisoned first) and finite, x and the residual unchanged."""
        ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
        s0 = sets[0]
        y = s0["y"] if "y" in s0 else torch.empty(s0["x"].shape, dtype=out_torch_dtype(v),
                                                  device=self.dev)
        h = torch.empty_like(s0["r"])
        calls = []
        for s in sets:
            a = self.nj.new_args()
            fill_launch_args(a, launch_fields(v, row.tokens, {
                "x": ptr(s["x"]), "y": ptr(y), "r": ptr(s["r"]), "h": ptr(h), "w": ptr(p["w"]),
                "b": ptr(p.get("b")), "scale": ptr(p.get("scale"))}))
            if isinstance(self.nj, StandIn):
                self.nj.register(s["x"], y, s["r"], h, *p.values())
            calls.append(self.nj.bind(kernel, a, self.stream))
        if row.normjit.status != "ok" or row.check is None:
            row.separate.status = "skipped"
            return []
        x0, r0 = s0["x"].clone(), s0["r"].clone()
        (y.view(torch.uint8).fill_(0x7F) if v.fp8 else y.fill_(math.nan))
        h.fill_(math.nan)
        try:
            calls[0]()
            self.sync()
        except _capi.NormjitError as e:
            row.separate.status, row.separate.message = "error", str(e)
            self.log(f"  separate error: {e}")
            return []
        c = row.check
        c.separate_h_mismatches = int((h != (x0.float() + r0.float()).to(r0.dtype)).sum().item())
        c.separate_nonfinite = int((~y.float().isfinite()).sum().item())
        unchanged = torch.equal(s0["x"], x0) and torch.equal(s0["r"], r0)
        c.passed = (c.passed and c.separate_h_mismatches == 0 and c.separate_nonfinite == 0
                    and unchanged)
        if not unchanged:
            self.log("  separate: the launch changed x or the residual")
        row.separate.status = "ok"
        return calls


def out_torch_dtype(v: Variant):
    return {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn,
            "e5m2": torch.float8_e5m2}[v.out_dtype]


def dtype_notes(cuda: bool) -> list[str]:
    """What PyTorch's own spellings give for bf16 x with an f32 weight (variant 2)."""
    dev = "cuda" if cuda else "cpu"
    x = torch.randn(4, 64, device=dev, dtype=torch.bfloat16)
    w = torch.randn(64, device=dev, dtype=torch.float32)
    try:
        frms = str(F.rms_norm(x, (64,), w, EPS_RMS).dtype).replace("torch.", "")
    except Exception as e:  # noqa: BLE001
        frms = f"an error ({ct.short_error(e)})"
    xf = x.float()
    llama = str((w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS_RMS))
                 .to(x.dtype)).dtype).replace("torch.", "")
    return [f"Variant 2's output dtype: `F.rms_norm(x bf16, weight f32)` gives {frms} here and "
            f"Llama's `weight * norm(x).to(x.dtype)` gives {llama}; both expressions here end "
            "in `.to(x.dtype)` (bf16, normjit's default out_dtype), the activation dtype that "
            "inference engines keep, so both sides write bf16 y."]


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Time normjit's variants (issue 18) against PyTorch eager, torch.compile, "
                    "Liger-Kernel and a copy of their bytes; write docs/performance.md's "
                    "variants section and a JSON file.")
    ap.add_argument("--build", default="build", help="build directory (libnormjit.so)")
    ap.add_argument("--lib", default=None,
                    help="libnormjit.so (default: $NORMJIT_LIBRARY, else BUILD/libnormjit.so)")
    ap.add_argument("--only", default=None,
                    help="comma-separated variants: numbers 1-7 or (parts of) names: "
                         + ", ".join(v.key for v in VARIANTS))
    ap.add_argument("--quick", action="store_true",
                    help=f"hidden {QUICK_HIDDENS[0]}, tokens {', '.join(map(str, QUICK_TOKENS))}; "
                         "10 timed calls")
    ap.add_argument("--tokens", default=None, help="comma-separated token counts (every hidden)")
    ap.add_argument("--hiddens", default=None, help="comma-separated hidden sizes")
    ap.add_argument("--reps", type=int, default=None,
                    help="timed calls per round (20; --quick 10)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of every row's timing, the implementations taken in turn "
                         "within each (5; --quick and --cpu-check 1)")
    ct.add_run_args(ap, "cases", 330.0)
    ap.add_argument("--cache-dir", default=None, help="normjit cache directory")
    ct.add_output_args(ap, "variants", "cases")
    ap.add_argument("--precompile", metavar="ARCH", default=None,
                    help="compile every selected spec for ARCH (e.g. sm_90) without a GPU")
    ap.add_argument("--cpu-check", action="store_true",
                    help="run the whole flow on the CPU on tiny shapes, PyTorch standing in "
                         "for normjit (checks the launch arguments and the flow without a GPU; "
                         "writes to a temporary folder unless --doc/--json-out are given)")
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick or args.cpu_check else 5
    ints = lambda s: [int(t) for t in s.split(",") if t.strip()] if s else None  # noqa: E731
    try:
        args.token_list, args.hidden_list = ints(args.tokens), ints(args.hiddens)
    except ValueError:
        ap.error("--tokens and --hiddens take comma-separated integers")
    for val in (args.token_list or []) + (args.hidden_list or []):
        if val < 1:
            ap.error("--tokens and --hiddens must be positive")
    json_out_given, section_out = args.json_out is not None, args.section_out
    if args.cpu_check:  # a temporary folder for what --doc and --json-out do not name
        tmp = Path(tempfile.mkdtemp(prefix="bench_variants_cpu_"))
        if args.doc == ap.get_default("doc"):
            args.doc = str(tmp / "performance.md")
        args.json_out = args.json_out or str(tmp / "perf_variants.json")
    args = ct.finish_bench_args(ap, args, "variants")
    args.json_out_given = json_out_given
    if args.cpu_check:
        args.section_out = section_out  # not OUT's: a CPU check's section is no table
    return args


def write_outputs(rep: Report, args: argparse.Namespace) -> None:
    write_section(rep, Path(args.doc), Path(args.section_out) if args.section_out else None)
    write_json(rep, Path(args.json_out))


def run(args: argparse.Namespace, groups: list[list[Case]], command: str) -> int:
    cpu = args.cpu_check
    try:
        load_torch()
    except ImportError as e:
        print(f"bench_variants: PyTorch is needed for the measurements ({e}); --list, "
              "--selftest, --precompile and --from-json work without it", file=sys.stderr)
        return 2
    if not cpu and not torch.cuda.is_available():
        print("bench_variants: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    if cpu:
        nj: Any = StandIn()
        env = {"device": "CPU (--cpu-check: PyTorch stands in for normjit; wall-clock times)",
               "PyTorch": torch.__version__}
        l2 = 0
    else:
        # normjit launches in the context current on the thread: PyTorch's primary context.
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        try:
            nj = CApi(Path(args.lib), args.cache_dir)
        except (OSError, ImportError, _capi.NormjitError) as e:
            print(f"bench_variants: cannot use {args.lib}: {e}", file=sys.stderr)
            return 2
        env, l2 = ct.collect_environment(Path(args.lib))
    rep = Report(env=env, command=command,
                 date_utc=datetime.datetime.now(datetime.timezone.utc).strftime(
                     "%Y-%m-%d %H:%M UTC"),
                 settings={"copy_grain": ct.COPY_GRAIN, "reps": args.reps,
                           "rounds": args.rounds, "order": "rotated",
                           "warmup": args.warmup,
                           "seed": args.seed,
                           "quick": args.quick, "only": args.only, "tokens": args.token_list,
                           "hiddens": args.hidden_list, "budget_s": args.budget_s,
                           "skip_compile": args.skip_compile},
                 planned=sum(len(g) for g in groups))
    try:
        bench = Bench(args, nj, rep, l2, cuda=not cpu)
        for k, v in rep.env.items():
            print(f"{k}: {v}")
        rep.notes += dtype_notes(not cpu)
        if not cpu:
            rep.copy_gbps, _ = ct.measure_copy(args.reps, args.warmup)
            print(f"copy bandwidth (2 GiB): {rep.copy_gbps:.0f} GB/s", flush=True)
        bench.started = time.perf_counter()
        for g in groups:
            bench.run_group(g, lambda: write_outputs(rep, args))
            print(f"  ({time.perf_counter() - bench.started:.0f} s so far)", flush=True)
        write_outputs(rep, args)
    finally:
        nj.close()
    print()
    print(render_summary(rep))
    print(f"\nwrote {args.doc}, {args.json_out}"
          + (f", {args.section_out}" if args.section_out else ""))
    bad = [r for r in rep.rows
           if r.error or r.passed is False
           or r.normjit.status not in ("ok", "unsupported", "not run")]
    return 1 if bad else 0


def precompile(args: argparse.Namespace, groups: list[list[Case]]) -> int:
    """Every selected spec through NVRTC for args.precompile, without a GPU."""
    try:
        nj = ct.Normjit(Path(args.lib))
        engine = nj.create_engine(cache_dir=args.cache_dir)
    except (OSError, ImportError, _capi.NormjitError) as e:
        print(f"bench_variants: cannot use {args.lib}: {e}", file=sys.stderr)
        return 2
    failed = 0
    try:
        for spec in dict.fromkeys(g[0].variant.spec(g[0].hidden) for g in groups):
            compiled = ctypes.c_int()
            t0 = time.perf_counter()
            status = nj.lib.normjit_precompile(engine, spec.encode(), args.precompile.encode(),
                                               ctypes.byref(compiled))
            dt = time.perf_counter() - t0
            if status:
                failed += 1
                print(f"FAIL  {spec}: {nj.lib.error(status)}")
            else:
                print(f"ok    {spec} ({'compiled' if compiled.value else 'cached'}, {dt:.2f} s)")
    finally:
        nj.destroy_engine(engine)
    return 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.selftest:
        return selftest(Path(args.lib))
    if args.from_json:
        return ct.render_from_json(args, "variants", report_from_json, merge_reports,
                                   write_section, write_json)
    variants = select_variants(args.only)
    if not variants:
        print(f"bench_variants: --only {args.only!r} selects no variant", file=sys.stderr)
        return 2
    if args.cpu_check:
        groups = grid(variants, False, args.token_list or [1, 3, 16],
                      args.hidden_list or [256, 512])
        args.reps, args.warmup = min(args.reps, 3), min(args.warmup, 1)
    else:
        groups = grid(variants, args.quick, args.token_list, args.hidden_list)
    if args.list:
        for g in groups:
            for c in g:
                v = c.variant
                print(f"{c.key:34s} {v.bytes_moved(c.tokens, c.hidden) / 1e6:10.2f} MB  "
                      f"{v.spec(c.hidden)}")
        # Each group compiles its expression (and a residual variant's in-place form too), once
        # more where it has tokens = 1 (dynamo specializes a size of 1).
        compiles = sum((1 + any(c.tokens == 1 for c in g)) * (2 if g[0].variant.residual else 1)
                       for g in groups)
        print(f"{sum(len(g) for g in groups)} cases in {len(groups)} groups: {len(groups)} "
              f"normjit kernels, {compiles} torch.compile compiles")
        return 0
    if args.precompile:
        return precompile(args, groups)
    argv_text = sys.argv if argv is None else ["tools/bench_variants.py", *argv]
    return run(args, groups, shlex.join(["python3", *argv_text]))


# ---------------------------------------------------------------------------------------
# Self-test (no GPU, no torch)
# ---------------------------------------------------------------------------------------

def fake_report() -> Report:
    ok = lambda us, err=3e-3, ulps=0.5: Timing(status="ok", us=us, times_us=[us] * 3,  # noqa: E731
                                               rel_err=err, ulps=ulps)
    passed = lambda **kw: Check(**{"rel_err": 2.9e-3, "max_abs_err": 0.02,  # noqa: E731
                                   "ulps": 0.5, "nonfinite": 0, "passed": True, **kw})
    v1, v3 = VARIANT_BY_KEY["add-rmsnorm"], VARIANT_BY_KEY["fp8-out"]
    rows = [
        Row("add-rmsnorm", 16384, 4096, v1.bytes_moved(16384, 4096), normjit=ok(190.0),
            eager=ok(900.0), compile=ok(200.0), liger=ok(210.0), flashinfer=ok(209.0),
            vllm=ok(247.0),
            copy=ok(180.0), separate=ok(160.0), compile_inplace=ok(228.0),
            check=passed(h_mismatches=0)),
        Row("add-rmsnorm", 1, 4096, v1.bytes_moved(1, 4096), rotation=256, normjit=ok(2.5),
            eager=ok(31.0), compile=ok(4.1), liger=Timing(status="failed", message="boom | x"),
            flashinfer=ok(2.4), copy=ok(2.2), check=passed(h_mismatches=3, passed=False)),
        Row("fp8-out", 4096, 8192, v3.bytes_moved(4096, 8192), normjit=ok(60.0, 2.2e-2, 0.5),
            eager=ok(400.0), compile=ok(66.0), liger=Timing(status="absent"),
            flashinfer=Timing(status="absent"), copy=ok(55.0),
            check=passed(rel_err=2.2e-2, ulps=0.5)),
        Row("fp8-out", 16, 8192, v3.bytes_moved(16, 8192), normjit=ok(3.0, math.nan, math.nan),
            eager=ok(40.0), compile=ok(5.0), flashinfer=Timing(status="absent"), copy=ok(2.9),
            check=Check(rel_err=math.nan, max_abs_err=math.nan, ulps=math.nan, nonfinite=7)),
        Row("gemma", 4096, 2048, VARIANT_BY_KEY["gemma"].bytes_moved(4096, 2048),
            normjit=Timing(status="unsupported", message="weight_offset: not on sm_80"),
            eager=ok(50.0), compile=Timing(status="failed", message="BackendCompilerFailed: x"),
            copy=ok(10.0)),
        Row("qk-norm", 128, Q_WIDTH, VARIANT_BY_KEY["qk-norm"].bytes_moved(128, Q_WIDTH),
            normjit=ok(4.0), eager=ok(20.0), compile=ok(6.0), copy=ok(3.5),
            check=passed(untouched=True)),
        Row("qk-norm", 16, Q_WIDTH, 0, error="OutOfMemoryError: x"),
        Row("add-layernorm", 16384, 16384, 0, skipped="the time budget (--budget-s 330) ran out"),
    ]
    return Report(env={"device": "FakeGPU (132 SMs)", "PyTorch": "2.11.0"},
                  command="python3 tools/bench_variants.py --selftest",
                  date_utc="2026-01-01 00:00 UTC",
                  settings={"reps": 20, "warmup": 3, "seed": 5}, copy_gbps=3000.0, rows=rows,
                  planned=9, prepares=[{"spec": v1.spec(4096), "seconds": 0.3, "kind": "nvrtc"}],
                  compiles=[{"variant": "add-rmsnorm", "hidden": 4096, "tokens": 16384,
                             "seconds": 4.0}],
                  notes=["Variant 2's output dtype: a note."],
                  warnings=["fp8-out h8192 t16: PyTorch eager is off"])


def selftest(lib: Path) -> int:
    # Variants: unique, their specs and bytes as the issue defines them.
    assert len({v.key for v in VARIANTS}) == len({v.number for v in VARIANTS}) == 7
    v = VARIANT_BY_KEY
    assert v["add-rmsnorm"].spec(4096) == ("op=rmsnorm shape=1,4096 dtype=bf16 normalized_dims=1 "
                                           "affine=weight eps=1e-06 residual=bf16")
    assert v["combined"].spec(8192).endswith(
        "eps=1e-06 param_dtype=f32 out_dtype=e4m3 residual=bf16 weight_offset=1"), (
        v["combined"].spec(8192))
    assert v["qk-norm"].spec(Q_WIDTH) == ("op=rmsnorm shape=1,32,128 dtype=bf16 normalized_dims=1 "
                                          "affine=weight eps=1e-06")
    assert v["add-layernorm"].spec(2048) == ("op=layernorm shape=1,2048 dtype=bf16 "
                                             "normalized_dims=1 affine=both "
                                             "eps=1e-05 residual=bf16")
    assert v["gemma"].spec(2048).endswith("eps=1e-06 weight_offset=1")
    n = 4096 * 4096
    assert v["add-rmsnorm"].bytes_moved(4096, 4096) == 8 * n + 2 * 4096
    assert v["f32-weight"].bytes_moved(4096, 4096) == 4 * n + 4 * 4096
    assert v["fp8-out"].bytes_moved(4096, 4096) == 3 * n + 2 * 4096
    assert v["combined"].bytes_moved(4096, 4096) == 7 * n + 4 * 4096
    assert v["add-layernorm"].bytes_moved(4096, 4096) == 8 * n + 4 * 4096
    assert v["qk-norm"].bytes_moved(16, 12345) == 4 * 16 * 4096 + 2 * 128
    for var in VARIANTS:
        src = var.source()
        assert src.startswith("def pt_") and "return" in src, src
    assert "float8_e4m3fn" in v["combined"].source()

    # Launch arguments: in place, residual, scale, two-level strides.
    ptrs = {"x": 0x1000, "y": 0x2000, "r": 0x3000, "w": 0x4000, "b": 0x5000, "scale": 0x6000}
    f = launch_fields(v["add-rmsnorm"], 7, ptrs)
    assert f["y"] == f["x"] == 0x1000 and f["residual"] == f["residual_out"] == 0x3000
    assert f["bias"] is None and f["scale"] is None and f["batch"] == 7 and f["inner_rows"] == 1
    f = launch_fields(v["combined"], 7, ptrs)
    assert f["y"] == 0x2000 and f["scale"] == 0x6000 and f["residual_out"] == 0x3000
    # Separate outputs: y and h where given, x and the residual only read.
    f = launch_fields(v["add-rmsnorm"], 7, {**ptrs, "h": 0x7000})
    assert f["y"] == 0x2000 and f["x"] == 0x1000 and f["residual_out"] == 0x7000
    assert f["residual"] == 0x3000
    f = launch_fields(v["qk-norm"], 5, ptrs)
    assert f["batch"] == 5 * 32 and f["inner_rows"] == 32 and f["x_strides"] == (6144, 128)
    assert f["y_strides"] == (0, 0) and f["residual"] is None and f["y"] == 0x2000
    f = launch_fields(v["add-layernorm"], 3, ptrs)
    assert f["bias"] == 0x5000 and f["y"] == 0x1000
    a = _capi.LaunchArgs()
    fill_launch_args(a, launch_fields(v["qk-norm"], 5, ptrs))
    assert a.batch == 160 and a.inner_rows == 32 and list(a.x_strides) == [6144, 128]
    assert a.x == 0x1000 and a.y == 0x2000 and a.residual is None and a.eps == EPS_RMS

    # The grid.
    groups = grid(list(VARIANTS), False)
    cases = [c for g in groups for c in g]
    assert len(groups) == 6 * 4 + 1 and len(cases) == 6 * (2 * 6 + 2 * 3) + 6, len(cases)
    assert all(all(g[i].tokens > g[i + 1].tokens for i in range(len(g) - 1)) for g in groups)
    assert all(len({(c.variant, c.hidden) for c in g}) == 1 for g in groups)
    assert {c.tokens for c in cases if c.hidden == 2048} == set(EDGE_TOKENS)
    assert {c.hidden for c in cases if c.variant.qk} == {Q_WIDTH}
    first = [(g[0].variant.number, g[0].hidden) for g in groups[:13]]
    assert first[:3] == [(1, 4096), (1, 8192), (2, 4096)] and (5, Q_WIDTH) in first, first
    assert [(g[0].variant.number, g[0].hidden) for g in groups[13:15]] == [(1, 2048), (1, 16384)]
    quick = [c for g in grid(list(VARIANTS), True) for c in g]
    assert len(quick) == 7 * 2 and {c.hidden for c in quick} == {4096}
    assert [x.key for x in select_variants("1,qk,7")] == ["add-rmsnorm", "qk-norm", "add-layernorm"]
    assert [x.number for x in select_variants("rmsnorm")] == [1]
    # a number is its variant alone: "3" is not also a substring of "f32-weight"
    assert [x.key for x in select_variants("3")] == ["fp8-out"]
    assert [x.key for x in select_variants("f32")] == ["f32-weight"]
    assert select_variants(None) == list(VARIANTS) and select_variants("nope") == []
    g = grid([v["gemma"]], False, [5, 9], [300])
    assert [(c.hidden, c.tokens) for c in g[0]] == [(300, 9), (300, 5)]

    # Arguments.
    saved = {k: os.environ.get(k) for k in ("OUT", "NORMJIT_LIBRARY")}
    try:
        for k in saved:
            os.environ.pop(k, None)
        a = parse_args([])
        assert a.reps == 20 and a.warmup == 3 and a.lib.endswith("build/libnormjit.so")
        assert a.json_out.endswith("build/perf_variants.json") and a.section_out is None
        assert a.doc == str(REPO / "docs" / "performance.md") and a.budget_s == 330
        a = parse_args(["--quick", "--build", "build-gpu", "--tokens", "1,8"])
        assert a.reps == 10 and a.lib == str(REPO / "build-gpu" / "libnormjit.so")
        assert a.token_list == [1, 8] and a.hidden_list is None
        os.environ["NORMJIT_LIBRARY"] = "/x/libnormjit.so"
        os.environ["OUT"] = "/tmp/out-v"
        a = parse_args([])
        assert a.lib == "/x/libnormjit.so" and a.json_out == "/tmp/out-v/perf_variants.json"
        assert a.section_out == "/tmp/out-v/variants.md"
        assert parse_args(["--lib", "/y.so"]).lib == "/y.so"
    finally:
        for k, val in saved.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val

    # Markdown of a fake run.
    rep = fake_report()
    md = render_section(rep)
    assert md.startswith(ct.VARIANTS_BEGIN) and md.endswith(ct.VARIANTS_END)
    tables = ct.check_tables(md)
    summary = [t for t in tables if t[0][0] == "variant"]
    assert len(summary) == 1 and [r[0] for r in summary[0][1:]] == [
        "1. add-rmsnorm", "3. fp8-out", "4. gemma", "5. qk-norm", "7. add-layernorm"], summary
    s = {r[0]: r for r in summary[0][1:]}
    assert s["1. add-rmsnorm"][2:] == [
        "2 of 2; y and h separate: 1 of 1; in place against compile in place: 1 of 1",
        "1 of 2", "1 of 1", "95–95%", "**1 FAIL**, 1 of 2 pass"], s
    assert s["7. add-layernorm"][1] == "0" and s["5. qk-norm"][6] == "1 of 1 pass, 1 error"
    assert s["7. add-layernorm"][3:5] == ["no such kernel"] * 2, s
    assert s["3. fp8-out"][3:5] == ["absent", "not run"], s
    assert s["4. gemma"][3:5] == ["not run", "no such kernel"], s
    assert s["5. qk-norm"][3:5] == ["not run", "not run"], s
    fi = ("flashinfer",)
    per = [t for t in tables if t[0][0] == "tokens"]
    assert len(per) == 5
    assert per[0][0] == table_headers(True, True, ENGINES)
    assert per[1][0] == table_headers(False, False, ENGINES)
    assert per[4][0] == table_headers(False, True)
    col = {h: i for i, h in enumerate(table_headers(True, True, ENGINES))}
    r1 = per[0][1]  # sorted by tokens: t1 first
    assert r1[col["tokens"]] == "1" and r1[col["normjit µs"]] == "2.50"
    assert r1[col["Liger µs"]] == "failed" and r1[col["check"]] == "**FAIL**"
    r2 = per[0][2]
    assert r2[col["normjit µs"]] == "190.0" and r2[col["eager µs"]] == "900.0"
    assert r2[col["% of copy"]] == "95%" and r2[col["vs compile"]] == "1.05x", r2
    assert r2[col["separate µs"]] == "160.0" and r2[col["separate vs compile"]] == "1.25x", r2
    assert r2[col["compile in place µs"]] == "228.0" and r2[col["vs compile in place"]] == "1.20x"
    assert r1[col["compile in place µs"]] == "not run" and r1[col["vs compile in place"]] == "—"
    assert r2[col["FlashInfer µs"]] == "209.0" and r2[col["vs FlashInfer"]] == "1.10x", r2
    assert r1[col["FlashInfer µs"]] == "2.40" and r1[col["vs FlashInfer"]] == "0.96x", r1
    assert r2[col["vLLM µs"]] == "247.0" and r2[col["vs vLLM"]] == "1.30x", r2
    assert r1[col["vLLM µs"]] == "not run" and r1[col["vs vLLM"]] == "—", r1
    # The in-place peer: h over the residual, y over x where the variant has y over x.
    import types
    fake_torch_tensor = types.SimpleNamespace
    for key, y_back in (("add-rmsnorm", None), ("combined", "y")):
        got = {}
        var = dataclasses.replace(v[key], expression=lambda x, r, *rest: ("y", "h"))
        x_t = fake_torch_tensor(copy_=lambda val: got.__setitem__("x", val))
        r_t = fake_torch_tensor(copy_=lambda val: got.__setitem__("r", val))
        assert in_place(var)(x_t, r_t, "w") == y_back
        assert got == ({"x": "y", "r": "h"} if var.y_over_x else {"r": "h"}), (key, got)
    assert r1[col["separate µs"]] == "not run" and r1[col["separate vs compile"]] == "—", r1
    assert r2[col["error (rel. / max)"]] == "2.9e-03 / 0.50 ulp" and r2[col["check"]] == "pass"
    assert r2[col["MB moved"]] == "536.9" and r1[col["MB moved"]] == "0.041", (r1, r2)
    col = {h: i for i, h in enumerate(table_headers(False, False, ENGINES))}
    fp8 = {r[col["tokens"]]: r for r in per[1][1:]}
    assert (fp8["4096"][col["FlashInfer µs"]] == "absent"
            and fp8["4096"][col["vs FlashInfer"]] == "—")
    assert (fp8["16"][col["error (rel. / max)"]] == "NaN / NaN"
            and fp8["16"][col["check"]] == "**FAIL**")
    assert fp8["4096"][col["error (rel. / max)"]] == "2.2e-02 / 0.50 ulp"
    gem = per[2][1]
    assert per[2][0] == table_headers(True, False, fi)
    col = {h: i for i, h in enumerate(table_headers(True, False, fi))}
    assert gem[col["normjit µs"]] == "unsupported" and gem[col["compile µs"]] == "failed"
    assert gem[col["check"]] == "unsupported" and gem[col["vs compile"]] == "—"
    assert per[3][0] == table_headers(False, False, ENGINES)
    col = {h: i for i, h in enumerate(table_headers(False, False, ENGINES))}
    qk = {r[0]: r for r in per[3][1:]}
    assert qk["16"][col["check"]] == "error" and qk["128"][col["hidden"]] == "32x128"
    assert per[4][1][{h: i for i, h in enumerate(table_headers(False, True))}["check"]] == "skipped"
    for needle in ("Incomplete run: 7 of 9", "FakeGPU",
                   "`python3 tools/bench_variants.py --selftest`",
                   "3000 GB/s", "3 h elements off", "OutOfMemoryError",
                   "unsupported: weight_offset: not on sm_80", "1 cases skipped",
                   "PyTorch eager is off", "random seed 5", "def pt_add_rmsnorm(x, r, w):",
                   "residual=bf16`", "Variant 2's output dtype", "liger failed: boom | x",
                   "torch.compile compiled 1 times"):
        assert needle in md, needle
    print(render_summary(rep))

    # JSON round trip: the section rendered from the file is the same.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.json"
        write_json(rep, path)
        data = json.loads(path.read_text())
        assert data["rows"][3]["check"]["rel_err"] is None  # NaN as null
        assert abs(data["rows"][0]["derived"]["pct_copy"] - 100 * 180 / 190) < 1e-9
        assert data["variants"]["qk-norm"]["pytorch"].startswith("def pt_qk_rmsnorm")
        assert render_section(report_from_json(data)) == md, "re-rendered from JSON"

        # The section in performance.md: created, replaced in place, inserted where
        # compare_torch.py keeps it, and kept when compare_torch.py rewrites the file.
        doc = Path(tmp) / "docs" / "performance.md"
        write_section(rep, doc, Path(tmp) / "section.md")
        assert doc.read_text() == md + "\n" == (Path(tmp) / "section.md").read_text()
        base = "# normjit performance\n\n## Results\n\nx\n\n## Analysis per kernel\n\nnotes\n"
        doc.write_text(base)
        write_section(rep, doc)
        text = doc.read_text()
        assert text.index(ct.VARIANTS_BEGIN) < text.index("## Analysis per kernel")
        assert text.startswith("# normjit performance") and text.endswith("notes\n")
        rep.rows = rep.rows[:1]
        rep.planned = 1
        write_section(rep, doc)
        text2 = doc.read_text()
        assert text2.count(ct.VARIANTS_BEGIN) == 1 == text2.count(ct.VARIANTS_END)
        assert "Incomplete run" not in text2 and text2.endswith("notes\n")
        block = text2[text2.index(ct.VARIANTS_BEGIN):
                      text2.index(ct.VARIANTS_END) + len(ct.VARIANTS_END)]
        args = argparse.Namespace(notes=str(Path(tmp) / "notes.md"), plot=str(Path(tmp) / "p.png"),
                                  doc=str(doc), json_out=str(Path(tmp) / "perf.json"),
                                  host_cost=str(Path(tmp) / "host-cost.md"))
        ct.write_outputs(ct.fake_report(), args, final=False)
        regenerated = doc.read_text()
        assert block in regenerated and "## Copy bandwidth" in regenerated
        assert regenerated.index(block) < regenerated.index("## Analysis per kernel")
        # --from-json into that document.
        assert main(["--from-json", str(path), "--doc", str(doc)]) == 0
        final = doc.read_text()
        assert "## Copy bandwidth" in final and final.count(ct.VARIANTS_BEGIN) == 1
        assert "Incomplete run: 7 of 9" in final
        # Two runs merged: the second's measured case replaces the first's skipped one.
        second = fake_report()
        second.rows = [dataclasses.replace(second.rows[0], variant="add-layernorm", tokens=16384,
                                           hidden=16384)]
        second.command = "python3 tools/bench_variants.py --only 7"
        path2 = Path(tmp) / "v2.json"
        write_json(second, path2)
        assert main(["--from-json", f"{path},{path2}", "--doc", str(doc)]) == 0
        merged = doc.read_text()
        # (compare_torch's fake report is incomplete too: "problems measured")
        assert "cases measured" not in merged and "1 cases skipped" not in merged
        assert "--selftest` ; `python3 tools/bench_variants.py --only 7`" in merged
        assert merged.count(ct.VARIANTS_BEGIN) == 1 and "## Copy bandwidth" in merged

    # --list runs without torch.
    assert main(["--list", "--only", "qk"]) == 0
    # libnormjit.so, when built: the launch arguments reach normjit_launch_ex, which takes the
    # struct (its size) and answers the missing kernel with a readable error (no GPU needed).
    if lib.exists():
        api = CApi(lib, None, memory_only=True)
        try:
            for var in VARIANTS:
                a = api.new_args()
                assert a.size == ctypes.sizeof(a) and a.inner_rows == 1
                fill_launch_args(a, launch_fields(var, 5, ptrs))
                try:
                    api.bind(0, a, 0)()
                    raise AssertionError("a NULL kernel must not launch")
                except _capi.InvalidArgumentError as e:
                    assert "kernel" in e.message, e
        finally:
            api.close()
        print(f"selftest: {lib} takes the launch arguments of every variant (a NULL kernel is "
              "refused by name); --precompile ARCH compiles every spec with it")
    else:
        print(f"selftest: {lib} not built, C API not exercised")
    print("selftest: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
