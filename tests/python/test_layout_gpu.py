"""Channels-last tensors through normjit.torch on a GPU: group_norm, rms_norm_channels and the
GroupNorm module read a channels_last / channels_last_3d input where it lies (normjit's
layout=nhwc kernels: no copy, no fallback warning) and return a result in the input's memory
format, against a float64 reference across shapes and dtypes; a contiguous input is unchanged;
other strides fall back with the warning; torch.compile(fullgraph=True) and a CUDA-graph
capture. Skips with a reason without PyTorch or without a CUDA device."""
import math

import pytest

from gpu_common import DEV, DTYPES, randn, rel_err, torch  # skips without PyTorch or a GPU
import torch.nn.functional as F

import normjit.torch as njt
from normjit.torch import _ops

pytestmark = pytest.mark.usefixtures("no_fallback")

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def channels_last(x):
    """x with its channels innermost, any rank >= 3 (channels_last, channels_last_3d, ...)."""
    return x.movedim(1, -1).contiguous().movedim(-1, 1)


def rms_reference(x, w, eps):
    xd = x.double()
    y = xd * torch.rsqrt(xd.square().mean(1, keepdim=True) + eps)
    return y * w.double().view(1, -1, *([1] * (x.dim() - 2))) if w is not None else y


GROUP_SHAPES = [  # (shape, groups)
    ((2, 32, 7, 9), 8), ((3, 32, 1, 1), 4), ((2, 32, 5, 6, 7), 8), ((2, 3, 7, 9), 3),
    ((2, 65, 7, 9), 5), ((2, 96, 7, 9), 3), ((4, 40, 33), 4),
    ((2, 320, 64, 64), 32), ((2, 1280, 8, 8), 32), ((1, 512, 64, 64), 32),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", GROUP_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm_of_channels_last_matches_float64(shape, groups, dtype, affine):
    x = channels_last(randn(shape, dtype, 0.5, 2.0))
    # (1x1 maps: channels last is contiguous too, and served as such.)
    assert _ops._channels_last(x) and (x.is_contiguous() == (math.prod(shape[2:]) == 1))
    w = randn(shape[1], dtype, 1.0, 0.5) if affine else None
    b = randn(shape[1], dtype, 0.0, 0.5) if affine else None
    y = njt.group_norm(x, groups, w, b, 1e-5)
    assert math.prod(shape[2:]) == 1 or y.stride() == x.stride(), "the input's memory format"
    ref = F.group_norm(x.double(), groups, None if w is None else w.double(),
                       None if b is None else b.double(), 1e-5)
    assert rel_err(y, ref) < TOL[dtype]
    # The same values contiguous: the plain kernel, a contiguous result, the same values.
    yc = njt.group_norm(x.contiguous(), groups, w, b, 1e-5)
    assert yc.is_contiguous()
    assert rel_err(yc, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 64, 7, 9), (8, 96, 56, 56), (8, 768, 7, 7), (2, 3, 5, 5),
                                   (1, 65, 3, 4, 5), (4, 48, 33)], ids=str)
def test_rms_norm_channels_of_channels_last_matches_float64(shape, dtype):
    x = channels_last(randn(shape, dtype))
    w = randn(shape[1], dtype, 1.0, 0.5)
    y = njt.rms_norm_channels(x, w, 1e-6)
    assert y.stride() == x.stride()
    assert rel_err(y, rms_reference(x, w, 1e-6)) < TOL[dtype]


@pytest.mark.parametrize("mean, std", [(1e4, 1.0), (0.0, 1e-6), (-3.0, 0.0)],
                         ids=["large-mean", "tiny", "constant"])
def test_adversarial_values(mean, std):
    for shape, groups in [((2, 320, 16, 16), 32), ((2, 65, 7, 9), 13)]:
        x = channels_last(randn(shape, torch.float32, mean, std))
        w, b = randn(shape[1], torch.float32, 1.0, 0.5), randn(shape[1], torch.float32)
        y = njt.group_norm(x, groups, w, b, 1e-5)
        ref = F.group_norm(x.double(), groups, w.double(), b.double(), 1e-5)
        # f32 loses about 2^-24 |mean| / std with large means.
        assert rel_err(y, ref) < (1e-4 if mean == 1e4 else 1e-5), (shape, mean, std)


def test_the_module_and_patch_keep_channels_last():
    m = torch.nn.GroupNorm(32, 320).to(DEV, torch.float16)
    with torch.no_grad():
        m.weight.normal_(1.0, 0.5)
        m.bias.normal_()
    x = randn((2, 320, 32, 32), torch.float16).to(memory_format=torch.channels_last)
    ref = m.double()(x.double())
    m = m.half()
    seq = torch.nn.Sequential(m)
    njt.patch(seq)
    with torch.no_grad():
        y = seq(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(y, ref) < TOL[torch.float16]


def test_other_strides_fall_back_with_the_warning():
    x = randn((2, 32, 9, 7), torch.float32).transpose(2, 3)  # neither layout
    with pytest.warns(njt.NormjitFallbackWarning, match="group_norm: non-contiguous input"):
        y = njt.group_norm(x, 8)
    torch.testing.assert_close(y, F.group_norm(x, 8))


def test_compile_fullgraph_keeps_channels_last():
    x = randn((2, 320, 16, 16), torch.bfloat16).to(memory_format=torch.channels_last)
    w, b = randn(320, torch.bfloat16, 1.0, 0.5), randn(320, torch.bfloat16)
    f = torch.compile(lambda t: njt.group_norm(t, 32, w, b, 1e-5), fullgraph=True)
    y = f(x)
    assert y.stride() == x.stride()
    ref = F.group_norm(x.double(), 32, w.double(), b.double(), 1e-5)
    assert rel_err(y, ref) < TOL[torch.bfloat16]


def test_cuda_graph_capture_on_a_fresh_stream_replays_with_new_inputs():
    x = randn((2, 320, 64, 64), torch.float16).to(memory_format=torch.channels_last)
    w, b = randn(320, torch.float16, 1.0, 0.5), randn(320, torch.float16)
    njt.group_norm(x, 32, w, b, 1e-5)  # prepares the kernel (and its workspace) first
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        y = njt.group_norm(x, 32, w, b, 1e-5)
    for mean in (0.0, -3.0, 7.0):
        x.copy_(randn(x.shape, torch.float16, mean, 2.0))
        graph.replay()
        torch.cuda.synchronize()
        ref = F.group_norm(x.double(), 32, w.double(), b.double(), 1e-5)
        assert rel_err(y, ref) < TOL[torch.float16], mean
    assert y.stride() == x.stride()
