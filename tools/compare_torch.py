#!/usr/bin/env python3
"""normjit against PyTorch, side by side, on the GPU machine.

For every problem (the seed problems of docs/design.md plus LLM rows and Stable Diffusion
GroupNorm shapes) this script
  * runs normjit through its C API (libnormjit.so, by the normjit package's ctypes binding,
    python/normjit/_capi.py) on PyTorch tensors,
  * checks normjit's output against a float64 reference computed by PyTorch on the device,
  * times normjit, the PyTorch eager reference module, torch.compile of that module,
    Liger-Kernel's forward where it has the problem (checked against the same float64
    reference), the hand-written CUDA RMSNorm of FlashInfer and of vLLM where they have the
    problem (tools/kernel_peers.py) and a device-to-device copy of the problem's own bytes (median
    of CUDA events after warm-up),
and writes docs/performance.md (tables, device, versions, copy bandwidth, JIT latency,
the hand-written notes of docs/performance-notes.md), docs/performance.png (% of copy
bandwidth per problem) and the raw results as JSON.

    python3 tools/compare_torch.py                      # everything
    python3 tools/compare_torch.py --only seeds --quick  # the six seed cases, few repetitions
    python3 tools/compare_torch.py --list                # the problems, no GPU needed
    python3 tools/compare_torch.py --selftest            # the non-GPU parts, no torch needed
    python3 tools/compare_torch.py --refresh-notes       # re-include the notes, no GPU needed

Exit status: 0 when every normjit result that ran is correct (unsupported operators
included), 1 when a normjit check failed or a normjit call errored, 2 when it could not
start (no PyTorch, no GPU, libnormjit.so not loadable). Outputs are rewritten after every
problem, so a run cut off by a time limit still leaves what it measured.

Only the standard library is imported at module level: torch, matplotlib are imported where
they are used, so that --list and --selftest run on the build machine (no GPU, no torch).
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import gc
import json
import math
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import kernel_peers  # noqa: E402  (the engines' kernels as peers: stdlib only at import)

# Tolerances of docs/../shared/gpu.md: relative L2 error against the float64 reference.
TOLERANCE = {"f32": 1e-5, "f16": 1e-2, "bf16": 1e-2}
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}

# The float64 reference is computed this many elements at a time (along dim 0), so that
# the 7.5 GB seeds stay far from the 80 GB of the device: a few float64 temporaries of
# 256 MB each per chunk.
REFERENCE_CHUNK_ELEMENTS = 1 << 25

# Where tensors live. Only a test on a machine without a GPU changes it (to "cpu", with
# torch.cuda stubbed), to run the whole flow there.
DEVICE = "cuda"

# Device-to-device copy used as the bandwidth yardstick (bytes of one tensor; counted
# twice, read + write). 2 GiB, as in gpu.md.
COPY_BYTES = 2 << 30

# Liger-Kernel 0.8.5 keeps a whole row in one Triton block: calculate_settings() in
# liger_kernel/ops/utils.py raises when next_power_of_2(row) exceeds this.
LIGER_MAX_ROW = 65536
# The peers normjit is ranked against (the copy is a floor, not a peer).
PEERS = ("eager", "compile", "liger", "flashinfer", "vllm")
# The inference engines' hand-written kernels among them (tools/kernel_peers.py).
ENGINES = ("flashinfer", "vllm")
PEER_TITLES = {"eager": "eager", "compile": "compile", "liger": "Liger",
               **{k: kernel_peers.PEERS[k].title for k in ENGINES}}


# ---------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputDist:
    """Normal distribution of the input for one correctness check."""
    mean: float
    std: float

    def label(self) -> str:
        return f"N({self.mean:g}, {self.std:g})"


# The first distribution is used for timing and for checking eager/compile too; the others
# only re-check normjit. Large offsets stress the variance (a naive E[x^2] - mean^2 fails
# them); tiny values stress eps handling. All include negative values.
DISTS_RMS = (InputDist(1.0, 2.0), InputDist(0.0, 1e-3))
DISTS_MEANVAR = (InputDist(3.0, 1.5), InputDist(100.0, 1.0))


@dataclass(frozen=True)
class Problem:
    """One normalization problem in one dtype.

    op:              rmsnorm | layernorm | groupnorm
    normalized_dims: rmsnorm: 0 = channel form (reduce dim 1 of [N, C, *spatial]),
                     k > 0 = the last k dims; layernorm: the last k dims.
    groups:          groupnorm only.
    affine:          none | weight | both (weight and bias).
    """
    name: str
    # group: seeds | llm | sd | long | odd | decode | transformer | channels: a table of its
    # own in the document
    group: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    eps: float
    normalized_dims: int = 0
    groups: int = 0
    affine: str = "none"
    quick: bool = False      # part of the --quick selection

    @property
    def key(self) -> str:
        return f"{self.name} {self.dtype}"

    @property
    def dists(self) -> tuple[InputDist, ...]:
        return DISTS_RMS if self.op == "rmsnorm" else DISTS_MEANVAR

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def param_shape(self) -> tuple[int, ...]:
        """Shape of weight and bias."""
        if self.op == "groupnorm" or self.normalized_dims == 0:  # per channel
            return (self.shape[1],)
        return self.shape[len(self.shape) - self.normalized_dims:]

    @property
    def param_count(self) -> int:
        """Number of parameter tensors (weight, bias)."""
        return {"none": 0, "weight": 1, "both": 2}[self.affine]

    @property
    def bytes_moved(self) -> int:
        """The floor's bytes: x read once, y written once, parameters read once."""
        elements = 2 * self.numel + self.param_count * math.prod(self.param_shape)
        return elements * ELEMENT_BYTES[self.dtype]

    @property
    def reduces_dim0(self) -> bool:
        """True when dim 0 is inside a reduction, so the reference cannot chunk along it."""
        trailing = self.op != "groupnorm" and self.normalized_dims > 0
        return trailing and self.normalized_dims >= len(self.shape)

    def describe(self) -> str:
        """What is reduced and which parameters there are, for the table."""
        if self.op == "groupnorm":
            what = f"G={self.groups}"
        elif self.normalized_dims == 0:
            what = "dim 1"
        else:
            what = "last dim" if self.normalized_dims == 1 else f"last {self.normalized_dims} dims"
        params = {"none": "", "weight": ", w", "both": ", w+b"}[self.affine]
        return what + params

    def validate(self) -> None:
        assert self.op in ("rmsnorm", "layernorm", "groupnorm"), self.op
        assert self.dtype in ELEMENT_BYTES, self.dtype
        assert self.affine in ("none", "weight", "both"), self.affine
        assert all(s > 0 for s in self.shape), self.shape
        assert self.eps > 0
        if self.op == "rmsnorm":
            assert self.affine != "both", "RMSNorm has no bias"
            assert 0 <= self.normalized_dims <= len(self.shape)
            if self.normalized_dims == 0:
                assert len(self.shape) >= 2, "channel form needs [N, C, ...]"
        elif self.op == "layernorm":
            # 0: the channel form (dim 1 of [N, C, ...]: LayerNorm2d), the backward tables'
            assert 0 <= self.normalized_dims <= len(self.shape)
            if self.normalized_dims == 0:
                assert len(self.shape) >= 2, "channel form needs [N, C, ...]"
        else:
            assert len(self.shape) >= 2 and self.groups > 0 and self.shape[1] % self.groups == 0
            # torch.nn.GroupNorm has weight and bias together or neither.
            assert self.affine in ("none", "both"), "torch.nn.GroupNorm: affine none or both"


def default_problems() -> list[Problem]:
    """The problem list. Add a line here to measure another shape."""
    problems: list[Problem] = []
    # The seed problems of docs/design.md, fp32 as in the original and bf16.
    for dtype in ("f32", "bf16"):
        problems += [
            Problem("seed rmsnorm", "seeds", "rmsnorm", (112, 64, 512, 512), dtype, 1e-5,
                    normalized_dims=0, affine="none", quick=True),
            Problem("seed layernorm", "seeds", "layernorm", (16, 64, 256, 256), dtype, 1e-5,
                    normalized_dims=3, affine="both", quick=True),
            Problem("seed groupnorm", "seeds", "groupnorm", (112, 64, 512, 512), dtype, 1e-5,
                    groups=8, affine="both", quick=True),
        ]
    # LLM rows: [tokens, hidden] in bf16, RMSNorm (Llama: eps 1e-6, weight) and LayerNorm.
    tokens = 4096
    for hidden in (4096, 8192, 16384):
        problems += [
            Problem(f"llm rmsnorm h{hidden}", "llm", "rmsnorm", (tokens, hidden), "bf16", 1e-6,
                    normalized_dims=1, affine="weight", quick=hidden == 4096),
            Problem(f"llm layernorm h{hidden}", "llm", "layernorm", (tokens, hidden), "bf16",
                    1e-5, normalized_dims=1, affine="both", quick=hidden == 4096),
        ]
    # Stable Diffusion UNet GroupNorm (32 groups): SD 1.5 at 512x512 with classifier-free
    # guidance (batch 2) on the latent resolutions of each channel count, and a batch of 8.
    # f16 variants exist too; the default --dtypes leaves them out.
    for n, c, h, w in ((2, 320, 64, 64), (2, 640, 32, 32), (2, 1280, 16, 16), (8, 1280, 32, 32)):
        for dtype in ("f32", "bf16", "f16"):
            problems.append(
                Problem(f"sd groupnorm c{c} {h}x{w} b{n}", "sd", "groupnorm", (n, c, h, w), dtype,
                        1e-5, groups=32, affine="both", quick=(c == 320 and dtype == "bf16")))
    # Rows longer than the split kernel keeps in registers on the whole chip (f32: over 4 Mi
    # elements on 132 SMs): each row streams over every SM and x is read twice.
    for dtype in ("f32", "bf16"):
        problems += [
            Problem("long layernorm 16Mi", "long", "layernorm", (4, 16777216), dtype, 1e-5,
                    normalized_dims=1, affine="both"),
            Problem("long rmsnorm 64Mi", "long", "rmsnorm", (2, 67108864), dtype, 1e-6,
                    normalized_dims=1, affine="weight"),
        ]
    # Shapes off the aligned path, so the tables show them too: GroupNorm on 7x7 maps (a
    # ResNet-50 last stage with 32 groups: odd S, vectors span channels), an odd hidden size
    # (scalar accesses), rows of 65537 (split over CTAs, scalar) and rows of 7 elements.
    problems += [
        Problem("groupnorm 7x7", "odd", "groupnorm", (32, 2048, 7, 7), "f32", 1e-5, groups=32,
                affine="both"),
        Problem("groupnorm 7x7", "odd", "groupnorm", (32, 2048, 7, 7), "bf16", 1e-5, groups=32,
                affine="both"),
        Problem("layernorm h4097", "odd", "layernorm", (4096, 4097), "bf16", 1e-5,
                normalized_dims=1, affine="both"),
        Problem("layernorm 65537", "odd", "layernorm", (96, 65537), "f32", 1e-5,
                normalized_dims=1, affine="both"),
        Problem("layernorm 7", "odd", "layernorm", (65536, 7), "f32", 1e-5, normalized_dims=1,
                affine="both"),
    ]
    # Issue 21's classes. LLM decode: the norm of one decoder layer for a batch of 1 to 128
    # sequences (bf16, Llama's RMSNorm with weight).
    for tokens in (1, 8, 32, 128):
        for hidden in (4096, 8192):
            problems.append(
                Problem(f"decode rmsnorm {tokens}x{hidden}", "decode", "rmsnorm", (tokens, hidden),
                        "bf16", 1e-6, normalized_dims=1, affine="weight",
                        quick=tokens == 1 and hidden == 4096))
    # Transformer rows of 768 and 1024 features: ViT-B/16 and ViT-L/16 at 224 (197 tokens,
    # batches 64 and 32; eps 1e-6), BERT-base and BERT-large at 512 tokens (eps 1e-12).
    for name, shape, eps in (("vit-b", (64 * 197, 768), 1e-6), ("vit-l", (32 * 197, 1024), 1e-6),
                             ("bert-base", (32 * 512, 768), 1e-12),
                             ("bert-large", (16 * 512, 1024), 1e-12)):
        for dtype in ("f32", "bf16", "f16"):
            problems.append(
                Problem(f"{name} layernorm", "transformer", "layernorm", shape, dtype, eps,
                        normalized_dims=1, affine="both", quick=name == "vit-b"))
    # Channel-form RMSNorm with a weight on many channels and small maps (ResNet/ConvNeXt late
    # stages), and GroupNorm on 14x14 maps.
    for n, c, h in ((32, 512, 14), (32, 1024, 14), (32, 2048, 7)):
        for dtype in ("f32", "bf16"):
            problems.append(
                Problem(f"channels rmsnorm c{c} {h}x{h}", "channels", "rmsnorm", (n, c, h, h),
                        dtype, 1e-6, normalized_dims=0, affine="weight"))
    for dtype in ("f32", "bf16"):
        problems.append(
            Problem("groupnorm 14x14", "channels", "groupnorm", (32, 1024, 14, 14), dtype, 1e-5,
                    groups=32, affine="both"))
    # Odd hidden sizes next to the LLM ones: one under (1023) and one over (4097) a power of two.
    for hidden in (1023, 4097):
        problems.append(
            Problem(f"rmsnorm h{hidden}", "odd", "rmsnorm", (4096, hidden), "bf16", 1e-6,
                    normalized_dims=1, affine="weight"))
    problems.append(
        Problem("layernorm h1023", "odd", "layernorm", (4096, 1023), "bf16", 1e-5,
                normalized_dims=1, affine="both"))
    return problems


GROUP_TITLES = {
    "seeds": "Seed problems (docs/design.md)",
    "llm": "LLM rows (bf16, [tokens, hidden])",
    "sd": "Stable Diffusion GroupNorm (32 groups)",
    "long": "Rows past what the chip holds in registers (streamed: x read twice)",
    "odd": "Odd sizes (ResNet GroupNorm on 7x7 maps, odd and tiny rows)",
    "decode": "LLM decode rows (bf16 RMSNorm with weight, 1 to 128 tokens)",
    "transformer": "Transformer rows of 768 and 1024 features (ViT, BERT LayerNorm)",
    "channels": "Many channels on small maps (channel-form RMSNorm with weight, GroupNorm 14x14)",
}


def select_problems(problems: list[Problem], only: Optional[str], dtypes: list[str],
                    quick: bool) -> list[Problem]:
    """--only: comma-separated tokens, each a group (seeds, llm, sd), an op (rmsnorm, ...) or
    a substring of the problem name; a problem is kept when any token matches."""
    tokens = [t.strip() for t in only.split(",") if t.strip()] if only else []
    selected = []
    for p in problems:
        if p.dtype not in dtypes:
            continue
        if quick and not p.quick:
            continue
        if tokens and not any(t in (p.group, p.op) or t in p.name for t in tokens):
            continue
        selected.append(p)
    return selected


# The forward of Liger-Kernel used for each operator (module under liger_kernel.ops, function).
LIGER_FORWARDS = {"rmsnorm": "rms_norm.rms_norm_forward",
                  "layernorm": "layer_norm.layer_norm_forward",
                  "groupnorm": "group_norm.group_norm_forward"}


def liger_support(p: Problem) -> str:
    """Why Liger-Kernel (0.8.5, read from its source) cannot compute p, or "" when it can.
    Its RMSNorm and LayerNorm normalize the last dim of a contiguous tensor, one row per Triton
    block; several trailing dims are given to it as one (a view, no copy)."""
    fn = LIGER_FORWARDS[p.op].split(".")[1]
    if p.op == "rmsnorm" and p.normalized_dims == 0:
        return (f"Liger's {fn} normalizes the last dim only; this problem reduces dim 1 of "
                "[N, C, *spatial] (Liger would need a transposed copy of x)")
    if p.op in ("layernorm", "groupnorm") and p.affine != "both":
        return f"Liger's {fn} reads a weight and a bias: it has no form without them"
    if p.op != "groupnorm" and math.prod(p.param_shape) > LIGER_MAX_ROW:
        return (f"rows over {LIGER_MAX_ROW} elements: Liger's {fn} keeps a row in one Triton "
                f"block of at most {LIGER_MAX_ROW} (its calculate_settings raises above)")
    return ""


