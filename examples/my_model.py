"""Bring your own model: a tiny VAE in one file, made usable by every roseood method with ``wrap``.

``rose fit --model-module examples/my_model.py:build`` (and ``rose train module``, ``evaluate``,
``score``, ``check-model``) call ``build()``; nothing here subclasses a roseood class.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import roseood


class TinyVAE(nn.Module):
    """A small convolutional VAE on 1×32×32 images with Bernoulli pixels."""

    def __init__(self, nz: int = 8) -> None:
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 8, 4, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 4, 2, 1), nn.ReLU(), nn.Flatten()
        )
        self.mu, self.logvar = nn.Linear(16 * 8 * 8, nz), nn.Linear(16 * 8 * 8, nz)
        self.dec = nn.Sequential(
            nn.Linear(nz, 16 * 8 * 8),
            nn.ReLU(),
            nn.Unflatten(1, (16, 8, 8)),
            nn.ConvTranspose2d(16, 8, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(8, 1, 4, 2, 1),
        )

    def nll(self, x: Tensor) -> Tensor:
        """Per-sample negative ELBO in nats, shape (N,): sampled latent in training, z = μ otherwise."""
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp() if self.training else mu
        rec = F.binary_cross_entropy_with_logits(self.dec(z), x, reduction="none").flatten(1).sum(1)
        return rec + 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(1)


def build() -> roseood.WrappedModel:
    """The model roseood loads: the module, its per-sample NLL, the layers ROSE uses, the input shape."""
    net = TinyVAE()
    return roseood.wrap(
        net, net.nll, layers=["enc.0", "enc.2", "mu"], input_shape=(1, 32, 32), name="tiny-vae"
    )
