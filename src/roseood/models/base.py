"""The contract every generative model in roseood fulfils: per-sample log-likelihoods of 32×32 images."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor, nn


class GenerativeModel(nn.Module, ABC):
    """A likelihood model on images ``x`` of shape (N, C, H, W) with values in [0, 1].

    Subclasses define the loss whose per-sample gradient ROSE preconditions (``rose_loss``), the
    NLL used as a score and for evaluation (``nll``), the training loss, and named layer sets.
    """

    kind: ClassVar[str]

    def __init__(self, in_channels: int, image_size: int = 32) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.image_size = image_size

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this architecture."""

    @abstractmethod
    def nll(self, x: Tensor) -> Tensor:
        """Per-sample negative log-likelihood in nats, shape (N,)."""

    @abstractmethod
    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """Per-sample differentiable −log p(x|θ) (or its bound) used for ROSE gradients, shape (N,).

        Deterministic unless ``stochastic`` (sampled latent / dequantisation noise); must couple no two
        samples in eval mode, so that one backward pass of the summed loss yields every sample's gradient.
        """

    @abstractmethod
    def train_loss(self, x: Tensor) -> Tensor:
        """Per-sample stochastic training objective (nats), shape (N,)."""

    @abstractmethod
    def layer_sets(self) -> dict[str, list[str]]:
        """Named sets of submodule names ROSE can use; the first key is the default."""

    def rose_layers(self, which: str | None = None) -> list[str]:
        """Module names of a named layer set (the default set when ``which`` is None)."""
        sets = self.layer_sets()
        key = which or next(iter(sets))
        if key not in sets:
            from roseood.errors import RoseError

            raise RoseError(f"unknown layer set {key!r} for {self.kind}; choose from {sorted(sets)}")
        return sets[key]

    @property
    def dims(self) -> int:
        """Number of dimensions of one image (C·H·W)."""
        return self.in_channels * self.image_size * self.image_size

    def bits_per_dim(self, nll: Tensor) -> Tensor:
        """Convert per-sample NLL in nats to bits per dimension."""
        return nll / (self.dims * math.log(2.0))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device
