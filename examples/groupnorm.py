"""Seed problem 'GroupNorm' (docs/design.md) with normjit: ModelNew has the reference Model's
__init__ and forward, and the same state_dict keys (gn.weight, gn.bias); x [112, 64, 512, 512],
8 groups."""
import torch

import normjit.torch as njt


class Model(torch.nn.Module):
    """The reference."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = torch.nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


class ModelNew(torch.nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = njt.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size, features, num_groups, dim1, dim2 = 112, 64, 8, 512, 512


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features, num_groups]


if __name__ == "__main__":  # this seed alone, through run_seeds.py
    import sys

    from run_seeds import main

    sys.exit(main(sys.argv[1:], prog="groupnorm.py", seed="groupnorm"))
