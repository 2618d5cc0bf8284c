import torch, torch.nn.functional as F
x = torch.randn(2, 16, 3, 5).bfloat16(); w = torch.randn(16).bfloat16()
with torch.no_grad(), torch.autocast("cpu"):
    print("eager group_norm under cpu autocast:", F.group_norm(x, 4, w, w).dtype)
    seen = {}
    def f(x):
        y = F.group_norm(x, 4, w, w)
        seen["dtype"] = y.dtype
        return y
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="eager")(x)
    print("traced dtype:", seen["dtype"], "compiled out:", out.dtype, torch.__version__)
