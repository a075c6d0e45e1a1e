"""PixelCNN (van den Oord et al. 2016): an autoregressive model with exact per-sample likelihoods.

``p(x) = Π_i p(x_i | x_<i)`` over pixels in raster order and, within a pixel, over colour channels in
order (R, G, B). Every convolution is a ``MaskedConv2d``: a plain ``nn.Conv2d`` whose forward uses
``weight * mask``, so the curvature code hooks it like any conv and can read the ``mask`` buffer to
restrict gradients and Fishers to the free weight entries. The first conv uses mask 'A' (a pixel does
not see itself), later ones mask 'B' (a feature sees its own position). Each pixel and channel gets a
256-way softmax, as in the paper's VAE decoder, so the NLL is in nats of the quantised image.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from roseood.errors import RoseError
from roseood.models.base import GenerativeModel
from roseood.models.vae import _targets


def _groups(channels: int, colours: int) -> Tensor:
    """Colour group of each of ``channels`` feature maps: contiguous blocks, R block first."""
    return torch.arange(channels) * colours // channels


class MaskedConv2d(nn.Conv2d):
    """Conv whose kernel sees only earlier pixels (raster order) and, at the centre, earlier colours.

    At the centre tap, output group ``g`` sees input groups ``< g`` (mask 'A') or ``≤ g`` (mask 'B').
    """

    mask: Tensor

    def __init__(
        self, mask_type: str, in_channels: int, out_channels: int, kernel_size: int, colours: int = 1
    ) -> None:
        if mask_type not in ("A", "B") or kernel_size % 2 == 0:
            raise RoseError(f"masked conv needs mask 'A' or 'B', odd kernel: {mask_type!r}, {kernel_size}")
        super().__init__(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.mask_type = mask_type
        k, c = kernel_size, kernel_size // 2
        mask = torch.ones(out_channels, in_channels, k, k)
        mask[:, :, c, c + 1 :] = 0
        mask[:, :, c + 1 :] = 0
        g_out, g_in = _groups(out_channels, colours), _groups(in_channels, colours)
        centre = g_in[None, :] < g_out[:, None] if mask_type == "A" else g_in[None, :] <= g_out[:, None]
        mask[:, :, c, c] = centre.float()
        self.register_buffer("mask", mask)

    def forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, self.weight * self.mask, self.bias)


class ResidualBlock(nn.Module):
    """ReLU → masked 3×3 conv → ReLU → masked 1×1 conv, added to the input (keeps causality)."""

    def __init__(self, width: int, colours: int) -> None:
        super().__init__()
        self.conv = MaskedConv2d("B", width, width, 3, colours)
        self.mix = MaskedConv2d("B", width, width, 1, colours)

    def forward(self, h: Tensor) -> Tensor:
        return h + self.mix(F.relu(self.conv(F.relu(h))))


class PixelCNN(GenerativeModel):
    """Residual PixelCNN: a 7×7 mask-'A' conv, ``blocks`` residual blocks of ``width`` channels, two
    mask-'B' 1×1 output convs giving 256 logits per pixel and channel. Small enough to train on CPU."""

    kind = "pixelcnn"

    def __init__(self, in_channels: int = 1, width: int = 32, blocks: int = 5, image_size: int = 32) -> None:
        if width < in_channels or blocks < 0:
            raise RoseError(f"PixelCNN needs width ≥ channels and blocks ≥ 0, got {width}, {blocks}")
        super().__init__(in_channels, image_size)
        self.width = width
        self.blocks = blocks
        self.input = MaskedConv2d("A", in_channels, width, 7, in_channels)
        self.body = nn.ModuleList(ResidualBlock(width, in_channels) for _ in range(blocks))
        self.head = MaskedConv2d("B", width, width, 1, in_channels)
        self.output = MaskedConv2d("B", width, 256 * in_channels, 1, in_channels)

    def config(self) -> dict[str, Any]:
        return {
            "in_channels": self.in_channels,
            "width": self.width,
            "blocks": self.blocks,
            "image_size": self.image_size,
        }

    def logits(self, x: Tensor) -> Tensor:
        """256-way logits of every pixel and channel given the preceding ones, (N, C, 256, H, W)."""
        h = self.input(2.0 * x - 1.0)
        for block in self.body:
            h = block(h)
        out = self.output(F.relu(self.head(F.relu(h))))
        n, _, height, width = out.shape
        return out.view(n, self.in_channels, 256, height, width)

    def _nll(self, x: Tensor) -> Tensor:
        ce = F.cross_entropy(self.logits(x).transpose(1, 2), _targets(x), reduction="none")
        return ce.flatten(1).sum(1)

    def nll(self, x: Tensor) -> Tensor:
        """Exact per-sample NLL (nats) of the quantised image, computed without grad."""
        with torch.no_grad():
            return self._nll(x)

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """The exact NLL with gradients; there is nothing to sample, so ``stochastic`` changes nothing."""
        return self._nll(x)

    def train_loss(self, x: Tensor) -> Tensor:
        return self._nll(x)

    def layer_sets(self) -> dict[str, list[str]]:
        """``all`` (default): every masked conv in network order — the likelihood's gradient spreads over
        the whole stack, and the paper found more layers helped its VAE; ``first``: the mask-'A' input
        conv; ``last``: the two output convs (the softmax's own features); ``body``: the residual blocks."""
        body = [f"body.{i}.{sub}" for i in range(self.blocks) for sub in ("conv", "mix")]
        last = ["head", "output"]
        return {"all": ["input", *body, *last], "first": ["input"], "last": last, "body": body}
