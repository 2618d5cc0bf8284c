"""normjit's library emulated for CPU tensors (the Python tests' stand-in for libnormjit where
there is no GPU): Emulator's prepare records spec texts (and, given a real engine as `library`,
asks it whether it takes the spec, for sm_90); its launch functions record their arguments and
compute, in float64, into the host memory the pointers name what the kernels would write
(forward rows with a residual, strided rows, statistics, an activation; the backward, with an
activation through its derivative). Routed in with
conftest.launch_path_into. Needs PyTorch."""
import ctypes
import math

import torch

_DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _silu_slope(z):
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


def _gelu_slope(z):
    return 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(
        2 * math.pi)


_ACTIVATE = {"none": lambda v: v, "silu": torch.nn.functional.silu,
             "gelu": torch.nn.functional.gelu}
_SLOPE = {"silu": _silu_slope, "gelu": _gelu_slope}


def memory(pointer, n, dtype):
    """n elements of dtype at a host address, as a tensor sharing that memory."""
    size = torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * (n * size)).from_address(pointer), dtype=dtype)


class Emulator:
    """normjit's engine and launch functions for CPU tensors: prepare records spec texts (and,
    with `library`, asks a real engine whether it takes the spec, for sm_90); launches record
    their arguments and compute into the memory the pointers name."""

    def __init__(self):
        self.specs, self.launches, self.by_handle = [], [], {}
        self.library = None  # a normjit.Engine: prepare refuses what it refuses

    def prepare(self, spec):
        if self.library is not None:
            self.library.precompile(spec, arch="sm_90")
        self.specs.append(spec)
        handle = 0x7F0000001000 + 0x100 * len(self.specs)
        fields = dict(f.split("=", 1) for f in spec.split())
        shape = [int(s) for s in fields["shape"].split(",")]
        k = int(fields["normalized_dims"])
        dtype = _DT[fields["dtype"]]
        self.by_handle[handle] = {
            "op": fields["op"], "row": math.prod(shape[len(shape) - k:]), "dtype": dtype,
            "param": _DT[fields.get("param_dtype", fields["dtype"])], "affine": fields["affine"],
            "stats": fields.get("save_stats") == "true",
            "offset": float(fields.get("weight_offset", 0)),
            "residual": _DT.get(fields.get("residual")),
            "activation": fields.get("activation", "none"),
            "backward": fields.get("backward") == "true"}
        return handle

    def _forward(self, kernel, x, y, weight, bias, batch, eps, mean=None, rstd=None,
                 residual=None, residual_out=None, rows=None):
        s = self.by_handle[kernel]
        assert not s["backward"]
        n = s["row"]
        if rows is None:
            xd = memory(x, batch * n, s["dtype"]).double().view(batch, n)
        else:  # x's rows strided (row r at (r // inner_rows) * outer + (r % inner_rows) * inner)
            inner_rows, outer, inner, *others = rows
            assert residual is None and not any(others), rows  # y's rows contiguous
            r = torch.arange(batch)
            start = (r // inner_rows) * outer + (r % inner_rows) * inner
            xs = memory(x, int(start[-1]) + n, s["dtype"]).double()
            xd = xs[start[:, None] + torch.arange(n)]
        assert (residual is not None) == (residual_out is not None) == (s["residual"] is not None)
        if residual is not None:  # h = x + residual, rounded to the residual's dtype, normalized
            h = xd + memory(residual, batch * n, s["residual"]).double().view(batch, n)
            out = memory(residual_out, batch * n, s["residual"])
            out.copy_(h.flatten())
            xd = out.double().view(batch, n)
        if s["op"] == "rmsnorm":
            r = torch.rsqrt(xd.square().mean(1, keepdim=True) + eps)
            yd, m = xd * r, None
        else:
            m = xd.mean(1, keepdim=True)
            r = torch.rsqrt((xd - m).square().mean(1, keepdim=True) + eps)
            yd = (xd - m) * r
        if weight is not None:
            yd = yd * (s["offset"] + memory(weight, n, s["param"]).double())
        if bias is not None:
            yd = yd + memory(bias, n, s["param"]).double()
        yd = _ACTIVATE[s["activation"]](yd)
        memory(y, batch * n, s["dtype"]).copy_(yd.flatten())
        if rstd is not None:
            memory(rstd, batch, torch.float32).copy_(r.flatten())
        if mean is not None:
            memory(mean, batch, torch.float32).copy_(m.flatten())
        return 0

    def launch(self, kernel, x, y, weight, bias, batch, eps, stream):
        self.launches.append(("launch", (kernel, x, y, weight, bias, batch, eps, stream)))
        return self._forward(kernel, x, y, weight, bias, batch, eps)

    def launch_ex(self, kernel, x, y, weight, bias, batch, eps, residual, residual_out, scale,
                  mean, rstd, stream, rows):
        self.launches.append(("launch_ex", dict(kernel=kernel, x=x, y=y, mean=mean, rstd=rstd,
                                                batch=batch)))
        assert scale is None
        assert self.by_handle[kernel]["stats"] == (rstd is not None)
        return self._forward(kernel, x, y, weight, bias, batch, eps, mean, rstd, residual,
                             residual_out, rows)

    def launch_backward(self, kernel, x, dy, mean, rstd, weight, dx, dweight, dbias, batch,
                        stream, dresidual_out=None, bias=None):
        self.launches.append(("launch_backward", dict(
            kernel=kernel, x=x, dy=dy, mean=mean, rstd=rstd, weight=weight, dx=dx,
            dweight=dweight, dbias=dbias, batch=batch, dresidual_out=dresidual_out, bias=bias)))
        s = self.by_handle[kernel]
        assert s["backward"]
        assert (dresidual_out is not None) == (s["residual"] is not None)
        n = s["row"]
        xd = memory(x, batch * n, s["dtype"]).double().view(batch, n)
        dyd = memory(dy, batch * n, s["dtype"]).double().view(batch, n)
        r = memory(rstd, batch, torch.float32).double().view(batch, 1)
        if s["op"] == "rmsnorm":
            assert mean is None
            xhat = xd * r
        else:
            xhat = (xd - memory(mean, batch, torch.float32).double().view(batch, 1)) * r
        w = s["offset"] + memory(weight, n, s["param"]).double() if weight is not None else 1.0
        # The library's check: the bias exactly with an activation and affine both.
        assert (bias is not None) == (s["activation"] != "none" and s["affine"] == "both")
        if s["activation"] != "none":  # dy through the activation's derivative at z
            z = xhat * w + (memory(bias, n, s["param"]).double() if bias is not None else 0.0)
            dyd = dyd * _SLOPE[s["activation"]](z)
        g = dyd * w
        dxd = g - xhat * (g * xhat).mean(1, keepdim=True)
        if s["op"] == "layernorm":
            dxd = dxd - g.mean(1, keepdim=True)
        dxd = r * dxd
        if dresidual_out is not None:  # the fused add's backward: h's own gradient added
            assert s["residual"] == s["dtype"]
            dxd = dxd + memory(dresidual_out, batch * n, s["dtype"]).double().view(batch, n)
        memory(dx, batch * n, s["dtype"]).copy_(dxd.flatten())
        assert (dweight is not None) == (s["affine"] != "none")
        assert (dbias is not None) == (s["affine"] == "both")
        if dweight is not None:
            memory(dweight, n, s["param"]).copy_((dyd * xhat).sum(0))
        if dbias is not None:
            memory(dbias, n, s["param"]).copy_(dyd.sum(0))
        return 0

    def kinds(self):
        return [kind for kind, _ in self.launches]

    def last(self, kind):
        return next(args for k, args in reversed(self.launches) if k == kind)
