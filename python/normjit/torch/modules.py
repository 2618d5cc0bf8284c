"""torch.nn's normalization modules computed by normjit: same constructor arguments,
parameters, buffers and state_dict keys (they subclass torch.nn's), so a checkpoint of either
loads into the other; only forward differs. The forwards read their parameters with _param
(nn.Module.__getattr__ costs about a microsecond) and call the same function as the
functional form, once: its checks are the only ones.

Each also takes a keyword-only `activation` (None, 'silu', 'gelu'): the module then computes
F.silu or F.gelu (approximate='none') of the norm in the same kernel, e.g.
GroupNorm(32, 320, activation='silu') for diffusion's GroupNorm -> SiLU. It is not a parameter
or buffer: the state_dict is the norm's. With an activation the module trains through normjit
as without one: its backward kernel takes the gradient through the activation's derivative at
the norm's affine output (the forward's bias read for it)."""
import inspect
from typing import Optional

import torch
from torch import Tensor

from ._ops import (_as_activation, _group_norm, _layer_norm, _layer_norm_channels, _param,
                   _rms_norm, _variant)

__all__ = ["RMSNorm", "LayerNorm", "LayerNorm2d", "GroupNorm"]


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True, device=None,
    dtype=None, *, activation=None), computed by normjit."""

    def __init__(self, *args, activation: Optional[str] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.activation = _as_activation("RMSNorm", activation)

    def forward(self, input: Tensor) -> Tensor:
        if self.activation is None:
            return _rms_norm(input, self.normalized_shape, _param(self, "weight"), self.eps)
        return _variant("rms_norm", input, None, self.normalized_shape, _param(self, "weight"),
                        None, self.eps, 0.0, None, None, False, False, None, None,
                        self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + _activation_repr(self)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True, bias=True,
    device=None, dtype=None, *, activation=None), computed by normjit."""

    def __init__(self, *args, activation: Optional[str] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.activation = _as_activation("LayerNorm", activation)

    def forward(self, input: Tensor) -> Tensor:
        if self.activation is None:
            return _layer_norm(input, self.normalized_shape, _param(self, "weight"),
                               _param(self, "bias"), self.eps)
        return _variant("layer_norm", input, None, self.normalized_shape, _param(self, "weight"),
                        _param(self, "bias"), self.eps, 0.0, None, None, False, False, None,
                        None, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + _activation_repr(self)


class GroupNorm(torch.nn.GroupNorm):
    """torch.nn.GroupNorm(num_groups, num_channels, eps=1e-05, affine=True, device=None,
    dtype=None, *, activation=None), computed by normjit."""

    def __init__(self, *args, activation: Optional[str] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.activation = _as_activation("GroupNorm", activation)

    def forward(self, input: Tensor) -> Tensor:
        return _group_norm(input, self.num_groups, _param(self, "weight"), _param(self, "bias"),
                           self.eps, None, None, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + _activation_repr(self)


class LayerNorm2d(torch.nn.LayerNorm):
    """timm's LayerNorm2d(num_channels, eps=1e-6, affine=True, **kwargs) (keyword arguments go to
    torch.nn.LayerNorm: device, dtype, bias), plus the keyword-only activation=None ('silu',
    'gelu'), computed by normjit: LayerNorm over the channels (dim 1) of [N, C, *spatial], weight
    and bias [C]. Its parameters and state_dict keys (weight, bias) are timm's and SAM's
    LayerNorm2d's, so their checkpoints load; the result keeps the input's memory format
    (contiguous or channels last). Trains through normjit's backward kernel, as GroupNorm (with
    an activation too): see normjit.torch.layer_norm_channels."""

    def __init__(self, num_channels: int, eps: float = 1e-6, affine: bool = True, *,
                 activation: Optional[str] = None, **kwargs):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine, **kwargs)
        self.activation = _as_activation("LayerNorm2d", activation)

    def forward(self, input: Tensor) -> Tensor:
        return _layer_norm_channels(input, _param(self, "weight"), _param(self, "bias"),
                                    self.eps, None, None, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + _activation_repr(self)


def _with_activation(ours: type, theirs: type) -> None:
    """ours.__init__'s signature, for help() and inspect: theirs, plus the keyword-only
    activation."""
    signature = inspect.signature(theirs.__init__)
    activation = inspect.Parameter("activation", inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=Optional[str])
    ours.__init__.__signature__ = signature.replace(
        parameters=[*signature.parameters.values(), activation])


for _ours, _theirs in ((RMSNorm, torch.nn.RMSNorm), (LayerNorm, torch.nn.LayerNorm),
                       (GroupNorm, torch.nn.GroupNorm)):
    _with_activation(_ours, _theirs)


def _activation_repr(module: torch.nn.Module) -> str:
    activation = getattr(module, "activation", None)
    return f", activation={activation!r}" if activation is not None else ""
