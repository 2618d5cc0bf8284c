#!/usr/bin/env python3
"""The norms of an LLM decoder layer with normjit's variants, each against the PyTorch
expression it replaces (float64 reference), on the GPU:

  * add_rms_norm: the residual add fused into the norm (h = x + residual kept in float32, as
    engines keep the residual stream), and its in-place form (vLLM's fused_add_rms_norm);
  * QK-norm on per-head views of the qkv projection, read where they are (no copy);
  * Gemma's (1 + weight) RMSNorm (weight_offset=1) with a float32 weight on bf16 activations;
  * fp8 (e4m3) output with a per-tensor scale for the next GEMM.

    python3 examples/decoder_norms.py [--tokens 128] [--hidden 4096]
    python3 examples/decoder_norms.py --device cpu   # no GPU: the same calls, PyTorch's fallback

On the CPU every call falls back to PyTorch's implementation (one NormjitFallbackWarning per
reason), so the numbers check the calls and the reference, not normjit's kernels.
"""
import argparse
import sys
import warnings

import torch

import normjit.torch as njt


def max_rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


def rms(h: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0) -> torch.Tensor:
    """The float64 reference: h / sqrt(mean(h^2) + eps) * (offset + weight)."""
    hd = h.double()
    return hd * torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + eps) * (offset + weight.double())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128, help="rows of x (default 128)")
    ap.add_argument("--hidden", type=int, default=4096, help="hidden size (default 4096)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (default): normjit's kernels; cpu: PyTorch's fallback")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("decoder_norms: error: no CUDA device (--device cpu runs the same calls through "
              "PyTorch's fallback)", file=sys.stderr)
        return 1
    if args.device == "cpu":
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)  # every call falls back
    torch.manual_seed(0)
    t, d, heads, kv_heads, head_dim = args.tokens, args.hidden, 32, 8, 128
    bf16, dev = torch.bfloat16, args.device
    x = torch.randn(t, d, device=dev, dtype=bf16)
    residual = torch.randn(t, d, device=dev, dtype=torch.float32)
    w = 1 + 0.1 * torch.randn(d, device=dev, dtype=torch.float32)
    rows = []
    with torch.inference_mode():
        # 1. residual add + RMSNorm, bf16 activations, float32 residual stream and weight
        y, h = njt.add_rms_norm(x, residual, d, w, 1e-6)
        h_ref = x.float() + residual
        rows.append(("add_rms_norm: h bit-exact", float(not torch.equal(h, h_ref))))
        rows.append(("add_rms_norm: y", max_rel(y, rms(h_ref, w, 1e-6))))
        x2, r2 = x.clone(), residual.clone()
        njt.add_rms_norm(x2, r2, d, w, 1e-6, inplace=True)
        rows.append(("add_rms_norm in place = out of place",
                     float(not (torch.equal(x2, y) and torch.equal(r2, h)))))

        # 2. QK-norm on [tokens, heads, 128] views of the qkv projection
        qkv = torch.randn(t, (heads + 2 * kv_heads) * head_dim, device=dev, dtype=bf16)
        q = qkv[:, :heads * head_dim].view(t, heads, head_dim)
        k = qkv[:, heads * head_dim:(heads + kv_heads) * head_dim].view(t, kv_heads, head_dim)
        wq = 1 + 0.1 * torch.randn(head_dim, device=dev, dtype=bf16)
        qn, kn = njt.rms_norm(q, head_dim, wq, 1e-6), njt.rms_norm(k, head_dim, wq, 1e-6)
        rows.append(("rms_norm of q view", max_rel(qn, rms(q, wq, 1e-6))))
        rows.append(("rms_norm of k view", max_rel(kn, rms(k, wq, 1e-6))))

        # 3. Gemma: float32 math times (1 + weight), rounded once
        wg = 0.1 * torch.randn(d, device=dev, dtype=torch.float32)
        yg = njt.rms_norm(x, d, wg, 1e-6, weight_offset=1.0)
        rows.append(("rms_norm weight_offset=1 (Gemma)", max_rel(yg, rms(x, wg, 1e-6, 1.0))))

        # 4. fp8 output for the next GEMM: y8 = saturate(norm * scale)
        scale = torch.tensor([8.0], device=dev)
        y8 = njt.rms_norm(h, d, w, 1e-6, out_dtype=torch.float8_e4m3fn, scale=scale)
        ref8 = (rms(h_ref, w, 1e-6) * 8.0).clamp(-448, 448)
        rows.append(("rms_norm out fp8 e4m3 (x scale)", max_rel(y8.float(), ref8)))
    for name, err in rows:
        print(f"{name:40s} {err:.2e}")
    # bf16 outputs: one rounding (2^-8 relative); fp8 e4m3: 2^-4
    bad = [name for name, err in rows if err > (7e-2 if "fp8" in name else 1e-2)]
    print("decoder_norms: " + ("ok" if not bad else f"beyond tolerance: {bad}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
