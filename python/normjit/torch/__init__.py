"""normjit for PyTorch.

    import normjit.torch as njt
    y = njt.rms_norm(x, (4096,), weight, eps=1e-6)   # torch.nn.functional's signature
    norm = njt.LayerNorm(768)                        # torch.nn.LayerNorm's constructor
    report = njt.patch(model)                        # model's norm layers, in place

Functions: rms_norm, rms_norm_channels (x [N, C, *spatial] reduced over dim 1), layer_norm,
layer_norm_channels (LayerNorm over dim 1 of [N, C, *spatial], the module LayerNorm2d: timm's and
SAM's), group_norm; the fused residual add of a decoder layer, add_rms_norm and add_layer_norm
(returning (y, h), or in place as vLLM's fused_add_rms_norm); keyword-only variants of rms_norm
and layer_norm (weight_offset for Gemma, out_dtype with fp8 and a scale, return_stats); an
activation keyword (None, 'silu', 'gelu') on every function and module, applied in the same
kernel (GroupNorm -> SiLU of diffusion models; patch() fuses an nn.Sequential's pairs); custom
ops torch.ops.normjit.* with fake implementations, so that torch.compile(fullgraph=True) traces
them. rms_norm, layer_norm, rms_norm_channels, layer_norm_channels and group_norm (and the
modules, patched layers; channels-last inputs too), and add_rms_norm and add_layer_norm (not in
place) train: autograd runs normjit's backward kernels (custom ops <function>_backward), with
weight_offset and the activations too (Gemma; GroupNorm -> SiLU: the backward kernel takes the
gradient through the activation's derivative); out_dtype, return_stats and in place are
forward-only.
A call normjit cannot serve runs PyTorch's own implementation with one NormjitFallbackWarning
per reason. warmup() prepares the kernels of a
function's shapes before a CUDA-graph capture; write_manifest(path) writes the kernels a run
prepared as a manifest, and prewarm(path, arch, cache_dir) compiles them on a build machine
without a GPU, with the NVRTC this environment's PyTorch loads (docs/deployment.md).
"""
import importlib.util as _util

if _util.find_spec("torch") is None:  # a message rather than a bare ModuleNotFoundError
    raise ModuleNotFoundError(
        "normjit.torch needs PyTorch, which is not installed here (pip install torch); the "
        "normjit package itself (normjit.Engine, precompile, the C API) works without it",
        name="torch")

from ._ops import (NormjitFallbackWarning, add_layer_norm, add_rms_norm, group_norm, layer_norm,
                   layer_norm_channels, prepared_kernels, prepared_specs, prewarm, rms_norm,
                   rms_norm_channels, warmup, write_manifest)
from ._patch import PatchReport, patch, unpatch
from .modules import GroupNorm, LayerNorm, LayerNorm2d, RMSNorm

__all__ = [
    "rms_norm", "rms_norm_channels", "layer_norm", "layer_norm_channels", "group_norm",
    "add_rms_norm", "add_layer_norm", "RMSNorm", "LayerNorm", "LayerNorm2d", "GroupNorm", "patch",
    "unpatch", "PatchReport",
    "warmup", "prepared_kernels", "prepared_specs", "write_manifest", "prewarm",
    "NormjitFallbackWarning",
]
