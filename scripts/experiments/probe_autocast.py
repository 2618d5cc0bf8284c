"""What dynamo sees of CPU autocast, eagerly and traced (tests/python/test_torch_cpu.py's
autocast compile test, skipped before PyTorch 2.15: on 2.11 its compiled layer_norm traced
normjit's op where 2.15 traces PyTorch's): the dtype of PyTorch's group_norm, the autocast
queries normjit.torch._ops makes (_is_any_autocast_enabled, is_autocast_enabled("cpu")), and
normjit's own decision for a bfloat16 layer_norm.
    python3 scripts/experiments/probe_autocast.py     (normjit on PYTHONPATH for the last)"""
import torch
import torch.nn.functional as F


def main() -> None:
    x = torch.randn(2, 16, 3, 5).bfloat16()
    w = torch.randn(16).bfloat16()
    seen = {}

    def f(x):
        y = F.group_norm(x, 4, w, w)
        seen["dtype"] = y.dtype
        seen["any"] = torch._C._is_any_autocast_enabled()
        seen["cpu"] = torch.is_autocast_enabled("cpu")
        return y

    with torch.no_grad(), torch.autocast("cpu"):
        print("PyTorch", torch.__version__)
        print("eager group_norm under CPU autocast:", F.group_norm(x, 4, w, w).dtype)
        print("eager queries: any", torch._C._is_any_autocast_enabled(), "cpu",
              torch.is_autocast_enabled("cpu"))
        torch._dynamo.reset()
        out = torch.compile(f, fullgraph=True, backend="eager")(x)
        print("as dynamo traced it:", seen["dtype"], "; compiled output:", out.dtype,
              "; queries: any", seen["any"], "cpu", seen["cpu"])
        try:
            from normjit.torch import _ops
        except ImportError as e:
            print("normjit.torch not importable:", e)
            return
        _ops._AUTOCAST_F32["cpu"] = _ops._AUTOCAST_F32["cuda"]
        print("layer_norm in the float32 list:", "layer_norm" in _ops._AUTOCAST_F32["cpu"])
        print("eager _autocast_f32('layer_norm', bf16 x):", _ops._autocast_f32("layer_norm", x))
        torch._dynamo.reset()
        traced = torch.compile(lambda t: (t + 0, _ops._autocast_f32("layer_norm", t)),
                               fullgraph=True, backend="eager")(x)[1]
        print("traced _autocast_f32('layer_norm', bf16 x):", traced)


if __name__ == "__main__":
    main()
