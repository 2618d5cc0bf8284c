"""The dtype PyTorch's group_norm returns under CPU autocast, eagerly and as dynamo traces it
(tests/python/test_torch_cpu.py's autocast compile test depends on it):
    python3 scripts/experiments/probe_autocast.py"""
import torch
import torch.nn.functional as F


def main() -> None:
    x = torch.randn(2, 16, 3, 5).bfloat16()
    w = torch.randn(16).bfloat16()
    seen = {}

    def f(x):
        y = F.group_norm(x, 4, w, w)
        seen["dtype"] = y.dtype
        return y

    with torch.no_grad(), torch.autocast("cpu"):
        print("PyTorch", torch.__version__)
        print("eager group_norm under CPU autocast:", F.group_norm(x, 4, w, w).dtype)
        torch._dynamo.reset()
        out = torch.compile(f, fullgraph=True, backend="eager")(x)
        print("as dynamo traced it:", seen["dtype"], "; compiled output:", out.dtype)


if __name__ == "__main__":
    main()