def liger_call(fns: dict[str, Callable], p: Problem, weight, bias) -> Callable:
    """x -> y by Liger-Kernel's forward (p supported: liger_support(p) == ""). Liger allocates
    y on every call and also writes its statistics (rstd; mean for LayerNorm/GroupNorm): only
    y is kept."""
    fn = fns[LIGER_FORWARDS[p.op]]
    if p.op == "groupnorm":
        return lambda x: fn(x, p.shape[1], p.groups, weight, bias, p.eps)[0]
    # Several trailing dims: one row of their product, parameters flattened alike.
    row = math.prod(p.param_shape)
    w = weight.reshape(row) if weight is not None else None
    if p.op == "rmsnorm":
        # casting_mode "gemma": f32 math with one cast at the end, as torch.nn.RMSNorm and
        # normjit; offset 0 (y = x * rstd * w); row_mode None (Liger picks its kernel).
        return lambda x: fn(x.view(-1, row), w, p.eps, 0.0, "gemma", None)[0].view(x.shape)
    b = bias.reshape(row)
    return lambda x: fn(x.view(-1, row), w, b, p.eps)[0].view(x.shape)


# Why an engine's CUDA norm kernels do not compute other operators.
ENGINE_OPS = {
    "flashinfer": ("FlashInfer's CUDA norm module has RMSNorm kernels only (its layernorm takes "
                   "bf16 x with f32 gamma and beta, and no form without them; no GroupNorm)"),
    "vllm": ("vLLM's layernorm_kernels.cu has RMSNorm kernels only (vLLM runs LayerNorm and "
             "GroupNorm as PyTorch's)"),
}


def engine_support(engine: str, p: Problem) -> str:
    """Why the engine's CUDA norm kernels (tools/kernel_peers.py) cannot compute p, or "" when
    they can: RMSNorm of the last dim of 16-bit x with a weight, 32-bit sizes."""
    title = PEER_TITLES[engine]
    if p.op != "rmsnorm":
        return ENGINE_OPS[engine]
    if p.normalized_dims == 0:
        return (f"{title}'s rmsnorm normalizes the last dim only; this problem reduces dim 1 "
                "of [N, C, *spatial]")
    if p.dtype not in ("f16", "bf16"):
        return f"{title}'s rmsnorm takes f16 or bf16 x here, not {p.dtype}"
    if p.affine != "weight":
        return f"{title}'s rmsnorm is timed with a weight only: this problem has none"
    if p.numel >= 2**31:
        return (f"{title}'s rmsnorm indexes its tensors with 32-bit integers; this problem has "
                "2^31 elements or more")
    return ""


def engine_call(fns: dict[str, Callable], p: Problem, weight, bias) -> Callable:
    """x -> y by an engine's rmsnorm (p supported: engine_support() == ""): several trailing
    dims as one row (a view, no copy); y allocated on each call, as its API does."""
    row = math.prod(p.param_shape)
    w = weight.reshape(row)
    fn = fns["rmsnorm"]
    return lambda x: fn(x.view(-1, row), w, p.eps).view(x.shape)


def peer_call(m: Measurement, fns: dict[str, Callable], why_absent: str,
              support: Callable[[Problem], str], call: Callable, p: Problem, weight,
              bias) -> Optional[Callable]:
    """A peer's x -> y for p (call(fns, p, weight, bias)), or None with m marked absent (its
    functions did not load: why_absent) or n/a (support(p) says why it has no such kernel)."""
    if not fns:
        m.status, m.message = "absent", why_absent
        return None
    if support(p):
        m.status, m.message = "n/a", support(p)
        return None
    return call(fns, p, weight, bias)


def load_liger(*names: str) -> tuple[dict[str, Callable], str]:
    """Liger-Kernel's functions, each named "module.function" under liger_kernel.ops, and its
    version; ({}, "not measured (why)") when they cannot be imported (an optional peer:
    scripts/perf.sh and perf_variants.sh put its wheel on PYTHONPATH)."""
    try:
        import importlib
        import importlib.metadata
        fns = {}
        for name in names:
            module_name, attr = name.rsplit(".", 1)
            module = importlib.import_module(f"liger_kernel.ops.{module_name}")
            if not hasattr(module, attr):
                raise ImportError(f"cannot import name {attr!r} from {module.__name__!r} "
                                  f"({getattr(module, '__file__', '?')})")
            fns[name] = getattr(module, attr)
        version = importlib.metadata.version("liger_kernel")
    except Exception as e:  # noqa: BLE001 - an optional peer
        return {}, f"not measured ({short_error(e)})"
    return fns, version


COPY_GRAIN = 4096  # own_copy's halves: whole 4 KiB (its docstring says why)


