"""Seed problem 'LayerNorm' (docs/design.md) with normjit: ModelNew has the reference Model's
__init__ and forward, and the same state_dict keys (ln.weight, ln.bias); x [16, 64, 256, 256],
normalized (64, 256, 256)."""
import torch

import normjit.torch as njt


class Model(torch.nn.Module):
    """The reference."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = torch.nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


class ModelNew(torch.nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = njt.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size, features, dim1, dim2 = 16, 64, 256, 256


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]


if __name__ == "__main__":  # this seed alone, through run_seeds.py
    import sys

    from run_seeds import main

    sys.exit(main(sys.argv[1:], prog="layernorm.py", seed="layernorm"))
