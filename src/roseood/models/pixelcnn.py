"""PixelCNN (van den Oord et al. 2016): an autoregressive model with exact per-sample likelihoods.

``p(x) = Π_i p(x_i | x_<i)`` over pixels in raster order and, within a pixel, over colour channels in
order (R, G, B). A convolution that could see the current pixel is a ``MaskedConv2d``: a plain
``nn.Conv2d`` whose forward uses ``weight * mask``, so the curvature code hooks it like any conv and can
read the ``mask`` buffer to restrict gradients and Fishers to the free weight entries. The first such
conv uses mask 'A' (a pixel does not see itself), later ones mask 'B' (a feature sees its own position).
The gated variant's vertical stack needs no mask: its kernels end at the row above. Each pixel and
channel gets a 256-way softmax, as in the paper's VAE decoder, so the NLL is in nats of the quantised
image.
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
    """Conv whose kernel sees only earlier pixels (raster order) and, at the current pixel, earlier colours.

    At the current pixel's tap, output group ``g`` sees input groups ``< g`` (mask 'A') or ``≤ g``
    (mask 'B'). Square kernels are centred (padded by the conv); ``horizontal`` kernels are one row of
    ``kernel_size // 2 + 1`` taps ending at the current pixel, left-padded by the caller. ``gate``: the
    output is two halves multiplied channel by channel (a gated unit), so each half is grouped alone.
    """

    mask: Tensor

    def __init__(
        self,
        mask_type: str,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        colours: int = 1,
        *,
        horizontal: bool = False,
        gate: bool = False,
    ) -> None:
        if mask_type not in ("A", "B") or kernel_size % 2 == 0:
            raise RoseError(f"masked conv needs mask 'A' or 'B', odd kernel: {mask_type!r}, {kernel_size}")
        c = kernel_size // 2
        shape = (1, c + 1) if horizontal else (kernel_size, kernel_size)
        super().__init__(in_channels, out_channels, shape, padding=0 if horizontal else c)
        self.mask_type = mask_type
        row, col = (0, c) if horizontal else (c, c)
        mask = torch.ones(out_channels, in_channels, *shape)
        mask[:, :, row, col + 1 :] = 0
        mask[:, :, row + 1 :] = 0
        g_out = _groups(out_channels // 2, colours).repeat(2) if gate else _groups(out_channels, colours)
        g_in = _groups(in_channels, colours)
        centre = g_in[None, :] < g_out[:, None] if mask_type == "A" else g_in[None, :] <= g_out[:, None]
        mask[:, :, row, col] = centre.float()
        self.register_buffer("mask", mask)

    def weight_mask(self) -> Tensor:
        """The causal mask (``roseood.contracts.MaskedWeight``): what ROSE's Fishers keep to."""
        return self.mask

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


def _gate(t: Tensor) -> Tensor:
    a, b = t.chunk(2, dim=1)
    return torch.tanh(a) * torch.sigmoid(b)


class GatedLayer(nn.Module):
    """One layer of the gated two-stack PixelCNN (van den Oord et al. 2016b), which has no blind spot.

    The vertical stack sees whole rows above the current one (its first conv only rows above, later
    ones also their own row of such features); the horizontal stack sees the pixels to the left on the
    current row and the vertical stack's features. Both end in a ``tanh ⊙ sigmoid`` gate; after the
    first layer the horizontal stack is residual.
    """

    def __init__(self, in_channels: int, width: int, kernel_size: int, colours: int, first: bool) -> None:
        super().__init__()
        self.first = first
        self.pad = kernel_size // 2
        rows = self.pad if first else self.pad + 1
        self.vertical = nn.Conv2d(in_channels, 2 * width, (rows, kernel_size))
        self.v_to_h = nn.Conv2d(2 * width, 2 * width, 1)
        self.horizontal = MaskedConv2d(
            "A" if first else "B", in_channels, 2 * width, kernel_size, colours, horizontal=True, gate=True
        )
        self.out = MaskedConv2d("B", width, width, 1, colours)

    def forward(self, v: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        p = self.pad
        v_pre = self.vertical(F.pad(v, (p, p, p, 0)))[:, :, : v.shape[2]]
        h_pre = self.horizontal(F.pad(h, (p, 0, 0, 0))) + self.v_to_h(v_pre)
        h_out = self.out(_gate(h_pre))
        return _gate(v_pre), h_out if self.first else h + h_out


class PixelCNN(GenerativeModel):
    """PixelCNN with two mask-'B' 1×1 output convs giving 256 logits per pixel and channel; small
    enough to train on CPU. Residual (default): a 7×7 mask-'A' conv and ``blocks`` residual blocks
    of ``width`` channels. ``gated``: a 7-wide first gated layer and ``blocks`` 3-wide gated layers."""

    kind = "pixelcnn"

    def __init__(
        self,
        in_channels: int = 1,
        width: int = 32,
        blocks: int = 5,
        image_size: int = 32,
        gated: bool = False,
    ) -> None:
        if width < in_channels or blocks < 1:
            raise RoseError(f"PixelCNN needs width ≥ channels and blocks ≥ 1, got {width}, {blocks}")
        super().__init__(in_channels, image_size)
        self.width = width
        self.blocks = blocks
        self.gated = gated
        c = in_channels
        self.input: nn.Module
        self.body: nn.ModuleList
        if gated:
            self.input = GatedLayer(c, width, 7, c, first=True)
            self.body = nn.ModuleList(GatedLayer(width, width, 3, c, first=False) for _ in range(blocks))
        else:
            self.input = MaskedConv2d("A", c, width, 7, c)
            self.body = nn.ModuleList(ResidualBlock(width, c) for _ in range(blocks))
        self.head = MaskedConv2d("B", width, width, 1, c)
        self.output = MaskedConv2d("B", width, 256 * c, 1, c)

    def config(self) -> dict[str, Any]:
        return {
            "in_channels": self.in_channels,
            "width": self.width,
            "blocks": self.blocks,
            "image_size": self.image_size,
            "gated": self.gated,
        }

    def logits(self, x: Tensor) -> Tensor:
        """256-way logits of every pixel and channel given the preceding ones, (N, C, 256, H, W)."""
        x = 2.0 * x - 1.0
        if self.gated:
            v, h = self.input(x, x)
            for layer in self.body:
                v, h = layer(v, h)
        else:
            h = self.input(x)
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
        """``all`` (the residual model's default): every conv in network order — the likelihood's
        gradient spreads over the whole stack, and the paper found more layers helped its VAE;
        ``first``: the input layer's convs; ``last``: the two output convs (the softmax's own features);
        ``body``: the later layers. Gated only, ``vertical`` (its default): the vertical stack's convs,
        the context from the rows above rather than the left neighbours' local texture, which the
        paper's Appendix D finds dominates the likelihood (docs/results.md has the comparison)."""

        def convs(name: str) -> list[str]:
            module = self.get_submodule(name)
            return [f"{name}.{n}".rstrip(".") for n, m in module.named_modules() if isinstance(m, nn.Conv2d)]

        first, body, last = convs("input"), convs("body"), ["head", "output"]
        sets = {"all": [*first, *body, *last], "first": first, "last": last, "body": body}
        if self.gated:
            return {"vertical": [n for n in sets["all"] if n.endswith(".vertical")]} | sets
        return sets
