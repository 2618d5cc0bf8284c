"""Seed problem 'RMSNorm over dim 1' (docs/design.md) with normjit: ModelNew has the reference
Model's __init__ and forward signature; x [112, 64, 512, 512], eps 1e-5, no weight."""
import torch

import normjit.torch as njt


class Model(torch.nn.Module):
    """The reference."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


class ModelNew(torch.nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return njt.rms_norm_channels(x, None, self.eps)


batch_size, features, dim1, dim2 = 112, 64, 512, 512


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]


if __name__ == "__main__":  # this seed alone, through run_seeds.py
    import sys

    from run_seeds import main

    sys.exit(main(sys.argv[1:], prog="rmsnorm_channels.py", seed="rmsnorm_channels"))
