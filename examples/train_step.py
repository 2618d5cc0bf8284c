#!/usr/bin/env python3
"""Training through normjit.torch: a small decoder stack whose norms are normjit's, trained a few
steps with AdamW beside the same model computing its norms in PyTorch, on the GPU:

  * Gemma's (1 + weight) RMSNorm with the residual add fused in: add_rms_norm(...,
    weight_offset=1.0), its forward saving h's statistics, its backward normjit's kernel on h;
  * QK-norm on per-head views of the qkv projection, read where they are in the forward;
  * a conv stem's GroupNorm -> SiLU of its channels-last output (diffusion's ResNet blocks): one
    kernel each way (layout=nhwc with activation=silu; the backward kernel takes the gradient
    through SiLU's derivative).

Each step prints both models' losses and the largest relative difference between a parameter's
gradients; both models start from the same weights and see the same batches. The backward
kernels sum dweight in a fixed order, so a rerun gives the same bits.

    python3 examples/train_step.py [--steps 5] [--hidden 512] [--compile]
    python3 examples/train_step.py --device cpu   # no GPU: the same calls, PyTorch's fallback

On the CPU every normjit call falls back to PyTorch's implementation (one NormjitFallbackWarning
per reason), so the two models agree by construction there; the run checks the calls.
"""
import argparse
import sys
import warnings

import torch
import torch.nn.functional as F

import normjit.torch as njt


def torch_add_rms_norm(x, residual, hidden, weight, eps, weight_offset=0.0):
    """add_rms_norm's expression (its docstring) in PyTorch."""
    h = (x.float() + residual.float()).to(residual.dtype)
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * (weight_offset + weight.float())
    return y.to(x.dtype), h


NORMS = {
    "normjit": (njt.add_rms_norm, njt.rms_norm,
                lambda x, g, w, b, eps: njt.group_norm(x, g, w, b, eps, activation="silu")),
    "torch": (torch_add_rms_norm, lambda x, n, w, eps: F.rms_norm(x, (n,), w, eps),
              lambda x, g, w, b, eps: F.silu(F.group_norm(x, g, w, b, eps))),
}


class Stack(torch.nn.Module):
    """A conv stem (GroupNorm -> SiLU of its channels-last output), then decoder blocks over the
    stream: h = x + residual with Gemma's norm, attention with QK-norm, an MLP."""

    def __init__(self, norms: str, hidden: int, heads: int, blocks: int):
        super().__init__()
        self.add_norm, self.norm, self.group_norm = NORMS[norms]
        self.hidden, self.heads = hidden, heads
        self.stem = torch.nn.Conv2d(3, hidden, 4, stride=4)
        self.stem_w, self.stem_b = (torch.nn.Parameter(torch.ones(hidden)),
                                    torch.nn.Parameter(torch.zeros(hidden)))
        d, hd = hidden, hidden // heads
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(d, 3 * d, bias=False)
                                       for _ in range(blocks))
        self.out = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(blocks))
        self.mlp = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
            for _ in range(blocks))
        # Gemma's weights start at 0 (the weight used is 1 + w); QK-norm's at 1.
        self.w_attn = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(d))
                                             for _ in range(blocks))
        self.w_mlp = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(d))
                                            for _ in range(blocks))
        self.wq = torch.nn.ParameterList(torch.nn.Parameter(torch.ones(hd)) for _ in range(blocks))
        self.wk = torch.nn.ParameterList(torch.nn.Parameter(torch.ones(hd)) for _ in range(blocks))
        self.head = torch.nn.Linear(d, 10)

    def forward(self, images):
        s = self.stem(images.to(memory_format=torch.channels_last))
        s = self.group_norm(s, 8, self.stem_w, self.stem_b, 1e-5)
        stream = s.flatten(2).transpose(1, 2)  # [batch, tokens, hidden]
        branch = torch.zeros_like(stream)
        b, t, d = stream.shape
        hd = d // self.heads
        for i in range(len(self.qkv)):
            y, stream = self.add_norm(branch, stream, d, self.w_attn[i], 1e-6, weight_offset=1.0)
            qkv = self.qkv[i](y)  # q, k and v are views of it: [b, t, heads, hd], strided
            q = self.norm(qkv[..., :d].unflatten(-1, (self.heads, hd)), hd, self.wq[i], 1e-6)
            k = self.norm(qkv[..., d:2 * d].unflatten(-1, (self.heads, hd)), hd, self.wk[i],
                          1e-6)
            v = qkv[..., 2 * d:].unflatten(-1, (self.heads, hd))
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2)).transpose(1, 2).flatten(2)
            y, stream = self.add_norm(self.out[i](a), stream, d, self.w_mlp[i], 1e-6,
                                      weight_offset=1.0)
            branch = self.mlp[i](y)
        return self.head((stream + branch).mean(1))


def max_rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    ap.add_argument("--hidden", type=int, default=512, help="hidden size (default 512)")
    ap.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    ap.add_argument("--blocks", type=int, default=2, help="decoder blocks (default 2)")
    ap.add_argument("--batch", type=int, default=8, help="images a batch (default 8)")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile(fullgraph=True) both models' forward and backward")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (default): normjit's kernels; cpu: PyTorch's fallback")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("train_step: error: no CUDA device (--device cpu runs the same calls through "
              "PyTorch's fallback)", file=sys.stderr)
        return 1
    if args.hidden % args.heads or args.hidden % 8:
        ap.error(f"--hidden {args.hidden} must be a multiple of --heads ({args.heads}) and of 8")
    if args.device == "cpu":
        warnings.simplefilter("ignore", njt.NormjitFallbackWarning)  # every call falls back
    torch.manual_seed(0)
    dev = args.device
    ours = Stack("normjit", args.hidden, args.heads, args.blocks).to(dev)
    theirs = Stack("torch", args.hidden, args.heads, args.blocks).to(dev)
    theirs.load_state_dict(ours.state_dict())
    models = {"normjit": ours, "torch": theirs}
    optims = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    forward = {k: torch.compile(m, fullgraph=True) if args.compile else m
               for k, m in models.items()}
    print(f"{'step':>4}  {'loss normjit':>12}  {'loss torch':>12}  largest gradient difference")
    worst = 0.0
    for step in range(args.steps):
        images = torch.randn(args.batch, 3, 32, 32, device=dev)
        labels = torch.randint(0, 10, (args.batch,), device=dev)
        losses = {}
        for name, model in models.items():
            optims[name].zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward[name](images), labels)
            loss.backward()
            losses[name] = loss.item()
        diffs = {n: max_rel(p.grad, q.grad) for (n, p), q in
                 zip(ours.named_parameters(), theirs.parameters())}
        name, diff = max(diffs.items(), key=lambda kv: kv[1])
        worst = max(worst, diff)
        print(f"{step:4d}  {losses['normjit']:12.6f}  {losses['torch']:12.6f}  {diff:.2e} "
              f"({name})")
        for opt in optims.values():
            opt.step()
        # The optimizer steps drift the two models apart by rounding: restart each step from
        # normjit's weights so that every step compares gradients of the same parameters.
        theirs.load_state_dict(ours.state_dict())
    if worst > 1e-3:
        print(f"train_step: gradients differ by up to {worst:.2e} (more than 1e-3)",
              file=sys.stderr)
        return 1
    print("train_step: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