def copy_half(nbytes: int) -> int:
    """The bytes own_copy reads (and writes) for a problem moving nbytes: half of them, rounded
    down to whole COPY_GRAIN from COPY_GRAIN up (own_copy's docstring says why)."""
    half = max(1, nbytes // 2)
    return half - half % COPY_GRAIN if half >= COPY_GRAIN else half


def copy_rounded(nbytes: int) -> bool:
    """Whether own_copy moves less than the exact half of nbytes (a copy of a run before
    4026e8a, which moved the exact half, then took a fixed time longer)."""
    return copy_half(nbytes) != max(1, nbytes // 2)


def copy_rule_text(settings: dict) -> str:
    """The method texts' clause on the copy's size, from a report's settings: runs since
    4026e8a record copy_grain (merge_runs: "mixed" where only some of the merged runs did)."""
    rounded = ("each half rounded down to whole 4 KiB, at most 4 KiB less, since the device's "
               "memcpy of a size that is not takes a fixed time longer: "
               "docs/performance-notes.md, \"Session 75\"")
    before = ("the exact bytes in runs before 4026e8a, whose copy takes a fixed time longer where "
              "half of them is not whole 4 KiB: docs/performance-notes.md, \"Session 75\"")
    grain = settings.get("copy_grain")
    if grain == "mixed":
        return rounded + "; " + before
    return rounded if grain else before


def own_copy(nbytes: int, sets: int, device: str) -> Callable[[int], Any]:
    """fn(i): a device-to-device `copy_` moving nbytes (half read from one uint8 tensor, half
    written to another): the source i % sets, rotated like the kernels' inputs, into one
    destination, as every implementation writes one output; the tensors live as long as fn.
    A half of 4 KiB or more is rounded down to whole 4 KiB (COPY_GRAIN): the driver's
    device-to-device memcpy, which `copy_` of contiguous tensors of one dtype is, took 13.3 µs
    for 12593152 bytes (4 KiB x 3074.5) and 10.3 µs for 12603392 (4 KiB x 3077) on the H100
    (docs/performance-notes.md, session 75), so a floor of the problem's exact bytes would
    depend on their remainder; the rounding takes at most 4 KiB off."""
    import torch
    half = copy_half(nbytes)
    src = [torch.empty(half, dtype=torch.uint8, device=device).fill_(7) for _ in range(sets)]
    dst = torch.empty_like(src[0])
    return lambda i: dst.copy_(src[i % sets])


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------

@dataclass
class Measurement:
    """One implementation (normjit, eager, compile, liger or copy) on one problem."""
    # ok | unsupported | failed | skipped | not run; liger also n/a (message: why) | absent
    status: str = "not run"
    message: str = ""
    ms: Optional[float] = None          # median of times_ms
    times_ms: list[float] = field(default_factory=list)
    first_call_s: Optional[float] = None  # normjit: JIT compile or cache load; compile: compile
    first_call_kind: str = ""           # normjit: nvrtc | disk hit | memory hit
    rel_err: Optional[float] = None     # against float64, first input distribution
    nonfinite: Optional[int] = None     # elements NaN/inf (unwritten) in the output
    passed: Optional[bool] = None       # peers: their output checked (Liger: every distribution)


@dataclass
class Check:
    """normjit's output against float64 for one input distribution."""
    dist: str
    rel_err: Optional[float]
    max_abs_err: Optional[float]
    nonfinite: Optional[int]
    passed: bool


def check_text(skipped: Any, error: Any, passed: Optional[bool], status: str) -> str:
    """A bench script's `check` column: skipped, error, normjit's status where nothing was
    checked (— where it ran: status "ok"), else pass or **FAIL** (passed)."""
    if skipped:
        return "skipped"
    if error:
        return "error"
    if passed is None:
        return status if status != "ok" else "—"
    return "pass" if passed else "**FAIL**"


class PeerRow:
    """The timing views a bench script's row shares (tools/bench_backward.py,
    tools/bench_vision.py): the row is a dataclass with a Measurement field for normjit, for
    copy and for each name in its class's PEERS, and skipped, error and passed fields."""
    PEERS: tuple[str, ...] = ()

    def impl(self, name: str) -> Measurement:
        return getattr(self, name)

    def check_text(self) -> str:
        """The `check` column, from the row's skipped, error, passed and normjit fields."""
        return check_text(self.skipped, self.error, self.passed, self.normjit.status)

    def speedup(self, other: Optional[str]) -> Optional[float]:
        """their time / normjit's: above 1, normjit is faster."""
        if other is None:
            return None
        a, b = self.impl(other).ms, self.impl("normjit").ms
        return a / b if a and b else None

    @property
    def pct_copy(self) -> Optional[float]:
        """copy of the same bytes / normjit (100%: as fast as a copy)."""
        c, n = self.impl("copy").ms, self.impl("normjit").ms
        return 100.0 * c / n if c and n else None

    def best_peer(self) -> Optional[str]:
        """The fastest peer that was timed and whose output was not found wrong."""
        timed = [k for k in self.PEERS if self.impl(k).status == "ok" and self.impl(k).ms
                 and self.impl(k).passed is not False]
        return min(timed, key=lambda k: self.impl(k).ms) if timed else None


@dataclass
class BenchReport:
    """A run of tools/bench_backward.py or tools/bench_vision.py (their JSON's top level;
    tools/bench_variants.py's Report adds its own fields)."""
    env: dict[str, str]
    command: str
    date_utc: str
    settings: dict[str, Any]
    copy_gbps: Optional[float] = None        # a 2 GiB copy, for scale
    rows: list[Any] = field(default_factory=list)
    planned: int = 0
    warnings: list[str] = field(default_factory=list)


def bench_report_from_json(data: dict, row_from_dict: Callable, cls: type = BenchReport) -> Any:
    """A bench script's report (cls: BenchReport or the script's own dataclass of the same
    first fields) from its JSON, each row through row_from_dict; keys it does not know (the
    JSON's derived values) are left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in data.items() if k in names}
    kw["rows"] = [row_from_dict(r) for r in data.get("rows", [])]
    return cls(**kw)


def merge_runs(reports: list[Any], key: Callable[[Any], Any],
               order: Optional[dict] = None) -> Any:
    """Several runs of a bench script as one report (e.g. a run cut short by --budget-s and a
    run of what it skipped, or partial runs merged into a table's JSON): a row measured in a
    later run replaces an earlier one's of the same key(row), a skipped row does not replace a
    measured one; rows in `order` (key -> position; rows it lacks last) or else as first met;
    the commands and dates of every run; each environment value and the random seed the runs'
    distinct ones in their order (one value where they agree)."""
    if len(reports) == 1:
        return reports[0]
    rep = dataclasses.replace(reports[-1], rows=[], warnings=[], env=dict(reports[-1].env))
    rows: dict[Any, Any] = {}
    for r in reports:
        for row in r.rows:
            k = key(row)
            if not (row.skipped and k in rows):
                rows[k] = row
        rep.warnings += [w for w in r.warnings if w not in rep.warnings]
    rep.rows = list(rows.values())
    if order is not None:
        rep.rows.sort(key=lambda row: order.get(key(row), len(order)))
    rep.planned = len(rep.rows)
    rep.command = "` ; `".join(r.command for r in reports)
    rep.date_utc = ", ".join(r.date_utc for r in reports)
    for name in rep.env:
        values = [r.env.get(name, "") for r in reports]
        rep.env[name] = ", ".join(dict.fromkeys(v for v in values if v))
    # The random seeds of every run (a merged table's rows come from several), each once.
    seeds = dict.fromkeys(seed for r in reports if r.settings.get("seed") is not None
                          for seed in str(r.settings["seed"]).split(", "))
    if len(seeds) > 1:
        rep.settings = {**rep.settings, "seed": ", ".join(seeds)}
    # The copy's rule (copy_rule_text): every run's, or "mixed".
    grains = [r.settings.get("copy_grain") for r in reports]
    if any(grains) and not all(grains):
        rep.settings = {**rep.settings, "copy_grain": "mixed"}
    return rep


def section_intro(begin_marker: str, title: str, script: str, runner: str, rep: Any,
                  noun: str) -> list[str]:
    """The opening of a bench script's section of docs/performance.md, as its three scripts
    write it: the marker, the title, where it comes from, a warning where the run measured
    fewer `noun` than it planned, the environment table, and "Method:"."""
    out = [begin_marker, "", f"## {title}", "",
           f"Generated by `{script}` (on the GPU machine by `{runner}`); edits are overwritten. "
           "`tools/compare_torch.py` keeps this section when it regenerates the rest of the "
           "file.", ""]
    done = [r for r in rep.rows if not r.skipped]
    if len(done) < rep.planned:
        out += [f"**Incomplete run: {len(done)} of {rep.planned} {noun} measured.**", ""]
    env_rows = [[k, v] for k, v in rep.env.items()]
    env_rows += [["date (UTC)", rep.date_utc], ["command", f"`{rep.command}`"]]
    out += md_table(["", ""], env_rows)
    out += ["", "Method:", ""]
    return out


def fmt_us(ms: Optional[float]) -> str:
    """Milliseconds as microseconds for the bench scripts' tables: 3 significant digits or
    more, "—" for none."""
    if ms is None:
        return "—"
    us = ms * 1e3
    return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 1000 else f"{us:.0f}"


def failures_block(problems: list[str], rep: Any, noun: str) -> list[str]:
    """The "Failures and warnings" list a bench script's section ends with: `problems`, the
    rows the run skipped (counted as `noun`, with the first one's reason), the report's
    warnings; no lines where there are none."""
    problems = list(problems)
    skipped = [r for r in rep.rows if r.skipped]
    if skipped:
        problems.append(f"{len(skipped)} {noun} skipped: {skipped[0].skipped}")
    if not problems and not rep.warnings:
        return []
    return ["Failures and warnings:", "", *(f"- {text}" for text in problems + rep.warnings), ""]


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """A bench script's console summary: left-aligned columns two spaces apart, and what its
    times and %copy mean."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.append("times in µs (median); %copy = copy of the same bytes / normjit")
    return "\n".join(lines)


class BenchRunner:
    """What the bench scripts' runners share (tools/bench_backward.py, tools/bench_vision.py):
    PyTorch and a generator seeded with --seed, the time budget (--budget-s), a CUDA context
    that broke (the rows after it are skipped), the timing of an implementation's calls and its
    first call. cuda=False runs the flow on CPU tensors (wall-clock times)."""
    # The GPU sleep queued before the timed calls (ms a call, at most SLEEP_MS_MAX), so that the
    # host enqueues every timed call while the GPU is busy.
    SLEEP_MS_PER_CALL = 0.5
    SLEEP_MS_MAX = 50.0

    def __init__(self, args: argparse.Namespace, rep: Any, l2_bytes: int, cuda: bool):
        import torch
        self.torch, self.args, self.rep = torch, args, rep
        self.cuda, self.dev, self.l2 = cuda, ("cuda" if cuda else "cpu"), l2_bytes
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(args.seed)
        self.started = time.perf_counter()
        self.broken = ""

    def log(self, text: str) -> None:
        print(text, flush=True)

    def over_budget(self) -> bool:
        return time.perf_counter() - self.started > self.args.budget_s

    def random(self, shape, dtype: str, dist: InputDist):
        t = self.torch.empty(shape, dtype=torch_dtype(dtype), device=self.dev)
        return t.normal_(dist.mean, dist.std, generator=self.gen)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def time_calls(self, fn: Callable[[int], Any]) -> list[float]:
        """fn(i), i selecting the rotating set; milliseconds of each timed call (CUDA events:
        time_cuda; wall clock on the CPU)."""
        reps, warmup = self.args.reps, self.args.warmup
        if self.cuda:
            return time_cuda(fn, reps, warmup, self.SLEEP_MS_PER_CALL, self.SLEEP_MS_MAX)
        for i in range(warmup):
            fn(i)
        times = []
        for i in range(reps):
            t0 = time.perf_counter()
            fn(warmup + i)
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    def timed(self, m: Measurement, name: str, fn: Callable[[int], Any]) -> None:
        """m's times of fn's calls (time_calls) and their median, or why they failed."""
        try:
            m.times_ms = self.time_calls(fn)
        except Exception as e:  # noqa: BLE001 - one implementation must not end the row
            m.status, m.message, m.ms = "failed", short_error(e), None
            self.log(f"  {name:8s} timing failed: {m.message}")
            self.free()
            return
        m.ms = statistics.median(m.times_ms)
        self.log(f"  {name:8s} {fmt_us(m.ms)} µs median (min {fmt_us(min(m.times_ms))})")

    def first_call(self, m: Measurement, name: str, fn: Callable[[], Any]):
        """fn's first call (compiles, loads), its seconds in m; its output, or None where it
        failed (m says why)."""
        t0 = time.perf_counter()
        try:
            out = fn()
            self.sync()
        except Exception as e:  # noqa: BLE001 - torch.compile and peers fail in many ways
            m.status, m.message = "failed", short_error(e)
            self.log(f"  {name:8s} failed: {m.message}")
            self.free()
            return None
        m.first_call_s = time.perf_counter() - t0
        m.status = "ok"
        return out

    def run_row(self, row: Any, body: Callable[[], None]) -> Any:
        """body() measures row, unless the budget ran out or the CUDA context broke (row
        skipped); an error it raises is the row's; torch.compile's caches are reset and memory
        freed after it (a row with a peak_gib field gets the device memory's peak)."""
        if self.broken or self.over_budget():
            row.skipped = (f"the CUDA context broke ({self.broken})" if self.broken else
                           f"the time budget (--budget-s {self.args.budget_s:g}) ran out")
            return row
        peak = self.cuda and hasattr(row, "peak_gib")
        if peak:
            self.torch.cuda.reset_peak_memory_stats()
        try:
            body()
        except Exception as e:  # noqa: BLE001 - one row must not end the run
            row.error = short_error(e)
            self.log(f"  error: {row.error}")
        finally:
            try:
                import torch._dynamo
                torch._dynamo.reset()
                if peak:
                    row.peak_gib = self.torch.cuda.max_memory_allocated() / 2**30
                self.free()
            except Exception as e:  # noqa: BLE001 - a sticky CUDA error: stop
                self.broken = short_error(e)
                row.error = row.error or self.broken
        return row


@dataclass
class ProblemResult:
    problem: Problem
    rotation: int = 1                  # input/output sets rotated through while timing
    peak_gib: Optional[float] = None   # device memory peak of the problem
    normjit: Measurement = field(default_factory=Measurement)
    eager: Measurement = field(default_factory=Measurement)
    compile: Measurement = field(default_factory=Measurement)
    liger: Measurement = field(default_factory=Measurement)
    flashinfer: Measurement = field(default_factory=Measurement)  # checked on the first input
    vllm: Measurement = field(default_factory=Measurement)        # checked on the first input
    copy: Measurement = field(default_factory=Measurement)  # a copy_ of bytes_moved
    checks: list[Check] = field(default_factory=list)
    liger_checks: list[Check] = field(default_factory=list)  # Liger's y, the same distributions
    error: str = ""                    # a problem that could not be run at all

    def impl(self, name: str) -> Measurement:
        return {"normjit": self.normjit, "eager": self.eager, "compile": self.compile,
                "liger": self.liger, "flashinfer": self.flashinfer, "vllm": self.vllm,
                "copy": self.copy}[name]

    @property
    def max_rel_err(self) -> Optional[float]:
        errs = [c.rel_err for c in self.checks]
        if not errs:
            return None
        if any(e is None or math.isnan(e) for e in errs):
            return math.nan
        return max(errs)

    @property
    def passed(self) -> Optional[bool]:
        """None when normjit did not produce an output to check."""
        return all(c.passed for c in self.checks) if self.checks else None


@dataclass
class JitLatency:
    """The output of `normjit bench --jit-latency --json`, whatever its keys are."""
    command: str
    status: str            # ok | absent | failed
    message: str = ""
    data: Any = None


@dataclass
class Report:
    env: dict[str, str]
    command: str
    date_utc: str
    settings: dict[str, Any]
    copy_gbps: Optional[float]
    copy_times_ms: list[float]
    results: list[ProblemResult]
    planned: int           # problems selected; more than len(results) while running
    jit: Optional[JitLatency]
    warnings: list[str] = field(default_factory=list)
    # Copies moving the bytes of seed problems (read + written): (problems, bytes moved, GB/s).
    size_copies: list[tuple[str, int, float]] = field(default_factory=list)

    def gbps(self, r: ProblemResult, impl: str) -> Optional[float]:
        ms = r.impl(impl).ms
        return r.problem.bytes_moved / (ms * 1e-3) / 1e9 if ms else None

    def pct_copy(self, r: ProblemResult, impl: str) -> Optional[float]:
        g = self.gbps(r, impl)
        return 100.0 * g / self.copy_gbps if g is not None and self.copy_gbps else None

    def floor_ms(self, r: ProblemResult) -> Optional[float]:
        return r.problem.bytes_moved / (self.copy_gbps * 1e9) * 1e3 if self.copy_gbps else None

    @staticmethod
    def speedup(r: ProblemResult, other: str) -> Optional[float]:
        """their_ms / normjit_ms: above 1 means normjit is faster."""
        if r.normjit.ms and r.impl(other).ms:
            return r.impl(other).ms / r.normjit.ms
        return None

    @staticmethod
    def pct_own_copy(r: ProblemResult) -> Optional[float]:
        """A copy of the problem's own bytes as a share of normjit's time: copy ms / normjit ms."""
        return 100.0 * r.copy.ms / r.normjit.ms if r.copy.ms and r.normjit.ms else None

    @staticmethod
    def best_peer(r: ProblemResult) -> Optional[str]:
        """The fastest peer (eager, compile, liger, flashinfer, vllm) that was timed and whose
        output was not found wrong; None when none was."""
        timed = [k for k in PEERS
                 if r.impl(k).status == "ok" and r.impl(k).ms and r.impl(k).passed is not False]
        return min(timed, key=lambda k: r.impl(k).ms) if timed else None


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------

def fmt_ms(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}"


def fmt_num(v: Optional[float], spec: str, suffix: str = "") -> str:
    return "—" if v is None else format(v, spec) + suffix


def fmt_err(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return "NaN" if math.isnan(v) else f"{v:.1e}"


def md_cell(value: Any) -> str:
    """A markdown table cell: one line, pipes escaped."""
    text = str(value).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    return text if text else " "


def md_table(headers: list[str], rows: list[list[Any]],
             right: Optional[set[int]] = None) -> list[str]:
    """A GitHub markdown table; columns whose index is in `right` are right-aligned."""
    right = right or set()
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"]
    for row in rows:
        assert len(row) == len(headers), (headers, row)
        lines.append("| " + " | ".join(md_cell(c) for c in row) + " |")
    return lines


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def impl_ms_cell(m: Measurement, footnotes: Optional[list[tuple[str, str]]] = None,
                 who: str = "Liger") -> str:
    """The time, marked when the output was wrong; else the status (n/a with the number of its
    reason in footnotes, which collects (who, reason) in order of appearance)."""
    if m.status == "ok":
        return fmt_ms(m.ms) + (" **FAIL**" if m.passed is False else "")
    if m.status == "n/a" and footnotes is not None:
        if (who, m.message) not in footnotes:
            footnotes.append((who, m.message))
        return f"n/a [{footnotes.index((who, m.message)) + 1}]"
    return m.status  # unsupported | failed | skipped | not run | absent | n/a


RESULT_HEADERS = ["problem", "shape", "reduced", "dtype", "normjit ms", "eager ms", "compile ms",
                  "Liger ms", "FlashInfer ms", "vLLM ms", "copy ms", "floor ms", "normjit GB/s",
                  "% of copy BW", "% of copy", "vs eager", "vs compile", "vs Liger",
                  "vs FlashInfer", "vs vLLM", "best peer", "vs best", "rel. err", "check"]
RESULT_RIGHT = (set(range(4, RESULT_HEADERS.index("rel. err") + 1))
                - {RESULT_HEADERS.index("best peer")})


def result_row(report: Report, r: ProblemResult,
               footnotes: Optional[list[tuple[str, str]]] = None) -> list[str]:
    p = r.problem
    if r.error:
        check = "error"
    elif r.passed is None:
        check = r.normjit.status if r.normjit.status != "ok" else "—"
    else:
        check = "pass" if r.passed else "**FAIL**"
    best = report.best_peer(r)
    return [
        p.name, shape_text(p.shape), p.describe(), p.dtype,
        impl_ms_cell(r.normjit), impl_ms_cell(r.eager), impl_ms_cell(r.compile),
        impl_ms_cell(r.liger, footnotes),
        *(impl_ms_cell(r.impl(e), footnotes, PEER_TITLES[e]) for e in ENGINES),
        impl_ms_cell(r.copy),
        fmt_ms(report.floor_ms(r)),
        fmt_num(report.gbps(r, "normjit"), ".0f"),
        fmt_num(report.pct_copy(r, "normjit"), ".1f", "%"),
        fmt_num(report.pct_own_copy(r), ".1f", "%"),
        fmt_num(report.speedup(r, "eager"), ".2f", "x"),
        fmt_num(report.speedup(r, "compile"), ".2f", "x"),
        fmt_num(report.speedup(r, "liger"), ".2f", "x"),
        *(fmt_num(report.speedup(r, e), ".2f", "x") for e in ENGINES),
        PEER_TITLES[best] if best else "—",
        fmt_num(report.speedup(r, best), ".2f", "x") if best else "—",
        fmt_err(r.max_rel_err),
        check,
    ]


def flatten_scalars(data: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten_scalars(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if not isinstance(v, list) else json.dumps(v)
    return out


def jit_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def records_table(records: list[dict], first_header: Optional[str] = None) -> list[str]:
    """Rows of dicts -> one table; the columns are the union of keys in order of appearance."""
    columns: list[str] = []
    for rec in records:
        for k in flatten_scalars(rec):
            if k not in columns:
                columns.append(k)
    rows = []
    for rec in records:
        flat = flatten_scalars(rec)
        rows.append([jit_value(flat[c]) if c in flat else "—" for c in columns])
    if first_header and columns and columns[0] == "__name__":
        columns[0] = first_header
    return md_table(columns, rows)


def render_jit(data: Any) -> list[str]:
    """Render JSON of unknown layout as markdown tables: scalars as key | value, lists of
    objects and objects of objects as one table each (their keys as columns)."""
    if isinstance(data, list):
        if data and all(isinstance(d, dict) for d in data):
            return records_table(data)
        return md_table(["value"], [[jit_value(v)] for v in data])
    if not isinstance(data, dict):
        return md_table(["value"], [[jit_value(data)]])
    lines: list[str] = []
    scalars: dict[str, Any] = {}
    subtables: list[tuple[str, list[str]]] = []
    for k, v in data.items():
        if isinstance(v, list) and v and all(isinstance(d, dict) for d in v):
            subtables.append((k, records_table(v)))
        elif isinstance(v, dict) and v and all(isinstance(d, dict) for d in v.values()):
            recs = [{"__name__": name, **inner} for name, inner in v.items()]
            subtables.append((k, records_table(recs, first_header=k)))
        elif isinstance(v, dict):
            scalars.update(flatten_scalars(v, f"{k}."))
        else:
            scalars[k] = v
    if scalars:
        lines += md_table(["key", "value"], [[k, jit_value(v)] for k, v in scalars.items()])
    for title, table in subtables:
        lines += ["", f"**{title}**", ""] + table
    return lines


def render_markdown(report: Report, notes: Optional[str], plot_name: Optional[str],
                    host_cost: Optional[str] = None) -> str:
    out: list[str] = []
    add = out.append
    add("# normjit performance")
    add("")
    add("Generated by `tools/compare_torch.py` (run on the GPU machine by `scripts/perf.sh`); "
        "edits are overwritten. The analysis per kernel is kept in `docs/performance-notes.md` "
        "and included at the end.")
    add("")
    if len(report.results) < report.planned:
        add(f"**Incomplete run: {len(report.results)} of {report.planned} problems measured.**")
        add("")
    env_rows = [[k, v] for k, v in report.env.items()]
    env_rows += [["date (UTC)", report.date_utc], ["command", f"`{report.command}`"]]
    out += md_table(["", ""], env_rows)
    add("")

    s = report.settings
    add("## Method")
    add("")
    how = rounds_text(s, "problem", "normjit, eager, compile, Liger", "; the copy after them")
    add(f"- Times are GPU times: CUDA events around each call, {how}. A sleep kernel is queued "
        "first (each round) so that the host enqueues every timed call while the GPU is busy: "
        "the events bracket GPU work, not Python, ctypes or PyTorch dispatch (host overhead "
        "per call is in the JIT latency table).")
    add("- Problems whose x and y together are smaller than 4x L2 rotate through several "
        "inputs (column `rotation` in the JSON), enough that the bytes touched between two "
        "uses of one set exceed 4x L2, so no call finds its x in L2; at most 256 sets, so "
        "problems under 4x L2 / 256 (0.8 MB of x and y on the H100: bf16 [32, 4096] and "
        "smaller) come round sooner, and where the 256 inputs fit in L2 (bf16 [8, 8192] and "
        "smaller) every implementation reads x from L2. Each "
        "implementation writes one output buffer on every call: PyTorch's caching allocator "
        "hands a peer's new y the block its previous call freed (as it does in a model), and "
        "normjit and the copy are given the same (before 2026-11-24 they rotated their "
        "outputs too, which cost them the write-back of the previous calls' y).")
    add("- Bytes moved = x read once + y written once + parameters read once; GB/s and "
        "`% of copy BW` use them for every implementation (`% of copy BW` = GB/s / the 2 GiB "
        "copy's bandwidth below); `floor ms` = bytes / that bandwidth.")
    add("- `copy ms`: a device-to-device `copy_` of the problem's own bytes (half read from one "
        "uint8 tensor, half written to another; " + copy_rule_text(s) + "), its source rotated "
        "as the kernels' inputs, its destination one buffer, timed exactly as the kernels; "
        "`% of copy` = copy ms / "
        "normjit ms (100%: normjit as fast as a copy of the same bytes).")
    add("- `vs eager`, `vs compile`, `vs Liger`, `vs FlashInfer`, `vs vLLM`: their time / "
        "normjit's time (above 1: normjit faster). Eager is the reference module of PyTorch "
        "(`torch.nn.LayerNorm`, `torch.nn.GroupNorm`, `torch.nn.RMSNorm`; the channel RMSNorm as "
        "`x / sqrt(mean(x^2, dim=1) + eps)` in fp32 math); compile is "
        "`torch.compile(module, dynamic=False)` in default mode, compile time excluded.")
    add("- Liger is Liger-Kernel's forward (Python + Triton; version in the table above) "
        "called directly: `liger_kernel.ops.rms_norm.rms_norm_forward(x, w, eps, 0.0, "
        "\"gemma\", None)` (f32 math, one cast at the end, as `torch.nn.RMSNorm`), "
        "`layer_norm.layer_norm_forward(x, w, b, eps)`, `group_norm.group_norm_forward(x, C, "
        "G, w, b, eps)`; several trailing dims are passed as one row (x viewed as "
        "[rows, product], the parameters flattened: no copy). It allocates y on each call and "
        "also writes its statistics (rstd, and mean for LayerNorm/GroupNorm), not counted in "
        "the bytes. Its compile time is excluded (first call). `n/a [k]`: Liger cannot "
        "compute that problem, for the reason in note k under the table; `absent`: "
        "Liger-Kernel could not be imported in this run.")
    absent = [r.liger.message for r in report.results if r.liger.status == "absent"]
    if absent:
        add(f"- **Liger-Kernel is absent from this run**: {absent[0]}. scripts/perf.sh puts its "
            "wheel (`liger_kernel-*.whl` in WHEELS, default .whl) on PYTHONPATH when "
            "`import liger_kernel` fails.")
    add("- FlashInfer and vLLM: the inference engines' hand-written CUDA RMSNorm, built from "
        "their releases on PyPI (how: their rows in the table above) and called through "
        "`tools/kernel_peers.py`. FlashInfer: include/flashinfer/norm.cuh (its CUDA norm "
        "module, the kernels sgl-kernel carries) by `scripts/peers/build_flashinfer.sh`, "
        "launched by FlashInfer's own host code (`norm::RMSNorm`: a CTA per row; programmatic "
        "dependent launch on, as its API has it on sm_90); FlashInfer 0.7's Python API runs "
        "CuTe DSL kernels by default on sm_90, not measured here. vLLM: csrc/layernorm_kernels.cu "
        "(`rms_norm_kernel`) by `scripts/peers/build_vllm.sh`, launched as vLLM's `rms_norm` "
        "launches it (a CTA per row, blocks of up to 1024 threads under 256 rows and 256 from "
        "there). x is viewed as [rows, product of the trailing dims]; each allocates y on "
        "every call; their y is checked on the first input distribution. `n/a [k]`: no "
        "kernel of that problem (note k); `absent`: the library was not built or did not load "
        "(the row above says why).")
    for engine in ENGINES:
        absent = [r.impl(engine).message for r in report.results
                  if r.impl(engine).status == "absent"]
        if absent:
            add(f"- **{PEER_TITLES[engine]} is absent from this run**: {absent[0]}.")
    add("- `best peer`: the fastest of eager, compile, Liger, FlashInfer and vLLM whose output "
        "passed its check; "
        "`vs best` = its time / normjit's time (at or above 1: normjit ahead of every peer). "
        "The copy is a floor, not a peer.")
    add("- `rel. err` = ||y - ref|| / ||ref|| against float64 computed by PyTorch on the device "
        "from the same inputs and parameters, the largest over the input distributions "
        "checked (RMSNorm: N(1, 2) and N(0, 1e-3); LayerNorm/GroupNorm: N(3, 1.5) and "
        "N(100, 1)); the output is filled with NaN first and must be entirely written. "
        "Pass: f32 under 1e-5, f16/bf16 under 1e-2. Liger's y is checked against the same "
        "reference on every distribution, eager's and compile's on the first; a peer's time "
        "whose output failed is marked **FAIL** (and it is no best peer).")
    add(f"- Random seed {s.get('seed')}.")
    add("")

    add("## Copy bandwidth")
    add("")
    if report.copy_gbps:
        lo, hi = min(report.copy_times_ms), max(report.copy_times_ms)
        add(f"Device-to-device copy of {COPY_BYTES / 2**30:g} GiB (`dst.copy_(src)`, f32), bytes "
            f"read + written, median of {len(report.copy_times_ms)}: "
            f"**{report.copy_gbps:.0f} GB/s** "
            f"({fmt_ms(statistics.median(report.copy_times_ms))} ms; min {fmt_ms(lo)}, "
            f"max {fmt_ms(hi)} ms). The `% of copy BW` columns are relative to this number; "
            "`% of copy` to a copy of each problem's own bytes, in its row.")
        if report.size_copies:
            add("")
            add("A copy as small as a seed problem does not reach that bandwidth either (its start "
                "and end weigh more): copies moving the bytes of each seed problem (half read, "
                "half written; same method), for comparison with the seeds' % of copy:")
            add("")
            add("| seed problems | bytes moved (MB) | copy ms | copy GB/s | % of the large copy |")
            add("|---|---:|---:|---:|---:|")
            for label, nbytes, gbps in report.size_copies:
                add(f"| {label} | {nbytes / 1e6:.1f} | {fmt_ms(nbytes / (gbps * 1e9) * 1e3)} | "
                    f"{gbps:.0f} | {100 * gbps / report.copy_gbps:.1f}% |")
    else:
        add("Not measured.")
    add("")

    add("## Results")
    add("")
    groups = [g for g in GROUP_TITLES if any(r.problem.group == g for r in report.results)]
    groups += sorted({r.problem.group for r in report.results} - set(groups))
    for g in groups:
        add(f"### {GROUP_TITLES.get(g, g)}")
        add("")
        footnotes: list[str] = []
        rows = [result_row(report, r, footnotes) for r in report.results if r.problem.group == g]
        out += md_table(RESULT_HEADERS, rows, RESULT_RIGHT)
        add("")
        for k, (who, why) in enumerate(footnotes, 1):
            add(f"- [{k}] {who} n/a: {why}.")
        if footnotes:
            add("")
    if plot_name:
        add(f"![% of copy bandwidth per problem]({plot_name})")
        add("")

    problems = [r for r in report.results
                if r.error or r.normjit.status not in ("ok", "unsupported")
                or r.passed is False or any(r.impl(k).status == "failed" for k in PEERS + ("copy",))
                or any(not c.passed for c in r.liger_checks)]
    if problems or report.warnings:
        add("### Failures and warnings")
        add("")
        for r in problems:
            key = r.problem.key
            if r.error:
                add(f"- {key}: {r.error}")
            for impl in ("normjit",) + PEERS + ("copy",):
                m = r.impl(impl)
                if m.status in ("failed",) or (impl == "normjit" and m.status == "error"):
                    add(f"- {key}, {impl}: {m.message}")
            for who, checks in (("normjit", r.checks), ("Liger", r.liger_checks)):
                for c in checks:
                    if not c.passed:
                        add(f"- {key}, {who} on {c.dist}: rel. err {fmt_err(c.rel_err)}, "
                            f"max abs err {fmt_err(c.max_abs_err)}, {c.nonfinite} non-finite "
                            "(unwritten) elements")
        for w in report.warnings:
            add(f"- {w}")
        add("")

    add("## JIT latency")
    add("")
    jit = report.jit
    if jit is None:
        add("Not measured in this run.")
    else:
        add(f"`{jit.command}`")
        add("")
        if jit.status == "ok":
            out += render_jit(jit.data)
        else:
            add(f"No numbers ({jit.status}): {jit.message}")
    add("")

    if host_cost is not None:
        out += host_cost_block(host_cost)
        add("")

    add("## Analysis per kernel")
    add("")
    if notes is not None:
        add(NOTES_MARKER)
        add("")
        add(notes.rstrip("\n"))
    else:
        add("_docs/performance-notes.md does not exist yet: the hand-written account per kernel "
            "(what limits it, with ncu/PTX evidence) goes there and is included here._")
    add("")
    return "\n".join(out)


def render_summary(report: Report) -> str:
    """The short table printed at the end of the run."""
    headers = ["problem", "dtype", "normjit", "eager", "compile", "liger", "flashinfer", "vllm",
               "copy", "%copyBW", "%copy", "best", "vs best", "rel.err", "check"]
    picked = ["normjit ms", "eager ms", "compile ms", "Liger ms", "FlashInfer ms", "vLLM ms",
              "copy ms",
              "% of copy BW", "% of copy", "best peer", "vs best", "rel. err", "check"]
    col = [RESULT_HEADERS.index(h) for h in picked]
    rows = []
    for r in report.results:
        row = result_row(report, r)
        rows.append([r.problem.name, r.problem.dtype]
                    + [row[i].replace("*", "") for i in col])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    if report.copy_gbps:
        lines.append(f"copy bandwidth {report.copy_gbps:.0f} GB/s; times in ms (median); "
                     "%copy = a copy of the same bytes / normjit")
    return "\n".join(lines)


def write_plot(report: Report, path: Path) -> bool:
    """Horizontal grouped bars: % of copy bandwidth per problem for normjit, eager, compile and
    Liger; a tick where a copy of the problem's own bytes is."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"plot: matplotlib unavailable ({e}); no {path.name}")
        return False
    results = [r for r in report.results if not r.error]
    if not results or not report.copy_gbps:
        return False
    impls = [("normjit", "tab:green"), ("eager", "tab:gray"), ("compile", "tab:blue"),
             ("liger", "tab:orange"), ("flashinfer", "tab:purple"), ("vllm", "tab:brown")]
    height = 0.13
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.8 * len(results)))
    for j, (impl, color) in enumerate(impls):
        ys = [i + (j - (len(impls) - 1) / 2) * height for i in range(len(results))]
        vals = [report.pct_copy(r, impl) or 0.0 for r in results]
        ax.barh(ys, vals, height=height, color=color, label=impl)
        for y, r, v in zip(ys, results, vals):
            m = r.impl(impl)
            text = f"{v:.0f}%" if m.ms else m.status
            if (impl == "normjit" and r.passed is False) or (m.ms and m.passed is False):
                text += " FAIL"
            ax.text(v + 1, y, text, va="center", fontsize=6)
    copies = [(i, report.pct_copy(r, "copy")) for i, r in enumerate(results)]
    copies = [(i, v) for i, v in copies if v]
    if copies:
        ax.scatter([v for _, v in copies], [i for i, _ in copies], marker="|", s=300,
                   color="black", label="copy of the same bytes", zorder=3)
    ax.set_yticks(range(len(results)))
    ax.set_yticklabels([f"{r.problem.name} {r.problem.dtype}" for r in results], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(100, color="black", linewidth=0.8)
    ax.axvline(90, color="tab:red", linewidth=0.8, linestyle="--", label="90% target")
    ax.set_xlabel(f"% of device-to-device copy bandwidth ({report.copy_gbps:.0f} GB/s)")
    ax.set_title("normjit vs PyTorch, Liger, FlashInfer and vLLM on "
                 f"{report.env.get('device', '?')}", fontsize=9)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_xlim(0, max(110, *(report.pct_copy(r, i) or 0 for r in results for i, _ in impls)) + 12)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def report_json(report: Report) -> dict:
    """Raw results plus the derived numbers of the tables."""
    data = dataclasses.asdict(report)
    for r, d in zip(report.results, data["results"]):
        d["key"] = r.problem.key
        d["bytes_moved"] = r.problem.bytes_moved
        d["derived"] = {
            "floor_ms": report.floor_ms(r),
            **{f"{i}_gbps": report.gbps(r, i) for i in ("normjit",) + PEERS + ("copy",)},
            **{f"{i}_pct_copy": report.pct_copy(r, i) for i in ("normjit",) + PEERS + ("copy",)},
            "normjit_pct_own_copy": report.pct_own_copy(r),
            "speedup_vs_eager": report.speedup(r, "eager"),
            "speedup_vs_compile": report.speedup(r, "compile"),
            "speedup_vs_liger": report.speedup(r, "liger"),
            **{f"speedup_vs_{e}": report.speedup(r, e) for e in ENGINES},
            "best_peer": report.best_peer(r),
            "speedup_vs_best": (report.speedup(r, report.best_peer(r)) if report.best_peer(r)
                                else None),
            "max_rel_err": r.max_rel_err,
            "passed": r.passed,
        }
    return data


def report_from_json(data: dict) -> Report:
    """The Report that report_json() wrote (its derived numbers dropped: they are recomputed)."""
    def fields_of(cls, d: dict) -> dict:
        names = {f.name for f in dataclasses.fields(cls)}
        return {k: v for k, v in d.items() if k in names}

    results = []
    for d in data["results"]:
        r = fields_of(ProblemResult, d)
        r["problem"] = Problem(**{**fields_of(Problem, d["problem"]),
                                  "shape": tuple(d["problem"]["shape"])})
        for impl in ("normjit",) + PEERS + ("copy",):
            r[impl] = Measurement(**fields_of(Measurement, d.get(impl) or {}))
        for kind in ("checks", "liger_checks"):
            r[kind] = [Check(**fields_of(Check, c)) for c in d.get(kind) or []]
        results.append(ProblemResult(**r))
    jit = data.get("jit")
    return Report(**{**fields_of(Report, data), "results": results,
                     "jit": JitLatency(**fields_of(JitLatency, jit)) if jit else None,
                     "size_copies": [tuple(c) for c in data.get("size_copies") or []]})


def json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json(report: Report, path: Path) -> None:
    write_json_file(report_json(report), path)


def write_outputs(report: Report, args: argparse.Namespace, final: bool) -> None:
    """Written after every problem, so that a run cut off by a time limit still leaves its
    numbers; the plot only at the end."""
    notes_path = Path(args.notes)
    notes = notes_path.read_text() if notes_path.exists() else None
    plot_path = Path(args.plot)
    has_plot = final and write_plot(report, plot_path)
    doc = Path(args.doc)
    doc.parent.mkdir(parents=True, exist_ok=True)
    plot_ref = os.path.relpath(plot_path, doc.parent) if has_plot else None
    host_cost_path = Path(args.host_cost)
    host_cost = host_cost_path.read_text() if host_cost_path.exists() else None
    text = render_markdown(report, notes, plot_ref, host_cost)
    # The sections of tools/bench_variants.py, bench_backward.py and bench_vision.py are
    # measured by those scripts: carried over as they are.
    for begin, end, block in (kept_sections(doc.read_text()) if doc.exists() else []):
        text = splice_section(text, begin, end, block)
    doc.write_text(text)
    write_json(report, Path(args.json_out))


# ---------------------------------------------------------------------------------------
# normjit through its C API
# ---------------------------------------------------------------------------------------

# The one binding of the C API is the Python package's (python/normjit/_capi.py, checked against
# normjit.h by tests/python/test_binding.py): the installed package, or else this checkout's
# python/ (stdlib only: it loads no library until asked).
try:
    from normjit import _capi
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    from normjit import _capi

EngineOptions = _capi.EngineOptions
NormjitError = _capi.NormjitError
NormjitUnsupported = _capi.UnsupportedError


class Normjit:
    """The C API of one libnormjit.so (--lib), through the package's binding."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = _capi.Library(path)
        self._keep: list[Any] = []  # C strings the engine options point to

    def check(self, status: int) -> None:
        self.lib.check(status)

    def create_engine(self, cache_dir: Optional[str] = None, memory_only: bool = False) -> int:
        opts = EngineOptions()
        self.lib.normjit_engine_options_init(ctypes.byref(opts))
        if cache_dir:
            encoded = cache_dir.encode()
            self._keep.append(encoded)
            opts.cache_dir = encoded
        opts.memory_only = int(memory_only)
        engine = ctypes.c_void_p()
        self.check(self.lib.normjit_engine_create(ctypes.byref(opts), ctypes.byref(engine)))
        return engine.value

    def destroy_engine(self, engine: int) -> None:
        self.lib.normjit_engine_destroy(engine)

    def counters(self, engine: int) -> tuple[int, int, int]:
        """(nvrtc compiles, memory hits, disk hits)"""
        c = [ctypes.c_uint64() for _ in range(3)]
        self.check(self.lib.normjit_engine_counters(engine, *(ctypes.byref(v) for v in c)))
        return c[0].value, c[1].value, c[2].value

    def bind(self, engine: int, p: Problem, x: int, y: int, weight: Optional[int],
             bias: Optional[int], stream: int) -> Callable[[], None]:
        """A call of p's operator on fixed pointers: the arguments are converted once, so
        the timed loop pays only the ctypes call."""
        shape = (ctypes.c_int64 * len(p.shape))(*p.shape)
        dtype, ndim = int(_capi.Dtype[p.dtype.upper()]), len(p.shape)
        if p.op == "rmsnorm":
            fn = self.lib.normjit_rmsnorm
            args = (engine, x, y, weight, shape, ndim, p.normalized_dims, dtype, p.eps, stream)
        elif p.op == "layernorm":
            fn = self.lib.normjit_layernorm
            args = (engine, x, y, weight, bias, shape, ndim, p.normalized_dims, dtype, p.eps,
                    stream)
        else:
            fn = self.lib.normjit_groupnorm
            args = (engine, x, y, weight, bias, shape, ndim, p.groups, dtype, p.eps, stream)
        check = self.check

        def call() -> None:
            status = fn(*args)
            if status:
                check(status)
        call.keepalive = shape  # type: ignore[attr-defined]
        return call


class EngineApi:
    """One engine of a libnormjit.so (Normjit): kernels prepared from spec text, the engine
    destroyed by close(). tools/bench_backward.py's and tools/bench_variants.py's CApi add
    their launches."""

    def __init__(self, path: Path, cache_dir: Optional[str], memory_only: bool = False):
        self.nj = Normjit(path)
        self.lib = self.nj.lib
        self.engine = self.nj.create_engine(cache_dir=cache_dir, memory_only=memory_only)

    def prepare(self, spec: str) -> int:
        k = ctypes.c_void_p()
        self.lib.check(self.lib.normjit_prepare(self.engine, spec.encode(), ctypes.byref(k)))
        return k.value

    def close(self) -> None:
        self.nj.destroy_engine(self.engine)


def nvrtc_loaded() -> str:
    """Version and file of each libnvrtc mapped into this process: torch may have loaded its
    own copy before libnormjit.so, and the dynamic loader then gives libnormjit that one
    when the sonames match, so the NVRTC normjit compiles with is worth recording."""
    paths: list[str] = []
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "/libnvrtc.so" in path and path not in paths:
                paths.append(path)
    except OSError:
        pass
    found = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            major, minor = ctypes.c_int(), ctypes.c_int()
            lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
            found.append(f"{major.value}.{minor.value} ({path})")
        except (OSError, AttributeError) as e:
            found.append(f"? ({path}: {e})")
    return "; ".join(found) if found else "not loaded"


# ---------------------------------------------------------------------------------------
# PyTorch side (imported lazily)
# ---------------------------------------------------------------------------------------

def torch_dtype(dtype: str):
    import torch
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]


def make_channel_rmsnorm(eps: float, weight):
    """The channel-form reference of design.md, in fp32 math for f16/bf16 inputs."""
    import torch

    class ChannelRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = eps
            self.weight = weight

        def forward(self, x):
            xf = x.float()
            y = xf / torch.sqrt(xf.pow(2).mean(dim=1, keepdim=True) + self.eps)
            if self.weight is not None:
                y = y * self.weight.float().view(1, -1, *([1] * (x.dim() - 2)))
            return y.to(x.dtype)

    return ChannelRMSNorm()


def make_module(p: Problem, weight, bias):
    """The PyTorch reference module of p, with normjit's parameters copied in."""
    import torch
    dt = torch_dtype(p.dtype)
    if p.op == "rmsnorm" and p.normalized_dims == 0:
        m = make_channel_rmsnorm(p.eps, weight)
    elif p.op == "rmsnorm":
        m = torch.nn.RMSNorm(p.param_shape, eps=p.eps, elementwise_affine=weight is not None,
                             device=DEVICE, dtype=dt)
    elif p.op == "layernorm":
        m = torch.nn.LayerNorm(p.param_shape, eps=p.eps, elementwise_affine=weight is not None,
                               bias=bias is not None, device=DEVICE, dtype=dt)
    else:
        m = torch.nn.GroupNorm(p.groups, p.shape[1], eps=p.eps, affine=weight is not None,
                               device=DEVICE, dtype=dt)
    with torch.no_grad():
        # The modules start at weight 1, bias 0, which would hide affine bugs.
        if weight is not None and isinstance(getattr(m, "weight", None), torch.nn.Parameter):
            m.weight.copy_(weight)
        if bias is not None and isinstance(getattr(m, "bias", None), torch.nn.Parameter):
            m.bias.copy_(bias)
    m.requires_grad_(False)
    return m.eval()


def reference_f64(p: Problem, x, weight, bias):
    """p's operator in float64 (explicit two-pass formulas, independent of PyTorch's own
    normalization kernels); x a chunk along dim 0, weight/bias float64 or None."""
    import torch
    xd = x.double()
    nd = xd.dim()
    if p.op == "groupnorm" or (p.op == "rmsnorm" and p.normalized_dims == 0):
        param_view = (1, -1) + (1,) * (nd - 2)      # [C] over dim 1
    else:
        param_view = p.param_shape                   # trailing dims
    if p.op == "rmsnorm":
        dims = (1,) if p.normalized_dims == 0 else tuple(range(nd - p.normalized_dims, nd))
        y = xd / torch.sqrt(xd.pow(2).mean(dim=dims, keepdim=True) + p.eps)
    elif p.op == "layernorm":
        dims = tuple(range(nd - p.normalized_dims, nd))
        xc = xd - xd.mean(dim=dims, keepdim=True)
        y = xc / torch.sqrt(xc.pow(2).mean(dim=dims, keepdim=True) + p.eps)
    else:
        g = xd.reshape(xd.shape[0], p.groups, -1)
        gc = g - g.mean(dim=-1, keepdim=True)
        y = (gc / torch.sqrt(gc.pow(2).mean(dim=-1, keepdim=True) + p.eps)).reshape(xd.shape)
    if weight is not None:
        y = y * weight.reshape(param_view)
    if bias is not None:
        y = y + bias.reshape(param_view)
    return y


@dataclass
class ErrorStats:
    rel_err: float
    max_abs_err: float
    nonfinite: int


def compare_to_reference(p: Problem, x, weight, bias, outputs: dict) -> dict[str, ErrorStats]:
    """Relative L2 error of each output against float64, chunk by chunk along dim 0 (a few
    rows or batch items at a time), accumulated on the device without syncing per chunk."""
    import torch
    w64 = weight.double() if weight is not None else None
    b64 = bias.double() if bias is not None else None
    rows = x.shape[0]
    per_row = max(1, x.numel() // rows)
    step = rows if p.reduces_dim0 else max(1, REFERENCE_CHUNK_ELEMENTS // per_row)
    zero = lambda: torch.zeros((), dtype=torch.float64, device=x.device)  # noqa: E731
    ref2 = zero()
    err2 = {k: zero() for k in outputs}
    maxabs = {k: zero() for k in outputs}
    bad = {k: torch.zeros((), dtype=torch.int64, device=x.device) for k in outputs}
    for start in range(0, rows, step):
        s = slice(start, min(rows, start + step))
        ref = reference_f64(p, x[s], w64, b64)
        ref2 += ref.pow(2).sum()
        for k, y in outputs.items():
            yc = y[s]
            bad[k] += (~torch.isfinite(yc)).sum()
            d = yc.double() - ref
            err2[k] += d.pow(2).sum()
            # amax ignores nothing: a NaN in d makes it NaN, which is what we want.
            maxabs[k] = torch.maximum(maxabs[k], d.abs().amax())
            del d, yc
        del ref
    out = {}
    for k in outputs:
        e2, r2 = err2[k].item(), ref2.item()
        rel = math.sqrt(e2 / r2) if r2 > 0 else (0.0 if e2 == 0 else math.inf)
        out[k] = ErrorStats(rel, maxabs[k].item(), int(bad[k].item()))
    return out


def passes(p: Problem, e: ErrorStats) -> bool:
    # NaN < tol is False, so NaN never passes.
    return e.nonfinite == 0 and e.rel_err < TOLERANCE[p.dtype]


def gpu_sleep(ms: float) -> None:
    """Keeps the GPU busy for about ms (assuming ~2 GHz) so the host can run ahead."""
    import torch
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(ms * 1e-3 * 2.0e9))


def time_cuda(fn: Callable[[int], Any], reps: int, warmup: int, sleep_ms_per_call: float = 0.25,
              sleep_ms_max: float = 50.0) -> list[float]:
    """fn(i) for i = 0, 1, ... (i selects the rotating buffer set); returns the GPU time of
    each timed call in ms, from CUDA events recorded around it on the current stream."""
    import torch
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    # Without this the events of a short kernel would also measure the gap while Python
    # launches it (PyTorch dispatch, dynamo guards, ctypes): ~0.25 ms of host time per call
    # covers all three (a caller whose calls cost the host more passes more).
    gpu_sleep(min(sleep_ms_max, 1.0 + sleep_ms_per_call * reps))
    for i in range(reps):
        starts[i].record()
        fn(warmup + i)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def rounds_text(s: dict, unit: str, names: str, after: str = "") -> str:
    """The method text's clause on how a run's times were taken, from its settings (those of
    runs before --rounds and before the rotated order read as they were): names, the
    implementations in their order within a round; after, a remark on what is timed apart."""
    rounds = s.get("rounds", 1)
    if rounds <= 1:
        return f"median of {s.get('reps')} calls after {s.get('warmup')} warm-up calls"
    order = names + (", the order rotated by one place each round (each takes every place "
                     "alike)" if s.get("order") == "rotated" else "")
    return (f"median of {rounds * s.get('reps', 0)} calls: {rounds} rounds of {s.get('reps')} "
            f"calls, each after {s.get('warmup')} warm-up calls, the implementations of a "
            f"{unit} taken in turn within each round ({order}{after}), so that a drift of the "
            "clocks or of the host's pace falls on all of them alike")


def time_rounds(timers: list[tuple[str, Callable[[int], Any]]], rounds: int, per_round: int,
                time_fn: Callable[[Callable[[int], Any], int], list[float]],
                failed: Callable[[str, BaseException], None]) -> dict[str, list[float]]:
    """Each (name, fn) timed in `rounds` rounds, every one in turn within a round, the order
    rotated by one place each round (round k starts with the k-th), so that each takes every
    place in a round alike: the same kernel measured first in a round and last in it differed
    by up to 0.5 µs on the H100 (docs/performance-notes.md, "Decode rows"). time_fn(fn, start)
    times a round's calls, fn(start + i) for its i-th (warm-up calls included), start going
    on by per_round from round to round through the rotating sets. Returns each name's times
    of all rounds; one whose timing raises goes to failed(name, e) and is left out of the later
    rounds and of the result."""
    times: dict[str, list[float]] = {name: [] for name, _ in timers}
    live = list(timers)
    for k in range(rounds):
        shift = k % len(live) if live else 0
        for name, fn in live[shift:] + live[:shift]:
            try:
                times[name] += time_fn(fn, k * per_round)
            except Exception as e:  # noqa: BLE001 - any peer may fail in its own way
                failed(name, e)
                live.remove((name, fn))
                del times[name]
    return times


def free_device_memory() -> None:
    import torch
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}"[:300]


def seed_sizes(problems: list[Problem]) -> list[tuple[str, int]]:
    """The seed problems by bytes moved, those within 0.1 MB of each other as one size:
    (their names, the largest of their bytes), smallest first."""
    sizes: dict[int, list[Problem]] = {}
    for p in problems:
        if p.group == "seeds":
            sizes.setdefault(round(p.bytes_moved / 1e5), []).append(p)
    return [(", ".join(f"{p.name} {p.dtype}" for p in ps), max(p.bytes_moved for p in ps))
            for _, ps in sorted(sizes.items())]


def measure_copy(reps: int, warmup: int, nbytes: int = COPY_BYTES) -> tuple[float, list[float]]:
    """Device-to-device copy bandwidth (read + write) of an f32 tensor of nbytes (2 GiB)."""
    import torch
    n = nbytes // 4
    src = torch.randn(n, device=DEVICE)
    dst = torch.empty_like(src)
    times = time_cuda(lambda i: dst.copy_(src), reps, warmup)
    src = dst = None
    free_device_memory()
    return 2 * n * 4 / (statistics.median(times) * 1e-3) / 1e9, times


class Runner:
    """Runs the problems one by one; holds what every problem shares."""

    def __init__(self, args: argparse.Namespace, nj: Normjit, engine: int, l2_bytes: int,
                 copy_gbps: Optional[float], warnings: list[str],
                 liger: Optional[dict[str, Callable]] = None, liger_why: str = "",
                 engines: Optional[dict[str, tuple[dict[str, Callable], str]]] = None):
        import torch
        self.args = args
        self.liger = liger or {}      # load_liger()'s functions; empty: Liger absent
        self.liger_why = liger_why    # why it is absent
        # Each engine's kernel_peers.load(): (functions, what was built or why it is absent).
        self.engines = {k: (engines or {}).get(k) or ({}, "absent: not loaded") for k in ENGINES}
        self.nj = nj
        self.engine = engine
        self.l2_bytes = l2_bytes
        self.copy_gbps = copy_gbps
        self.warnings = warnings  # the report's list: PyTorch off the float64 reference
        self.gen = torch.Generator(device=DEVICE)
        self.gen.manual_seed(args.seed)
        # Set when the CUDA context is unusable (a sticky error such as an illegal address
        # in a kernel): every later problem would fail the same way, so the run stops.
        self.broken = ""

    def log(self, text: str) -> None:
        print(text, flush=True)

    def random(self, shape, dtype: str, dist: InputDist):
        import torch
        t = torch.empty(shape, dtype=torch_dtype(dtype), device=DEVICE)
        return t.normal_(dist.mean, dist.std, generator=self.gen)

    def rotation(self, p: Problem) -> int:
        """Input/output sets so that the bytes touched between two uses of one set exceed 4x
        L2 (a set is evicted before it comes round again), at most 256: smaller problems come
        round sooner, the smallest from L2 (the method text says so)."""
        per_set = 2 * p.numel * ELEMENT_BYTES[p.dtype]
        return max(1, min(256, math.ceil(4 * self.l2_bytes / per_set)))

    def run(self, p: Problem) -> ProblemResult:
        import torch
        import torch._dynamo
        torch.cuda.reset_peak_memory_stats()
        r = ProblemResult(problem=p, rotation=self.rotation(p))
        try:
            with torch.no_grad():
                self._run(p, r)
        except Exception as e:  # noqa: BLE001 - one problem must not end the run
            r.error = short_error(e)
            self.log(f"  error: {r.error}")
        finally:
            try:
                r.peak_gib = torch.cuda.max_memory_allocated() / 2**30
                torch._dynamo.reset()
                free_device_memory()
            except Exception as e:  # noqa: BLE001
                self.broken = short_error(e)
                r.error = r.error or self.broken
        return r

    def _run(self, p: Problem, r: ProblemResult) -> None:
        import torch
        args = self.args
        dist = p.dists[0]
        n = r.rotation
        xs = [self.random(p.shape, p.dtype, dist) for _ in range(n)]
        # One output for every rotating input, as each peer has: PyTorch's caching allocator
        # hands a peer's y the block its previous call freed, so only the inputs rotate.
        ys = [torch.empty_like(xs[0])]
        weight = bias = None
        if p.affine in ("weight", "both"):
            weight = self.random(p.param_shape, p.dtype, InputDist(1.0, 0.5))
        if p.affine == "both":
            bias = self.random(p.param_shape, p.dtype, InputDist(0.0, 1.0))
        stream = torch.cuda.current_stream().cuda_stream
        ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
        calls = [self.nj.bind(self.engine, p, xs[i].data_ptr(), ys[0].data_ptr(), ptr(weight),
                              ptr(bias), stream) for i in range(n)]
        module = make_module(p, weight, bias)
        outputs = {}
        liger = peer_call(r.liger, self.liger, self.liger_why, liger_support, liger_call, p,
                          weight, bias)
        engine_calls = {}
        for k, (fns, why) in self.engines.items():
            call = peer_call(r.impl(k), fns, why, lambda q, k=k: engine_support(k, q), engine_call,
                             p, weight, bias)
            if call is not None:
                engine_calls[k] = call

        # First calls: normjit (JIT compile or cache load), eager, torch.compile (compile).
        ys[0].fill_(math.nan)  # poison: every element must be written
        outputs["normjit"] = self.first_normjit_call(r.normjit, calls[0], ys[0])
        outputs["eager"] = self.first_call(r.eager, "eager", lambda: module(xs[0]))
        compiled = None
        if args.skip_compile:
            r.compile.status = "skipped"
        else:
            torch._dynamo.reset()  # fresh cache: no recompile limit, no dynamic shapes
            compiled = torch.compile(module, dynamic=False)
            outputs["compile"] = self.first_call(r.compile, "compile", lambda: compiled(xs[0]))
            if outputs["compile"] is None:
                compiled = None
        if liger is not None:
            outputs["liger"] = self.first_call(r.liger, "liger", lambda: liger(xs[0]))
            if outputs["liger"] is None:
                liger = None
        for k, call in list(engine_calls.items()):
            outputs[k] = self.first_call(r.impl(k), k, lambda: call(xs[0]))
            if outputs[k] is None:
                del engine_calls[k]

        # Correctness of all four against float64, one pass over the reference.
        present = {k: v for k, v in outputs.items() if v is not None}
        if present:
            stats = compare_to_reference(p, xs[0], weight, bias, present)
            for k, st in stats.items():
                m = r.impl(k)
                m.rel_err, m.nonfinite = st.rel_err, st.nonfinite
                ok = passes(p, st)
                if k != "normjit":
                    m.passed = ok
                check = Check(dist.label(), st.rel_err, st.max_abs_err, st.nonfinite, ok)
                if k == "normjit":
                    r.checks.append(check)
                elif k == "liger":
                    r.liger_checks.append(check)
                self.log(f"  {k:8s} rel. err {fmt_err(st.rel_err)} on {dist.label()}"
                         f"{'' if ok else '  ** FAIL **'}"
                         + (f" ({st.nonfinite} non-finite)" if st.nonfinite else ""))
                if not ok and k in ("eager", "compile") + ENGINES:
                    who = PEER_TITLES[k] if k in ENGINES else f"PyTorch {k}"
                    self.warnings.append(f"{p.key}: {who} is off the float64 reference "
                                         f"by {fmt_err(st.rel_err)}")
        outputs.clear()
        present.clear()
        free_device_memory()

        # Timing, in rounds that take the implementations in turn.
        timers = []
        if r.normjit.status == "ok":
            timers.append(("normjit", lambda i: calls[i % n]()))
        if r.eager.status == "ok":
            timers.append(("eager", lambda i: module(xs[i % n])))
        if compiled is not None:
            timers.append(("compile", lambda i: compiled(xs[i % n])))
        if liger is not None:
            timers.append(("liger", lambda i: liger(xs[i % n])))
        for k, call in engine_calls.items():
            timers.append((k, lambda i, call=call: call(xs[i % n])))
        self.timed(r, p, timers)

        # More input distributions: normjit and Liger.
        if r.normjit.status == "ok" or liger is not None:
            for d in p.dists[1:]:
                xs[0].normal_(d.mean, d.std, generator=self.gen)
                outs = {}
                if r.normjit.status == "ok":
                    ys[0].fill_(math.nan)
                    calls[0]()
                    outs["normjit"] = ys[0]
                if liger is not None:
                    outs["liger"] = liger(xs[0])
                stats = compare_to_reference(p, xs[0], weight, bias, outs)
                for k, st in stats.items():
                    ok = passes(p, st)
                    check = Check(d.label(), st.rel_err, st.max_abs_err, st.nonfinite, ok)
                    (r.checks if k == "normjit" else r.liger_checks).append(check)
                    if k == "liger":
                        r.liger.passed = r.liger.passed is not False and ok
                    self.log(f"  {k:8s} rel. err {fmt_err(st.rel_err)} on {d.label()}"
                             f"{'' if ok else '  ** FAIL **'}")
                outs.clear()

        # A copy of the problem's own bytes, rotated and timed as the kernels, once the
        # problem's tensors are freed.
        xs = ys = calls = module = compiled = liger = engine_calls = weight = bias = None
        free_device_memory()
        try:
            copy = own_copy(p.bytes_moved, n, DEVICE)
        except Exception as e:  # noqa: BLE001 - the kernels' numbers stand without it
            r.copy.status, r.copy.message = "failed", short_error(e)
            self.log(f"  copy     failed: {r.copy.message}")
            free_device_memory()
            return
        self.timed(r, p, [("copy", copy)])
        if r.copy.ms is not None:
            r.copy.status = "ok"
        del copy

    def first_normjit_call(self, m: Measurement, call: Callable[[], None], y):
        import torch
        before = self.nj.counters(self.engine)
        t0 = time.perf_counter()
        try:
            call()
            torch.cuda.synchronize()
        except NormjitUnsupported as e:
            m.status, m.message = "unsupported", e.message
            self.log(f"  normjit  unsupported: {e.message}")
            return None
        except NormjitError as e:
            m.status, m.message = "error", str(e)
            self.log(f"  normjit  error: {e}")
            return None
        m.first_call_s = time.perf_counter() - t0
        after = self.nj.counters(self.engine)
        m.first_call_kind = ("nvrtc" if after[0] > before[0] else
                             "disk hit" if after[2] > before[2] else "memory hit")
        m.status = "ok"
        self.log(f"  normjit  first call {m.first_call_s * 1e3:.1f} ms ({m.first_call_kind})")
        return y

    def first_call(self, m: Measurement, name: str, fn: Callable[[], Any]):
        import torch
        t0 = time.perf_counter()
        try:
            y = fn()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - torch.compile may fail in many ways
            m.status, m.message = "failed", short_error(e)
            self.log(f"  {name:8s} failed: {m.message}")
            free_device_memory()
            return None
        m.first_call_s = time.perf_counter() - t0
        m.status = "ok"
        what = "compiled in" if name == "compile" else "first call"
        self.log(f"  {name:8s} {what} {m.first_call_s:.2f} s")
        return y

    def timed(self, r: ProblemResult, p: Problem,
              timers: list[tuple[str, Callable[[int], Any]]]) -> None:
        """Times each (name, fn) in --rounds rounds, every one in turn within a round (--reps
        calls after --warmup each time), so that a drift of the GPU's clocks or the host's pace
        during the problem falls on all of them alike; each one's median is of all its calls.
        One that fails is marked failed and left out of the later rounds."""
        def failed(name: str, e: BaseException) -> None:
            m = r.impl(name)
            m.status, m.message, m.ms = "failed", short_error(e), None
            self.log(f"  {name:8s} timing failed: {m.message}")
            free_device_memory()

        a = self.args
        times = time_rounds(
            timers, a.rounds, a.reps + a.warmup,
            lambda fn, start: time_cuda(lambda i: fn(start + i), a.reps, a.warmup), failed)
        for name, t in times.items():
            m = r.impl(name)
            m.times_ms = t
            m.ms = statistics.median(t)
            gbps = p.bytes_moved / (m.ms * 1e-3) / 1e9
            pct = f", {100 * gbps / self.copy_gbps:.1f}% of copy" if self.copy_gbps else ""
            self.log(f"  {name:8s} {fmt_ms(m.ms)} ms median (min {fmt_ms(min(t))}), "
                     f"{gbps:.0f} GB/s{pct}")


# ---------------------------------------------------------------------------------------
# Environment, JIT latency
# ---------------------------------------------------------------------------------------

def command_output(cmd: list[str], cwd: Optional[Path] = None) -> Optional[str]:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def collect_environment(lib_path: Path) -> tuple[dict[str, str], int]:
    """Labels and values for the head of the document; also the L2 size in bytes."""
    import torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    env: dict[str, str] = {}
    env["device"] = (f"{props.name} ({props.multi_processor_count} SMs, "
                     f"sm_{props.major}{props.minor}, {props.total_memory / 2**30:.1f} GiB, "
                     f"L2 {l2 / 2**20:.0f} MiB)")
    driver = command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    try:
        api = torch._C._cuda_getDriverVersion()
        api_text = f"CUDA driver API {api // 1000}.{api % 1000 // 10}"
    except Exception:  # noqa: BLE001 - private API, only for the record
        api_text = ""
    env["driver"] = ", ".join(t for t in ((driver or "").splitlines()[:1] + [api_text]) if t) or "?"
    env["CUDA (PyTorch build)"] = str(torch.version.cuda)
    env["NVRTC (loaded)"] = nvrtc_loaded()
    env["PyTorch"] = torch.__version__
    try:
        import triton
        env["Triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        env["Triton"] = f"unavailable ({short_error(e)})"
    env["Python"] = sys.version.split()[0]
    commit = command_output(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO)
    if os.environ.get("NORMJIT_REVISION"):
        # A copy of the tree whose .git is not the source's (a GPU machine given the working
        # tree): the caller names the revision.
        env["normjit"] = os.environ["NORMJIT_REVISION"] + " (NORMJIT_REVISION, named by the caller)"
    elif commit:
        dirty = command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
        env["normjit"] = commit + (" + local changes" if dirty else "")
    env["libnormjit"] = str(lib_path)
    return env, l2


def parse_json_output(text: str) -> Any:
    """The whole stdout as JSON, or else the last line that parses (log lines before it)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON in its output")


def measure_jit_latency(build: Path, timeout_s: int) -> JitLatency:
    exe = build / "tools" / "normjit"
    cmd = [str(exe), "bench", "--jit-latency", "--json"]
    jit = JitLatency(command=shlex.join(cmd), status="failed")
    if not exe.exists():
        jit.status, jit.message = "absent", f"{exe} does not exist"
        return jit
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        jit.message = f"timed out after {timeout_s} s"
        return jit
    except OSError as e:
        jit.message = short_error(e)
        return jit
    if out.returncode != 0:
        tail = (out.stderr.strip() or out.stdout.strip()).splitlines()[-3:]
        jit.message = f"exit status {out.returncode}: " + " / ".join(tail)
        return jit
    try:
        jit.data = parse_json_output(out.stdout)
    except ValueError as e:
        jit.message = f"{e}: {out.stdout.strip()[:200]!r}"
        return jit
    jit.status = "ok"
    return jit


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

def repo_path(path: str) -> str:
    """A path relative to the repository root (wherever the script is started from), or as given
    where absolute."""
    return path if os.path.isabs(path) else str(REPO / path)


def check_run_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--reps, --warmup and --rounds (where the tool has it) in range, and --dtypes (where the
    tool has it) split into args.dtype_list, each one known."""
    if args.reps < 1:
        ap.error(f"--reps {args.reps}: must be at least 1")
    if args.warmup < 0:
        ap.error(f"--warmup {args.warmup}: must be 0 or more")
    if getattr(args, "rounds", 1) < 1:
        ap.error(f"--rounds {args.rounds}: must be at least 1")
    if not hasattr(args, "dtypes"):
        return
    args.dtype_list = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in args.dtype_list:
        if d not in ELEMENT_BYTES:
            ap.error(f"--dtypes: unknown dtype {d!r} (f32, f16, bf16)")


def add_run_args(ap: argparse.ArgumentParser, noun: str, budget_s: float) -> None:
    """The run options tools/bench_backward.py, bench_vision.py and bench_variants.py share:
    --warmup, --seed, --budget-s (the NOUN left are skipped once measuring has taken BUDGET_S
    seconds) and --skip-compile."""
    ap.add_argument("--warmup", type=int, default=3, help="warm-up calls (3)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: fresh)")
    ap.add_argument("--budget-s", type=float, default=budget_s,
                    help=f"skip the {noun} left once measuring has taken this long "
                         f"({budget_s:g})")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile")


def add_output_args(ap: argparse.ArgumentParser, name: str, noun: str) -> None:
    """The output options those scripts share: --doc (docs/performance.md, whose NAME section
    they write), --section-out, --json-out, --list, --selftest and --from-json (NOUN: what a
    run measures, plural)."""
    ap.add_argument("--doc", default="docs/performance.md", help="markdown with the section")
    ap.add_argument("--section-out", default=None,
                    help=f"also write the section alone here (default: $OUT/{name}.md when "
                         "OUT is set)")
    ap.add_argument("--json-out", default=None,
                    help=f"raw results (default: $OUT/perf_{name}.json when OUT is set, else "
                         f"BUILD/perf_{name}.json)")
    ap.add_argument("--list", action="store_true", help=f"list the {noun} and exit")
    ap.add_argument("--selftest", action="store_true", help="check the non-GPU parts and exit")
    ap.add_argument("--from-json", default=None,
                    help="measure nothing: render the section of this JSON into --doc; "
                         f"comma-separated files are merged (a later run's {noun} replace an "
                         f"earlier one's; skipped {noun} do not replace measured ones); with "
                         "--json-out, the merged report goes there too (to merge the next "
                         f"partial run into, e.g. docs/perf_{name}.json)")


def finish_bench_args(ap: argparse.ArgumentParser, args: argparse.Namespace,
                      name: str) -> argparse.Namespace:
    """The options tools/bench_backward.py, bench_vision.py and bench_variants.py share, made
    whole after parsing: --reps (10 with --quick, else 20) and --warmup checked, --dtypes split
    and checked, paths relative to the repository root, the library (--lib, else
    NORMJIT_LIBRARY, else BUILD/libnormjit.so), the JSON (OUT/perf_NAME.json where OUT is set, else
    BUILD/perf_NAME.json; json_out_given says whether --json-out named it), the section alone
    (OUT/NAME.md where OUT is set) and a fresh seed where none is given."""
    if args.reps is None:
        args.reps = 10 if args.quick else 20
    check_run_args(ap, args)
    args.build = repo_path(args.build)
    lib = args.lib or os.environ.get("NORMJIT_LIBRARY") or str(Path(args.build) / "libnormjit.so")
    args.lib = repo_path(lib)
    args.doc = repo_path(args.doc)
    out_dir = os.environ.get("OUT")
    args.json_out_given = args.json_out is not None
    if args.json_out is None:
        args.json_out = (str(Path(out_dir) / f"perf_{name}.json") if out_dir else
                         str(Path(args.build) / f"perf_{name}.json"))
    if args.section_out is None and out_dir:
        args.section_out = str(Path(out_dir) / f"{name}.md")
    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    return args


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Time normjit (C API by ctypes) against PyTorch eager and torch.compile, "
                    "check it against float64, write docs/performance.md and .png.")
    ap.add_argument("--build", default="build",
                    help="build directory (libnormjit.so, tools/normjit); relative to the repo "
                         "root")
    ap.add_argument("--lib", default=None, help="libnormjit.so (default: BUILD/libnormjit.so)")
    ap.add_argument("--only", default=None,
                    help="comma-separated groups (seeds, llm, sd, long), ops (rmsnorm, layernorm, "
                         "groupnorm) or substrings of problem names")
    ap.add_argument("--dtypes", default="f32,bf16",
                    help="comma-separated dtypes to run (f32, f16, bf16); default f32,bf16")
    ap.add_argument("--quick", action="store_true",
                    help="a few problems (the seeds and one of each other kind), 5 timed runs")
    ap.add_argument("--reps", type=int, default=None,
                    help="timed runs per measurement and round (20; --quick 5)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of every problem's timing, the implementations taken in turn "
                         "within each (5; --quick 1)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up calls (3; --quick 2)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: fresh)")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile")
    ap.add_argument("--skip-jit-latency", action="store_true",
                    help="do not run `normjit bench --jit-latency`")
    ap.add_argument("--jit-timeout", type=int, default=180,
                    help="seconds allowed to `normjit bench --jit-latency` (180)")
    ap.add_argument("--cache-dir", default=None,
                    help="normjit cache directory for the engine (default: its own default)")
    ap.add_argument("--doc", default="docs/performance.md", help="markdown output")
    ap.add_argument("--plot", default="docs/performance.png", help="PNG output")
    ap.add_argument("--notes", default="docs/performance-notes.md",
                    help="hand-written analysis included verbatim when it exists")
    ap.add_argument("--host-cost", default="docs/host-cost.md",
                    help="per-call host cost from Python (scripts/host_cost.py), included when it "
                         "exists")
    ap.add_argument("--json-out", default=None,
                    help="raw results (default: $OUT/perf.json when OUT is set, else "
                         "BUILD/perf.json)")
    ap.add_argument("--list", action="store_true", help="list the selected problems and exit")
    ap.add_argument("--selftest", action="store_true",
                    help="check the non-GPU parts (no torch, no GPU) and exit")
    ap.add_argument("--plot-from-json", default=None, metavar="PERF_JSON",
                    help="measure nothing: draw --plot from a run's JSON (its --json-out) and exit")
    ap.add_argument("--refresh-notes", action="store_true",
                    help="measure nothing: replace the notes included at the end of --doc by the "
                         "current --notes (after an edit of the notes alone) and exit")
    args = ap.parse_args(argv)

    if args.reps is None:
        args.reps = 5 if args.quick else 20
    if args.rounds is None:
        args.rounds = 1 if args.quick else 5
    if args.warmup is None:
        args.warmup = 2 if args.quick else 3
    check_run_args(ap, args)
    args.build = repo_path(args.build)
    args.lib = repo_path(args.lib) if args.lib else str(Path(args.build) / "libnormjit.so")
    args.doc, args.plot, args.notes = (repo_path(args.doc), repo_path(args.plot),
                                       repo_path(args.notes))
    args.host_cost = repo_path(args.host_cost)
    if args.json_out is None:
        out_dir = os.environ.get("OUT")
        args.json_out = (str(Path(out_dir) / "perf.json") if out_dir
                         else str(Path(args.build) / "perf.json"))
    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    return args


def run_gpu(args: argparse.Namespace, problems: list[Problem], command: str) -> int:
    try:
        import torch
    except ImportError as e:
        print(f"compare_torch: PyTorch is needed for the measurements ({e}); "
              "--list and --selftest work without it", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("compare_torch: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    # PyTorch works in the device's primary context; normjit uses the context current on the
    # thread, so make PyTorch create it and make it current before the first normjit call.
    torch.cuda.init()
    torch.zeros(1, device=DEVICE)
    torch.cuda.synchronize()

    lib_path = Path(args.lib)
    try:
        nj = Normjit(lib_path)
        engine = nj.create_engine(cache_dir=args.cache_dir)
    except (OSError, ImportError, NormjitError) as e:
        print(f"compare_torch: cannot use {lib_path}: {e}", file=sys.stderr)
        return 2

    env, l2 = collect_environment(lib_path)
    liger, env["Liger-Kernel"] = load_liger(*LIGER_FORWARDS.values())
    liger_why = env["Liger-Kernel"]
    engines = {k: kernel_peers.load(k, Path(args.build)) for k in ENGINES}
    for k, (_, what) in engines.items():
        env[PEER_TITLES[k]] = what
    report = Report(env=env, command=command,
                    date_utc=datetime.datetime.now(datetime.timezone.utc).strftime(
                        "%Y-%m-%d %H:%M UTC"),
                    settings={"copy_grain": COPY_GRAIN, "reps": args.reps, "rounds": args.rounds,
                              "order": "rotated",
                              "warmup": args.warmup,
                              "seed": args.seed,
                              "quick": args.quick, "only": args.only, "dtypes": args.dtype_list},
                    copy_gbps=None, copy_times_ms=[], results=[], planned=len(problems), jit=None)
    for k, v in env.items():
        print(f"{k}: {v}")

    try:
        if not args.skip_jit_latency:
            print("JIT latency: normjit bench --jit-latency --json", flush=True)
            report.jit = measure_jit_latency(Path(args.build), args.jit_timeout)
            print(f"  {report.jit.status}"
                  + (f": {report.jit.message}" if report.jit.message else ""))

        print(f"copy bandwidth: {COPY_BYTES / 2**30:g} GiB device-to-device", flush=True)
        report.copy_gbps, report.copy_times_ms = measure_copy(args.reps, args.warmup)
        print(f"  {report.copy_gbps:.0f} GB/s (median of {args.reps})", flush=True)
        for label, nbytes in seed_sizes(problems):
            gbps, _ = measure_copy(args.reps, args.warmup, nbytes // 2)
            report.size_copies.append((label, nbytes, gbps))
            print(f"  a copy moving {nbytes / 1e6:.1f} MB ({label}): {gbps:.0f} GB/s", flush=True)

        runner = Runner(args, nj, engine, l2, report.copy_gbps, report.warnings, liger, liger_why,
                        engines)
        started = time.perf_counter()
        for i, p in enumerate(problems, 1):
            print(f"[{i}/{len(problems)}] {p.key} {shape_text(p.shape)} {p.describe()}, "
                  f"{p.bytes_moved / 1e9:.3f} GB moved", flush=True)
            t0 = time.perf_counter()
            report.results.append(runner.run(p))
            print(f"  done in {time.perf_counter() - t0:.1f} s "
                  f"({time.perf_counter() - started:.0f} s so far)", flush=True)
            if runner.broken:
                report.warnings.append(f"the CUDA context became unusable during {p.key} "
                                       f"({runner.broken}); the run stopped there")
                print(f"stopping: {report.warnings[-1]}", flush=True)
                break
            write_outputs(report, args, final=False)
        write_outputs(report, args, final=True)
    finally:
        nj.destroy_engine(engine)

    print()
    print(render_summary(report))
    print(f"\nwrote {args.doc}, {args.plot}, {args.json_out}")
    bad = [r for r in report.results
           if r.error or r.passed is False or r.normjit.status not in ("ok", "unsupported")]
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------
# Self-test (no GPU, no torch)
# ---------------------------------------------------------------------------------------

def table_blocks(markdown: str) -> list[list[str]]:
    blocks, cur = [], []
    for line in markdown.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return blocks


def split_row(line: str) -> list[str]:
    """Cells of a markdown table row, honouring escaped pipes."""
    assert line.startswith("|") and line.endswith("|"), line
    cells, cur, i = [], "", 1
    while i < len(line) - 1:
        if line[i] == "\\" and line[i + 1] == "|":
            cur += "\\|"
            i += 2
            continue
        if line[i] == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += line[i]
        i += 1
    cells.append(cur.strip())
    return cells


def check_tables(markdown: str) -> list[list[list[str]]]:
    """Every table: header, separator of ---/---:, rows all as wide as the header."""
    tables = []
    for block in table_blocks(markdown):
        assert len(block) >= 2, block
        header = split_row(block[0])
        sep = split_row(block[1])
        assert len(sep) == len(header), block[:2]
        assert all(c in ("---", "---:") for c in sep), block[1]
        rows = [split_row(line) for line in block[2:]]
        for row in rows:
            assert len(row) == len(header), (header, row)
        tables.append([header] + rows)
    return tables


def fake_report() -> Report:
    ps = {p.key: p for p in default_problems()}
    ok = lambda ms, err=1e-7, passed=None: Measurement(  # noqa: E731
        status="ok", ms=ms, times_ms=[ms] * 3, rel_err=err, nonfinite=0, passed=passed)
    na = lambda p: Measurement(status="n/a", message=liger_support(p))  # noqa: E731
    fna = lambda p: Measurement(status="n/a", message=engine_support("flashinfer", p))  # noqa: E731
    results = []
    # Seed RMSNorm f32 at 5.2 ms: normjit fine; Liger has no channel form.
    p = ps["seed rmsnorm f32"]
    r = ProblemResult(p, normjit=ok(5.2), eager=ok(14.34, passed=True),
                      compile=ok(5.49, passed=True), liger=na(p), flashinfer=fna(p),
                      vllm=Measurement(status="n/a", message=engine_support("vllm", p)),
                      copy=ok(4.96),
                      checks=[Check("N(1, 2)", 1.1e-7, 1e-6, 0, True),
                              Check("N(0, 0.001)", 2e-7, 1e-6, 0, True)])
    results.append(r)
    # LayerNorm f32: unsupported by normjit; compile failed; Liger: rows too long.
    p = ps["seed layernorm f32"]
    results.append(ProblemResult(p, normjit=Measurement(status="unsupported",
                                                        message="op=layernorm | x"),
                                 eager=ok(8.26, passed=True), liger=na(p), flashinfer=fna(p),
                                 copy=ok(0.19),
                                 compile=Measurement(status="failed",
                                                     message="BackendCompilerFailed: boom")))
    # GroupNorm bf16: normjit wrote NaN somewhere; Liger faster but off on N(100, 1).
    results.append(ProblemResult(ps["seed groupnorm bf16"], normjit=ok(3.0, math.nan),
                                 eager=ok(8.44, passed=True), compile=ok(4.10, passed=True),
                                 liger=ok(2.9, 2e-3, passed=False), copy=ok(2.48),
                                 checks=[Check("N(3, 1.5)", math.nan, math.nan, 12, False)],
                                 liger_checks=[Check("N(3, 1.5)", 2e-3, 0.01, 0, True),
                                               Check("N(100, 1)", 3e-2, 0.5, 0, False)]))
    # LLM rows: Liger the best peer; the copy of the same bytes faster than normjit.
    results.append(ProblemResult(ps["llm rmsnorm h4096 bf16"], rotation=4, normjit=ok(0.025, 3e-3),
                                 eager=ok(0.06, 3e-3, True), compile=ok(0.03, 3e-3, True),
                                 liger=ok(0.024, 3e-3, True), flashinfer=ok(0.0245, 3e-3, True),
                                 vllm=ok(0.0235, 3e-3, True), copy=ok(0.0225),
                                 checks=[Check("N(1, 2)", 3e-3, 0.01, 0, True)],
                                 liger_checks=[Check("N(1, 2)", 3e-3, 0.01, 0, True)]))
    results.append(ProblemResult(ps["sd groupnorm c320 64x64 b2 f32"], error="OutOfMemoryError: x"))
    # Liger not importable in that run.
    results.append(ProblemResult(ps["long rmsnorm 64Mi f32"], normjit=ok(0.4),
                                 eager=ok(1.0, passed=True), compile=ok(0.5, passed=True),
                                 liger=Measurement(status="absent", message="not measured "
                                                   "(ModuleNotFoundError: "
                                                   "No module named 'triton')"),
                                 copy=Measurement(status="failed", message="OutOfMemoryError: y"),
                                 checks=[Check("N(1, 2)", 1e-7, 1e-6, 0, True)]))
    return Report(env={"device": "FakeGPU (132 SMs)", "PyTorch": "2.11.0", "Triton": "3.5",
                       "Liger-Kernel": "0.8.5"},
                  command="python3 tools/compare_torch.py --selftest",
                  date_utc="2025-01-01 00:00 UTC",
                  settings={"reps": 20, "warmup": 3, "seed": 1},
                  copy_gbps=3000.0, copy_times_ms=[1.43, 1.44, 1.45], results=results, planned=7,
                  size_copies=[("seed layernorm bf16", 285_000_000, 2850.0)],
                  jit=JitLatency("normjit bench --jit-latency --json", "ok",
                                 data={"device": "H100", "cold_compile_ms": 812.5,
                                       "hits": {"disk_ms": 1.2, "memory_us": 0.4},
                                       "cases": [{"spec": "op=rmsnorm|x", "cold_ms": 800.0},
                                                 {"spec": "op=layernorm", "launch_us": 3.1}]}),
                  warnings=["seed groupnorm bf16: PyTorch eager is off the float64 reference by "
                            "2.0e-02"])


def selftest() -> int:
    # Problems: valid, unique, derived sizes as the floor of gpu.md says.
    problems = default_problems()
    for p in problems:
        p.validate()
    keys = [p.key for p in problems]
    assert len(keys) == len(set(keys)), "duplicate problem names"
    by_key = {p.key: p for p in problems}
    rms = by_key["seed rmsnorm f32"]
    assert rms.bytes_moved == 2 * 112 * 64 * 512 * 512 * 4
    assert abs(rms.bytes_moved / 2991e9 * 1e3 - 5.0) < 0.05, "gpu.md: floor about 5.0 ms"
    ln = by_key["seed layernorm f32"]
    assert ln.param_shape == (64, 256, 256) and ln.param_count == 2
    # gpu.md: floor about 0.19 ms for the f32 LayerNorm seed.
    assert abs(ln.bytes_moved / 2991e9 * 1e3 - 0.19) < 0.015, ln.bytes_moved / 2991e9 * 1e3
    gn = by_key["seed groupnorm f32"]
    assert gn.param_shape == (64,) and gn.describe() == "G=8, w+b"
    assert by_key["llm rmsnorm h8192 bf16"].param_shape == (8192,)
    assert rms.describe() == "dim 1" and not rms.reduces_dim0
    assert Problem("x", "t", "layernorm", (4, 8), "f32", 1e-5, normalized_dims=2).reduces_dim0

    # Argument parsing and selection.
    a = parse_args(["--only", "seeds", "--quick"])
    sel = select_problems(problems, a.only, a.dtype_list, a.quick)
    assert [p.key for p in sel] == [p.key for p in problems if p.group == "seeds"], sel
    assert len(sel) == 6 and a.reps == 5 and a.warmup == 2
    a = parse_args([])
    assert a.reps == 20 and a.warmup == 3 and a.lib.endswith("build/libnormjit.so")
    assert os.path.isabs(a.doc) and a.doc.endswith("docs/performance.md")
    assert all(p.dtype != "f16" for p in select_problems(problems, None, a.dtype_list, False))
    sel = select_problems(problems, "layernorm,c640", ["bf16"], False)
    assert {p.op for p in sel} == {"layernorm", "groupnorm"} and all(p.dtype == "bf16" for p in sel)
    a = parse_args(["--dtypes", "f16", "--only", "sd", "--reps", "7"])
    assert a.reps == 7 and all(p.dtype == "f16" and p.group == "sd"
                               for p in select_problems(problems, a.only, a.dtype_list, a.quick))
    old_out = os.environ.get("OUT")
    os.environ["OUT"] = "/tmp/out-x"
    try:
        assert parse_args([]).json_out == "/tmp/out-x/perf.json"
    finally:
        if old_out is None:
            del os.environ["OUT"]
        else:
            os.environ["OUT"] = old_out

    # The C struct layout (offsetof from a C compiler on x86-64: 0, 8, 16, 24, 32, 36; 40).
    offs = [getattr(EngineOptions, f).offset for f, _ in EngineOptions._fields_]
    assert offs == [0, 8, 16, 24, 32, 36] and ctypes.sizeof(EngineOptions) == 40, offs

    # Markdown of a fake run.
    report = fake_report()
    notes = "## RMSNorm channel\n\nLimited by bytes | see ncu.\n"
    md = render_markdown(report, notes, "performance.png")
    # A run's JSON read back (--plot-from-json) gives the same tables (NaN errors come back as
    # null: JSON has no NaN).
    back = report_from_json(json.loads(json.dumps(json_safe(report_json(report)), default=str)))
    assert check_tables(render_markdown(back, notes, "performance.png")) == check_tables(md)
    assert [back.pct_copy(r, "normjit") for r in back.results] == \
        [report.pct_copy(r, "normjit") for r in report.results]
    tables = check_tables(md)
    results = [t for t in tables if t[0] == RESULT_HEADERS]
    assert len(results) == 4, "one table per group (seeds, llm, sd, long)"
    seeds = {(row[0], row[3]): row for row in results[0][1:]}
    row = seeds[("seed rmsnorm", "f32")]
    col = {h: i for i, h in enumerate(RESULT_HEADERS)}
    assert row[col["normjit ms"]] == "5.200" and row[col["eager ms"]] == "14.34"
    assert row[col["vs eager"]] == "2.76x" and row[col["vs compile"]] == "1.06x", row
    assert row[col["% of copy BW"]] == f"{100 * rms.bytes_moved / 5.2e-3 / 1e9 / 3000:.1f}%"
    assert row[col["rel. err"]] == "2.0e-07" and row[col["check"]] == "pass"
    assert row[col["shape"]] == "[112, 64, 512, 512]"
    # The new peers: Liger n/a with its reason as a note under the table, the copy of the
    # problem's own bytes, the best peer.
    assert row[col["Liger ms"]] == "n/a [1]" and row[col["vs Liger"]] == "—", row
    assert row[col["FlashInfer ms"]] == "n/a [2]" and row[col["vs FlashInfer"]] == "—", row
    assert row[col["vLLM ms"]] == "n/a [3]" and row[col["vs vLLM"]] == "—", row
    assert row[col["copy ms"]] == "4.960" and row[col["% of copy"]] == "95.4%", row
    assert row[col["best peer"]] == "compile" and row[col["vs best"]] == "1.06x", row
    row = seeds[("seed layernorm", "f32")]
    assert row[col["normjit ms"]] == "unsupported" and row[col["compile ms"]] == "failed"
    assert row[col["vs eager"]] == "—" and row[col["check"]] == "unsupported"
    assert row[col["eager ms"]] == "8.260" and row[col["Liger ms"]] == "n/a [4]", row
    assert row[col["FlashInfer ms"]] == "n/a [5]" and row[col["vLLM ms"]] == "not run", row
    assert row[col["best peer"]] == "eager" and row[col["vs best"]] == "—"
    assert row[col["% of copy"]] == "—" and row[col["copy ms"]] == "0.190"
    row = seeds[("seed groupnorm", "bf16")]
    assert row[col["rel. err"]] == "NaN" and row[col["check"]] == "**FAIL**"
    # Liger is the fastest here but wrong: marked, and no best peer.
    assert row[col["Liger ms"]] == "2.900 **FAIL**" and row[col["best peer"]] == "compile", row
    assert row[col["vs Liger"]] == "0.97x" and row[col["vs best"]] == "1.37x", row
    assert "- [1] Liger n/a: Liger's rms_norm_forward normalizes the last dim only" in md
    assert "- [2] FlashInfer n/a: FlashInfer's rmsnorm normalizes the last dim only" in md
    assert "- [3] vLLM n/a: vLLM's rmsnorm normalizes the last dim only" in md
    assert "- [4] Liger n/a: rows over 65536 elements: Liger's layer_norm_forward" in md
    assert "- [5] FlashInfer n/a: FlashInfer's CUDA norm module has RMSNorm kernels only" in md
    # The groupnorm row names no FlashInfer status: not run, no note.
    assert seeds[("seed groupnorm", "bf16")][col["FlashInfer ms"]] == "not run"
    assert "seed groupnorm bf16, Liger on N(100, 1): rel. err 3.0e-02" in md
    # Which problems FlashInfer's kernels compute: 16-bit RMSNorm rows with a weight.
    by_key = {q.key: q for q in default_problems()}
    supported = sorted(k for k, q in by_key.items() if not engine_support("flashinfer", q))
    assert supported == sorted(k for k, q in by_key.items() if not engine_support("vllm", q))
    assert "llm rmsnorm h4096 bf16" in supported and all("rmsnorm" in k for k in supported)
    assert not any(k.endswith(" f32") for k in supported), supported
    f32_rows = dataclasses.replace(by_key["llm rmsnorm h4096 bf16"], dtype="f32")
    assert "f16 or bf16 x here, not f32" in engine_support("flashinfer", f32_rows)
    huge = dataclasses.replace(by_key["llm rmsnorm h4096 bf16"], shape=(2**19, 4096))
    assert "32-bit integers" in engine_support("vllm", huge)
    assert not engine_support("vllm", dataclasses.replace(huge, shape=(2**19 - 1, 4096)))
    assert engine_support("vllm", by_key["seed groupnorm f32"]).startswith("vLLM's layernorm")
    llm = results[1][1]
    assert llm[col["best peer"]] == "vLLM" and llm[col["vs best"]] == "0.94x", llm
    assert llm[col["vLLM ms"]] == "0.024" and llm[col["vs vLLM"]] == "0.94x", llm
    assert llm[col["Liger ms"]] == "0.024" and llm[col["% of copy"]] == "90.0%", llm
    assert llm[col["FlashInfer ms"]] == "0.025" and llm[col["vs FlashInfer"]] == "0.98x", llm
    assert results[2][1][col["check"]] == "error"
    long_row = results[3][1]
    assert long_row[col["Liger ms"]] == "absent" and long_row[col["copy ms"]] == "failed"
    assert long_row[col["best peer"]] == "compile" and long_row[col["vs best"]] == "1.25x"
    assert "long rmsnorm 64Mi f32, copy: OutOfMemoryError: y" in md
    assert "Liger-Kernel is absent from this run**: not measured (ModuleNotFoundError" in md
    copies = [t for t in tables if t[0][0] == "seed problems"]
    assert copies and copies[0][1] == ["seed layernorm bf16", "285.0", "0.100", "2850", "95.0%"]
    sizes = seed_sizes(default_problems())
    assert len(sizes) == 4, sizes  # layernorm bf16, f32; rmsnorm and groupnorm bf16, f32
    assert "seed rmsnorm bf16" in sizes[2][0] and "seed groupnorm bf16" in sizes[2][0], sizes
    for needle in ("# normjit performance", "FakeGPU", "3000 GB/s", "## JIT latency",
                   "## Analysis per kernel", "Limited by bytes | see ncu.", "![% of copy",
                   "Incomplete run: 6 of 7", "BackendCompilerFailed: boom", "12 non-finite",
                   "off the float64 reference", "`python3 tools/compare_torch.py --selftest`",
                   "cold_compile_ms", "hits.disk_ms", "launch_us"):
        assert needle in md, needle
    assert "performance-notes.md does not exist" in render_markdown(report, None, None)
    # --refresh-notes keeps the measured part and swaps the notes.
    rendered = render_markdown(report, "old notes\n", None)
    refreshed = refresh_notes(rendered, "new notes\n")
    assert refreshed.startswith(rendered[:rendered.index(NOTES_MARKER)])
    assert refreshed.endswith(NOTES_MARKER + "\n\nnew notes\n") and "old notes" not in refreshed
    try:
        refresh_notes("# no marker\n", "x")
        raise AssertionError("a document without the marker was accepted")
    except ValueError:
        pass

    # The host-cost block: included, replaced in place, inserted where absent.
    with_cost = render_markdown(report, notes, None,
                                "## Host cost\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert with_cost.index(HOST_COST_BEGIN) < with_cost.index("## Analysis per kernel")
    check_tables(with_cost)
    swapped = splice_host_cost(with_cost, "## Host cost\n\nnew\n")
    assert "new" in swapped and "| 1 | 2 |" not in swapped and swapped.count(HOST_COST_BEGIN) == 1
    assert swapped.endswith(with_cost[with_cost.index(HOST_COST_END) + len(HOST_COST_END):])
    inserted = splice_host_cost(rendered, "x")
    assert inserted.index(HOST_COST_BEGIN) < inserted.index("## Analysis per kernel")
    assert splice_host_cost("# doc\n", "x").endswith(HOST_COST_END + "\n")

    # tools/bench_variants.py's section: replaced in place, inserted before the host cost.
    block = VARIANTS_BEGIN + "\n## Variants\n\n| a |\n|---|\n| 1 |\n" + VARIANTS_END
    placed = splice_variants(with_cost, block)
    assert placed.index(block) < placed.index(HOST_COST_BEGIN) and variants_block(placed) == block
    assert splice_variants(placed, block.replace("| 1 |", "| 2 |")).count(VARIANTS_BEGIN) == 1
    assert "| 2 |" in splice_variants(placed, block.replace("| 1 |", "| 2 |"))
    assert (splice_variants(rendered, block).index(block)
            < rendered.index("## Analysis per kernel") + 1)
    assert splice_variants("# doc\n", block) == "# doc\n\n" + block + "\n"
    assert variants_block(rendered) is None and variants_block(VARIANTS_BEGIN) is None

    # JIT latency of unknown layouts, and its absence.
    for data in ({"a": 1, "b": 2.5}, [{"x": 1}, {"y": 2}], {"k": {"p": {"ms": 1}, "q": {"us": 2}}},
                 [1, 2], "text", {}):
        lines = render_jit(data)
        check_tables("\n".join(lines))
    t = check_tables("\n".join(render_jit({"k": {"p": {"ms": 1}, "q": {"us": 2}}})))[0]
    assert t[0] == ["k", "ms", "us"] and t[1] == ["p", "1", "—"], t
    report.jit = JitLatency("normjit bench", "absent", "build/tools/normjit does not exist")
    assert "No numbers (absent)" in render_markdown(report, None, None)
    assert parse_json_output('log line\n{"a": 1}\n') == {"a": 1}
    missing = measure_jit_latency(Path("/nonexistent"), 5)
    assert missing.status == "absent", missing

    # Outputs on disk: markdown, JSON (NaN as null), plot when matplotlib is there.
    with tempfile.TemporaryDirectory() as tmp:
        args = argparse.Namespace(notes=str(Path(tmp) / "notes.md"), plot=str(Path(tmp) / "p.png"),
                                  doc=str(Path(tmp) / "docs" / "performance.md"),
                                  json_out=str(Path(tmp) / "perf.json"),
                                  host_cost=str(Path(tmp) / "host-cost.md"))
        Path(args.notes).write_text(notes)
        write_outputs(fake_report(), args, final=True)
        data = json.loads(Path(args.json_out).read_text())
        assert data["results"][2]["derived"]["max_rel_err"] is None
        assert abs(data["results"][0]["derived"]["speedup_vs_eager"] - 14.34 / 5.2) < 1e-9
        doc = Path(args.doc).read_text()
        assert "Limited by bytes" in doc
        # The plot and its link come with the final write only.
        if Path(args.plot).exists():
            assert "](../p.png)" in doc and Path(args.plot).stat().st_size > 1000
            print("selftest: plot written")
        else:
            print("selftest: matplotlib not available here, plot not checked")
        # A regeneration keeps the variants section that tools/bench_variants.py wrote.
        Path(args.doc).write_text(splice_variants(doc, block))
        write_outputs(fake_report(), args, final=False)
        assert variants_block(Path(args.doc).read_text()) == block
        # And the backward and vision sections, in their order after the variants.
        backward = BACKWARD_BEGIN + "\n## Backward\n" + BACKWARD_END
        vision = VISION_BEGIN + "\n## Vision\n" + VISION_END
        doc = Path(args.doc).read_text()
        doc = splice_section(doc, VISION_BEGIN, VISION_END, vision)
        Path(args.doc).write_text(splice_section(doc, BACKWARD_BEGIN, BACKWARD_END, backward))
        write_outputs(fake_report(), args, final=False)
        doc = Path(args.doc).read_text()
        assert [b for _, _, b in kept_sections(doc)] == [block, backward, vision]
        # (inserted in the other order, regenerated in this one)
        assert doc.index(block) < doc.index(backward) < doc.index(vision)
        assert doc.index(vision) < doc.index("## Analysis per kernel")

    print(render_summary(fake_report()))

    # libnormjit.so, when built: prototypes load and a call with NULL pointers fails with a
    # readable status instead of crashing (no GPU needed).
    lib = Path(parse_args([]).lib)
    if lib.exists():
        nj = Normjit(lib)
        engine = nj.create_engine(memory_only=True)
        for p in (rms, ln, gn, by_key["llm rmsnorm h4096 bf16"]):
            bound = nj.bind(engine, p, 0, 0, None, None, 0)
            try:
                bound()
                raise AssertionError("a NULL x must not succeed")
            except NormjitError as e:
                assert e.message, e
                print(f"selftest: libnormjit answers {p.op} with a NULL x: {e}")
        nj.destroy_engine(engine)
    else:
        print(f"selftest: {lib} not built, C API not exercised")
    print("selftest: ok")
    return 0


NOTES_MARKER = "<!-- included verbatim from docs/performance-notes.md -->"
HOST_COST_BEGIN = "<!-- host cost: included from docs/host-cost.md (scripts/host_cost.py) -->"
HOST_COST_END = "<!-- host cost: end -->"


def host_cost_block(text: str) -> list[str]:
    """The lines of docs/host-cost.md (written by scripts/host_cost.py) between the markers."""
    return [HOST_COST_BEGIN, "", text.strip("\n"), "", HOST_COST_END]


def splice_host_cost(doc: str, text: str) -> str:
    """`doc` (a generated performance.md) with its host-cost block replaced by `text`, or the
    block inserted before the analysis per kernel (or at the end) when it has none."""
    block = "\n".join(host_cost_block(text))
    begin, end = doc.find(HOST_COST_BEGIN), doc.find(HOST_COST_END)
    if begin >= 0 and end > begin:
        return doc[:begin] + block + doc[end + len(HOST_COST_END):]
    at = doc.find("## Analysis per kernel")
    if at < 0:
        return doc.rstrip("\n") + "\n\n" + block + "\n"
    return doc[:at] + block + "\n\n" + doc[at:]


VARIANTS_BEGIN = "<!-- variants: written by tools/bench_variants.py; compare_torch.py keeps it -->"
VARIANTS_END = "<!-- variants: end -->"
BACKWARD_BEGIN = "<!-- backward: written by tools/bench_backward.py; compare_torch.py keeps it -->"
BACKWARD_END = "<!-- backward: end -->"
VISION_BEGIN = "<!-- vision: written by tools/bench_vision.py; compare_torch.py keeps it -->"
VISION_END = "<!-- vision: end -->"
# The sections other scripts measure and write into the document, in their order there;
# compare_torch.py carries each over as it is when it regenerates the rest.
KEPT_SECTIONS = ((VARIANTS_BEGIN, VARIANTS_END), (BACKWARD_BEGIN, BACKWARD_END),
                 (VISION_BEGIN, VISION_END))


def section_block(doc: str, begin_marker: str, end_marker: str) -> Optional[str]:
    """The section between the markers in `doc`, markers included; None if there is none."""
    begin = doc.find(begin_marker)
    end = doc.find(end_marker, begin)
    if begin < 0 or end < 0:
        return None
    return doc[begin:end + len(end_marker)]


def splice_section(doc: str, begin_marker: str, end_marker: str, block: str) -> str:
    """`doc` with the section between the markers replaced by `block` (markers included), or
    `block` inserted before the host-cost block, else before the analysis per kernel, else at
    the end (so sections inserted one after the other keep their order)."""
    begin = doc.find(begin_marker)
    end = doc.find(end_marker, begin)
    if begin >= 0 and end >= 0:
        return doc[:begin] + block + doc[end + len(end_marker):]
    for anchor in (HOST_COST_BEGIN, "## Analysis per kernel"):
        at = doc.find(anchor)
        if at >= 0:
            return doc[:at] + block + "\n\n" + doc[at:]
    return doc.rstrip("\n") + "\n\n" + block + "\n"


def write_section_into(doc: Path, begin_marker: str, end_marker: str, block: str,
                       section_out: Optional[Path] = None) -> None:
    """`block` (a bench script's section, markers included) into the file `doc`, replacing its
    section or inserted as splice_section() does; `doc` is created with the block alone when it
    does not exist. `section_out`, when given, gets the block alone too."""
    text = doc.read_text() if doc.exists() else ""
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(splice_section(text, begin_marker, end_marker, block) if text else block + "\n")
    if section_out:
        section_out.parent.mkdir(parents=True, exist_ok=True)
        section_out.write_text(block + "\n")


def write_json_file(data: Any, path: Path) -> None:
    """`data` as JSON (json_safe: NaN and inf as null) into `path`, through a temporary file
    beside it, so that a reader never finds half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json_safe(data), indent=1, default=str, allow_nan=False)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def render_from_json(args: argparse.Namespace, name: str, report_from_json: Callable,
                     merge_reports: Callable, write_section: Callable,
                     write_json: Callable) -> int:
    """A bench script's --from-json: the reports of the comma-separated JSON files
    (report_from_json of each, merged by merge_reports) rendered into args.doc (and
    args.section_out) by write_section; where --json-out was given (args.json_out_given), the
    merged report written there by write_json too, to merge the next partial run into (e.g.
    docs/perf_backward.json). Measures nothing; returns the exit status (0)."""
    paths = [Path(f) for f in args.from_json.split(",") if f.strip()]
    rep = merge_reports([report_from_json(json.loads(f.read_text())) for f in paths])
    write_section(rep, Path(args.doc), Path(args.section_out) if args.section_out else None)
    print(f"wrote the {name} section of {', '.join(map(str, paths))} into {args.doc}")
    if args.json_out_given:
        write_json(rep, Path(args.json_out))
        print(f"wrote the merged JSON to {args.json_out}")
    return 0


def kept_sections(doc: str) -> list[tuple[str, str, str]]:
    """(begin marker, end marker, block) of each KEPT_SECTIONS section that `doc` has."""
    found = []
    for begin, end in KEPT_SECTIONS:
        block = section_block(doc, begin, end)
        if block is not None:
            found.append((begin, end, block))
    return found


def variants_block(doc: str) -> Optional[str]:
    """The section tools/bench_variants.py wrote into `doc`, markers included; None if none."""
    return section_block(doc, VARIANTS_BEGIN, VARIANTS_END)


def splice_variants(doc: str, block: str) -> str:
    """`doc` with its variants section replaced by `block` (markers included), or `block`
    inserted before the host-cost block, else before the analysis per kernel, else at the end."""
    return splice_section(doc, VARIANTS_BEGIN, VARIANTS_END, block)


def refresh_notes(doc: str, notes: str) -> str:
    """`doc` (a generated performance.md) with the notes after NOTES_MARKER replaced by `notes`;
    the measured part above stays as it was. ValueError when `doc` has no such marker."""
    at = doc.find(NOTES_MARKER)
    if at < 0:
        raise ValueError(f"no '{NOTES_MARKER}' line: not a document this script wrote with notes")
    return doc[:at] + NOTES_MARKER + "\n\n" + notes.rstrip("\n") + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.selftest:
        return selftest()
    if args.plot_from_json:
        try:
            report = report_from_json(json.loads(Path(args.plot_from_json).read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"compare_torch: --plot-from-json: {e}", file=sys.stderr)
            return 2
        if not write_plot(report, Path(args.plot)):
            return 1
        print(f"wrote {args.plot} (from {args.plot_from_json}: {report.date_utc}, "
              f"{report.env.get('normjit', '?')})")
        return 0
    if args.refresh_notes:
        try:
            doc = Path(args.doc).read_text()
            Path(args.doc).write_text(refresh_notes(doc, Path(args.notes).read_text()))
        except (OSError, ValueError) as e:
            print(f"compare_torch: --refresh-notes: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.doc} (notes from {args.notes}; measurements unchanged)")
        return 0
    problems = select_problems(default_problems(), args.only, args.dtype_list, args.quick)
    for p in problems:
        p.validate()
    if args.list:
        for p in problems:
            print(f"{p.key:40s} {shape_text(p.shape):22s} {p.describe():16s} "
                  f"{p.bytes_moved / 1e9:8.3f} GB")
        return 0
    if not problems:
        print("compare_torch: no problem selected", file=sys.stderr)
        return 2
    command = shlex.join(["python3", *(sys.argv if argv is None
                                       else ["tools/compare_torch.py", *argv])])
    return run_gpu(args, problems, command)


if __name__ == "__main__":
    sys.exit(main())
