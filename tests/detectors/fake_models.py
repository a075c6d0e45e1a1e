"""Tiny models shared by the baseline detector tests (not a test module)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from roseood.models.base import GenerativeModel
from roseood.models.vae import VAE


class ScaledSumModel(GenerativeModel):
    """An exact, deterministic stand-in likelihood: NLL(x) = scale · Σ pixels + offset (nats)."""

    kind = "scaled-sum"

    def __init__(self, scale: float = 1.0, offset: float = 0.0, in_channels: int = 1, image_size: int = 32):
        super().__init__(in_channels, image_size)
        self.scale = nn.Parameter(torch.tensor([float(scale)]))
        self.offset = nn.Parameter(torch.tensor([float(offset)]))

    def config(self) -> dict[str, Any]:
        return {"in_channels": self.in_channels, "image_size": self.image_size}

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        return self.scale * x.flatten(1).sum(1) + self.offset

    def nll(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self.rose_loss(x)

    def train_loss(self, x: Tensor) -> Tensor:
        return self.rose_loss(x)

    def layer_sets(self) -> dict[str, list[str]]:
        return {"all": []}


def tiny_vae(seed: int = 0, channels: int = 1) -> VAE:
    """A VAE with ngf=4, nz=4 and non-trivial BatchNorm running statistics, in eval mode."""
    torch.manual_seed(seed)
    model = VAE(in_channels=channels, ngf=4, nz=4)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()
