"""torch.nn's normalization modules computed by normjit: same constructor arguments,
parameters, buffers and state_dict keys (they subclass torch.nn's), so a checkpoint of either
loads into the other; only forward differs. The forwards read their parameters with _param
(nn.Module.__getattr__ costs about a microsecond) and call the same function as the
functional form, once: its checks are the only ones."""
import torch
from torch import Tensor

from ._ops import _group_norm, _layer_norm, _layer_norm_channels, _param, _rms_norm

__all__ = ["RMSNorm", "LayerNorm", "LayerNorm2d", "GroupNorm"]


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True, device=None,
    dtype=None), computed by normjit."""

    def forward(self, input: Tensor) -> Tensor:
        return _rms_norm(input, self.normalized_shape, _param(self, "weight"), self.eps)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True, bias=True,
    device=None, dtype=None), computed by normjit."""

    def forward(self, input: Tensor) -> Tensor:
        return _layer_norm(input, self.normalized_shape, _param(self, "weight"),
                           _param(self, "bias"), self.eps)


class GroupNorm(torch.nn.GroupNorm):
    """torch.nn.GroupNorm(num_groups, num_channels, eps=1e-05, affine=True, device=None,
    dtype=None), computed by normjit."""

    def forward(self, input: Tensor) -> Tensor:
        return _group_norm(input, self.num_groups, _param(self, "weight"), _param(self, "bias"),
                           self.eps)


class LayerNorm2d(torch.nn.LayerNorm):
    """timm's LayerNorm2d(num_channels, eps=1e-6, affine=True, **kwargs) (keyword arguments go to
    torch.nn.LayerNorm: device, dtype, bias), computed by normjit: LayerNorm over the channels
    (dim 1) of [N, C, *spatial], weight and bias [C]. Its parameters and state_dict keys
    (weight, bias) are timm's and SAM's LayerNorm2d's, so their checkpoints load; the result is
    contiguous [N, C, *spatial]. Trains through PyTorch's autograd (normjit's backward of the
    channel form is not there yet): see normjit.torch.layer_norm_channels."""

    def __init__(self, num_channels: int, eps: float = 1e-6, affine: bool = True, **kwargs):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine, **kwargs)

    def forward(self, input: Tensor) -> Tensor:
        return _layer_norm_channels(input, _param(self, "weight"), _param(self, "bias"),
                                    self.eps)
