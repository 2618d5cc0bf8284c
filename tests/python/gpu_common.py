"""What the GPU test modules share: importing this module skips the importing module with a
reason where PyTorch is not installed or no CUDA device is visible (CI has neither), and gives
the device, the dtypes, float64-based random inputs and the relative error against a float64
reference. Import it before anything else that needs torch:

    from gpu_common import DEV, DTYPES, randn, rel_err, torch

and, for the autograd tests, grads_of (an output and its inputs' gradients) and
assert_directional_derivative (a cheap gradcheck).

The modules also take conftest.py's `no_fallback` fixture for every test (pytestmark)."""
import math

import pytest

torch = pytest.importorskip(
    "torch",
    reason="PyTorch is not installed (scripts/test.sh installs it; NORMJIT_TEST_TORCH=0 leaves it "
           "out)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to PyTorch: the GPU tests run on the GPU machine",
                allow_module_level=True)

DEV = "cuda"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def randn(shape, dtype, mean=0.0, std=1.0, gen=None):
    """N(mean, std^2) drawn in float64 on the GPU, then rounded to dtype."""
    return (torch.randn(shape, device=DEV, dtype=torch.float64, generator=gen) * std
            + mean).to(dtype)


def rel_err(y, ref) -> float:
    """||y - ref|| / ||ref|| in float64; NaN where y has a non-finite element."""
    y, ref = y.double(), ref.double()
    if not torch.isfinite(y).all():
        return math.nan
    return ((y - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def leaf(t):
    """A copy of t that requires grad (None stays None)."""
    return t.detach().clone().requires_grad_() if t is not None else None


def grads_of(fn, inputs, dy):
    """fn(*inputs) backward with dy; the output and the inputs' .grad (None where an input is
    None)."""
    inputs = [leaf(t) for t in inputs]
    y = fn(*inputs)
    y.backward(dy)
    return y, [t.grad if t is not None else None for t in inputs]


def assert_directional_derivative(fn, x, w, dy, v, u, h=1e-2):
    """A cheap gradcheck of fn(x, w) backward with dy (normjit takes no float64): <dx, d>
    against the central difference of <fn(x, w), dy> along d (x alone) for d = v and d = dx
    itself, and <dw, d> likewise along w for d = u and d = dw, in float64 from float32
    evaluations, each to 1% of the larger of the derivative and 1. Each gradient is checked on
    its own, so that one's error cannot hide in the other's sum; along the gradient itself the
    derivative is |gradient|^2, far from the floor of 1 where a wrong scale would pass."""
    _, (gx, gw) = grads_of(fn, (x, w), dy)
    for name, grad, given in (("dx", gx, v), ("dweight", gw, u)):
        for along in (given, grad.float()):
            step_x, step_w = (along, 0) if name == "dx" else (0, along)
            with torch.no_grad():
                plus = (fn(x + h * step_x, w + h * step_w).double() * dy).sum()
                minus = (fn(x - h * step_x, w - h * step_w).double() * dy).sum()
            numeric = ((plus - minus) / (2 * h)).item()
            analytic = (grad.double() * along).sum().item()
            assert abs(numeric - analytic) <= 1e-2 * max(abs(analytic), 1.0), \
                (name, numeric, analytic)
