"""torch.nn's normalization modules computed by normjit: same constructor arguments,
parameters, buffers and state_dict keys (they subclass torch.nn's), so a checkpoint of either
loads into the other; only forward differs. The forwards read their parameters with _param
(nn.Module.__getattr__ costs about a microsecond) and call the same function as the
functional form, once: its checks are the only ones."""
import torch
from torch import Tensor

from ._ops import _group_norm, _layer_norm, _param, _rms_norm

__all__ = ["RMSNorm", "LayerNorm", "GroupNorm"]


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
