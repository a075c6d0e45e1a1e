"""Glow (Kingma & Dhariwal, 2018): a multi-scale normalizing flow with exact per-sample likelihoods.

Follows y0ast/Glow-PyTorch, the code the ROSE authors trained with (paper, Appendix B.2): per level a
squeeze, K flow steps of ActNorm → invertible 1×1 conv → affine coupling, then a split whose factored-out
half is scored by a Gaussian conditioned on the kept half; a learned Gaussian prior on the top latent.
Images are quantised to ``n_bits`` and mapped to y = x_int / 2**n_bits − 0.5 as the authors do.

Every ordinary convolution is an ``nn.Conv2d`` called as a module and every 1×1 conv an ``InvConv2d``
whose forward is exactly a convolution, so the curvature code can hook their inputs and outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from roseood.curvature import INVERTIBLE_1X1, register_layer
from roseood.errors import DataError, RoseError
from roseood.models.base import GenerativeModel
from roseood.randomness import rand

_LOG_2PI = math.log(2.0 * math.pi)
_LOGSCALE_FACTOR = 3.0  # Glow's zero-initialised convs scale their output by exp(3·logs)


def _gaussian_log_prob(z: Tensor, mean: Tensor, logs: Tensor) -> Tensor:
    """Per-sample log-density of ``z`` under a diagonal Gaussian with log standard deviation ``logs``."""
    return (-0.5 * (_LOG_2PI + 2.0 * logs + (z - mean) ** 2 * torch.exp(-2.0 * logs))).sum(dim=(1, 2, 3))


class ActNorm(nn.Module):
    """Per-channel affine map (x + bias)·exp(logs) with Glow's data-dependent initialisation.

    The first forward pass in training mode sets bias and scale so that the batch's output has zero mean
    and unit variance per channel. The ``initialized`` buffer travels with the state dict, so a loaded or
    evaluated model never re-initialises; an uninitialised ActNorm in eval mode is the identity.
    """

    initialized: Tensor

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        # Python-side cache of ``initialized`` so training steps avoid a device sync per ActNorm.
        self._init_checked = False

    def forward(self, x: Tensor) -> Tensor:
        if self.training and not self._init_checked:
            if not bool(self.initialized):
                self._initialize(x)
            self._init_checked = True
        return (x + self.bias) * torch.exp(self.logs)

    def reverse(self, y: Tensor) -> Tensor:
        return y * torch.exp(-self.logs) - self.bias

    def log_det(self, height: int, width: int) -> Tensor:
        """log|det| of the map on a (C, height, width) input (a scalar, the same for every sample)."""
        return height * width * self.logs.sum()

    @torch.no_grad()
    def _initialize(self, x: Tensor) -> None:
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        std = (x - mean).pow(2).mean(dim=(0, 2, 3), keepdim=True).sqrt()
        self.bias.copy_(-mean)
        self.logs.copy_(-torch.log(std + 1e-6))
        self.initialized.fill_(True)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._init_checked = False


class InvConv2d(nn.Module):
    """Invertible 1×1 convolution with a random orthogonal initial weight W (c×c).

    With ``lu`` the weight is parameterised as W = P·(L·mask + I)·(U·maskᵀ + diag(sign_s·exp(log_s)))
    with fixed permutation P and signs; the trainable parameters are ``lower``, ``upper`` and ``log_s``.
    Otherwise W is the parameter ``weight``. ``forward`` is exactly ``conv2d(x, W)``: the flow step adds
    ``log_det`` itself, so hooks on this module see a plain linear layer.
    """

    perm: Tensor
    sign_s: Tensor
    lower_mask: Tensor

    def __init__(self, channels: int, lu: bool) -> None:
        super().__init__()
        self.lu = lu
        w_init = torch.linalg.qr(torch.randn(channels, channels))[0]
        if lu:
            perm, lower, upper = torch.linalg.lu(w_init)
            diag = torch.diagonal(upper)
            self.register_buffer("perm", perm)
            self.register_buffer("sign_s", torch.sign(diag))
            self.register_buffer("lower_mask", torch.tril(torch.ones(channels, channels), -1))
            self.lower = nn.Parameter(torch.tril(lower, -1))
            self.upper = nn.Parameter(torch.triu(upper, 1))
            self.log_s = nn.Parameter(torch.log(diag.abs()))
        else:
            self.weight = nn.Parameter(w_init)

    def weight_matrix(self) -> Tensor:
        """The effective c×c weight W."""
        if not self.lu:
            return self.weight
        eye = torch.eye(self.lower.shape[0], dtype=self.lower.dtype, device=self.lower.device)
        lower = self.lower * self.lower_mask + eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return self.perm @ lower @ upper

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight_matrix()[:, :, None, None])

    def reverse(self, z: Tensor) -> Tensor:
        return F.conv2d(z, torch.linalg.inv(self.weight_matrix())[:, :, None, None])

    def log_det(self, height: int, width: int) -> Tensor:
        """height·width·log|det W|: the log-determinant of the map on a (c, height, width) input."""
        if self.lu:
            return height * width * self.log_s.sum()
        return height * width * torch.linalg.slogdet(self.weight)[1]


register_layer(InvConv2d, INVERTIBLE_1X1)


class ZeroConv2d(nn.Module):
    """Zero-initialised 3×3 conv whose output is scaled by exp(3·logs), so each flow starts as identity."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        for p in self.conv.parameters():
            nn.init.zeros_(p)
        self.logs = nn.Parameter(torch.zeros(1, out_channels, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x) * torch.exp(self.logs * _LOGSCALE_FACTOR)


class AffineCoupling(nn.Module):
    """Glow's affine coupling: the second channel half becomes (x₂ + shift)·sigmoid(s + 2), with shift and
    s computed from the first half by conv3×3 → ActNorm → ReLU → conv1×1 → ActNorm → ReLU → ZeroConv."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        half = channels // 2
        self.conv1 = nn.Conv2d(half, hidden, 3, padding=1, bias=False)
        self.norm1 = ActNorm(hidden)
        self.conv2 = nn.Conv2d(hidden, hidden, 1, bias=False)
        self.norm2 = ActNorm(hidden)
        self.zero = ZeroConv2d(hidden, 2 * half)
        nn.init.normal_(self.conv1.weight, std=0.05)
        nn.init.normal_(self.conv2.weight, std=0.05)

    def _shift_and_raw_scale(self, x1: Tensor) -> tuple[Tensor, Tensor]:
        h = F.relu(self.norm1(self.conv1(x1)))
        h = F.relu(self.norm2(self.conv2(h)))
        h = self.zero(h)
        return h[:, 0::2], h[:, 1::2] + 2.0

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Transformed tensor and the per-sample log-determinant."""
        x1, x2 = x.chunk(2, dim=1)
        shift, raw = self._shift_and_raw_scale(x1)
        y2 = (x2 + shift) * torch.sigmoid(raw)
        return torch.cat([x1, y2], dim=1), F.logsigmoid(raw).sum(dim=(1, 2, 3))

    def reverse(self, y: Tensor) -> Tensor:
        y1, y2 = y.chunk(2, dim=1)
        shift, raw = self._shift_and_raw_scale(y1)
        return torch.cat([y1, y2 / torch.sigmoid(raw) - shift], dim=1)


class FlowStep(nn.Module):
    """One Glow step: ActNorm → invertible 1×1 conv → affine coupling."""

    def __init__(self, channels: int, hidden: int, lu: bool) -> None:
        super().__init__()
        self.actnorm = ActNorm(channels)
        self.invconv = InvConv2d(channels, lu)
        self.coupling = AffineCoupling(channels, hidden)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Transformed tensor and the per-sample log-determinant of the step."""
        height, width = x.shape[2], x.shape[3]
        h = self.invconv(self.actnorm(x))
        z, logdet = self.coupling(h)
        return z, logdet + self.actnorm.log_det(height, width) + self.invconv.log_det(height, width)

    def reverse(self, z: Tensor) -> Tensor:
        return self.actnorm.reverse(self.invconv.reverse(self.coupling.reverse(z)))


class SplitPrior(nn.Module):
    """Factor out the second channel half; score it under a Gaussian whose mean and log-scale a
    zero-initialised conv computes from the kept half (Glow's learned conditional prior)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.zero = ZeroConv2d(channels // 2, channels)

    def _mean_logs(self, kept: Tensor) -> tuple[Tensor, Tensor]:
        h = self.zero(kept)
        return h[:, 0::2], h[:, 1::2]

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Kept half, factored-out half, and the factored-out half's per-sample log-density."""
        kept, out = x.chunk(2, dim=1)
        mean, logs = self._mean_logs(kept)
        return kept, out, _gaussian_log_prob(out, mean, logs)

    def reverse(self, kept: Tensor, out: Tensor | None, temperature: float) -> Tensor:
        """Re-join the halves; ``out`` None draws it from the prior with scaled standard deviation."""
        if out is None:
            mean, logs = self._mean_logs(kept)
            out = mean + torch.exp(logs) * temperature * torch.randn_like(mean)
        return torch.cat([kept, out], dim=1)


class GlowLevel(nn.Module):
    """One scale: squeeze (2×2 space-to-depth), K flow steps, then optionally a split."""

    def __init__(self, in_channels: int, steps: int, hidden: int, lu: bool, split: bool) -> None:
        super().__init__()
        channels = 4 * in_channels
        self.steps = nn.ModuleList(FlowStep(channels, hidden, lu) for _ in range(steps))
        self.split: SplitPrior | None = SplitPrior(channels) if split else None

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """Output to the next level, factored-out latent (None without split), per-sample log-det and
        per-sample log-density of the factored-out latent."""
        h = F.pixel_unshuffle(x, 2)
        logdet = h.new_zeros(h.shape[0])
        for step in self.steps:
            h, step_logdet = step(h)
            logdet = logdet + step_logdet
        if self.split is None:
            return h, None, logdet, torch.zeros_like(logdet)
        kept, out, log_prob = self.split(h)
        return kept, out, logdet, log_prob

    def reverse(self, z: Tensor, out: Tensor | None, temperature: float) -> Tensor:
        h = z if self.split is None else self.split.reverse(z, out, temperature)
        for step in reversed(self.steps):
            h = cast(FlowStep, step).reverse(h)
        return F.pixel_shuffle(h, 2)


class TopPrior(nn.Module):
    """Gaussian on the top latent: standard normal, or with ``learn`` a learned per-channel mean and
    log-scale (Glow's zero-initialised conv applied to zeros, which reduces to a bias times exp(3·logs))."""

    def __init__(self, channels: int, learn: bool) -> None:
        super().__init__()
        self.channels = channels
        self.bias: nn.Parameter | None = None
        self.logs: nn.Parameter | None = None
        if learn:
            self.bias = nn.Parameter(torch.zeros(1, 2 * channels, 1, 1))
            self.logs = nn.Parameter(torch.zeros(1, 2 * channels, 1, 1))

    def mean_logs(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log standard deviation, shape (1, C, 1, 1), with ``like``'s dtype and device."""
        if self.bias is None or self.logs is None:
            zero = like.new_zeros(1, self.channels, 1, 1)
            return zero, zero
        h = self.bias * torch.exp(self.logs * _LOGSCALE_FACTOR)
        return h[:, : self.channels], h[:, self.channels :]


def default_levels(size: int) -> int:
    """Glow's levels for ``size``×``size`` images: as many squeezes as keep the top latent at least 8×8
    (32: 2, as our default has always been; 64: 3; 128: 4; 28: 1; 96: 3), and at least one."""
    levels = 0
    while size % 2 == 0 and size // 2 >= 8:
        levels, size = levels + 1, size // 2
    return max(levels, 1)


class Glow(GenerativeModel):
    """Multi-scale Glow on (N, C, H, W) images in [0, 1] with H = W = ``image_size``; ``levels`` None
    scales them with the size (``default_levels``).

    ``forward(y)`` returns the exact per-sample log-density of the preprocessed input y; ``nll`` adds the
    discretisation term so that it is the NLL (nats) of the ``n_bits``-quantised image with each value at
    its bin centre. The default layer set for ROSE is the invertible 1×1 convs, as in the paper.
    """

    kind: ClassVar[str] = "glow"

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int = 32,
        levels: int | None = None,
        steps: int = 16,
        hidden: int = 200,
        lu: bool = True,
        learn_prior: bool = True,
        n_bits: int = 8,
    ) -> None:
        super().__init__(in_channels, image_size)
        levels = default_levels(image_size) if levels is None else levels
        if levels < 1 or steps < 1 or hidden < 1:
            raise RoseError(f"Glow needs levels, steps and hidden ≥ 1, got {levels}, {steps}, {hidden}")
        if image_size % 2**levels:
            raise RoseError(f"Glow with {levels} levels needs an image size divisible by {2**levels}")
        if not 1 <= n_bits <= 8:
            raise RoseError(f"n_bits must be between 1 and 8, got {n_bits}")
        self.levels = levels
        self.steps = steps
        self.hidden = hidden
        self.lu = lu
        self.learn_prior = learn_prior
        self.n_bits = n_bits
        blocks = []
        channels, size = in_channels, image_size
        for i in range(levels):
            split = i < levels - 1
            blocks.append(GlowLevel(channels, steps, hidden, lu, split))
            channels, size = (2 if split else 4) * channels, size // 2
        self.blocks = nn.ModuleList(blocks)
        self.prior = TopPrior(channels, learn_prior)
        self._top_shape = (channels, size, size)

    def config(self) -> dict[str, Any]:
        return {
            "in_channels": self.in_channels,
            "image_size": self.image_size,
            "levels": self.levels,
            "steps": self.steps,
            "hidden": self.hidden,
            "lu": self.lu,
            "learn_prior": self.learn_prior,
            "n_bits": self.n_bits,
        }

    def preprocess(self, x: Tensor, noise: bool) -> Tensor:
        """Images in [0, 1] → flow inputs y = (x_int + u) / 2**n_bits − 0.5, where x_int is the image
        quantised to n_bits and u ~ U[0, 1) with ``noise`` (training dequantisation) or u = ½ (scoring)."""
        expected = (self.in_channels, self.image_size, self.image_size)
        if x.dim() != 4 or tuple(x.shape[1:]) != expected:
            shape = ", ".join(map(str, expected))
            raise DataError(f"Glow expects images of shape (N, {shape}), got {tuple(x.shape)}")
        x_int = torch.round(x.clamp(0.0, 1.0) * 255.0)
        if self.n_bits < 8:
            x_int = torch.floor(x_int / 2 ** (8 - self.n_bits))
        offset = rand(x, *x.shape[1:], stream="dequantize").to(x_int) if noise else 0.5
        return (x_int + offset) / 2**self.n_bits - 0.5

    def _flow(self, y: Tensor) -> tuple[list[Tensor], Tensor, Tensor]:
        """Latents (factored-out halves in level order, then the top latent), per-sample log-det of the
        flow, and per-sample log-density of the latents under their priors."""
        zs: list[Tensor] = []
        logdet = y.new_zeros(y.shape[0])
        log_prior = y.new_zeros(y.shape[0])
        h = y
        for level in self.blocks:
            h, out, level_logdet, level_log_prior = level(h)
            logdet = logdet + level_logdet
            log_prior = log_prior + level_log_prior
            if out is not None:
                zs.append(out)
        zs.append(h)
        mean, logs = self.prior.mean_logs(h)
        return zs, logdet, log_prior + _gaussian_log_prob(h, mean, logs)

    def encode(self, y: Tensor) -> tuple[list[Tensor], Tensor]:
        """Latents of preprocessed inputs (factored-out halves in level order, then the top latent) and
        the per-sample log|det ∂z/∂y| of the bijection y ↦ latents."""
        zs, logdet, _ = self._flow(y)
        return zs, logdet

    def forward(self, y: Tensor) -> Tensor:
        """Per-sample log-density log p(y) of preprocessed inputs (change of variables)."""
        _, logdet, log_prior = self._flow(y)
        return logdet + log_prior

    def _decode(self, top: Tensor, outs: Sequence[Tensor | None], temperature: float) -> Tensor:
        h = top
        for level, out in zip(reversed(self.blocks), reversed(outs), strict=True):
            h = cast(GlowLevel, level).reverse(h, out, temperature)
        return h

    def reverse(self, zs: Sequence[Tensor]) -> Tensor:
        """Inverse of ``encode``: the preprocessed input y whose latents are ``zs``."""
        if len(zs) != self.levels:
            raise RoseError(f"Glow.reverse needs {self.levels} latents, got {len(zs)}")
        return self._decode(zs[-1], [*zs[:-1], None], 1.0)

    @torch.no_grad()
    def sample(self, n: int, temperature: float = 1.0) -> Tensor:
        """Draw ``n`` images in [0, 1]; ``temperature`` scales every prior's standard deviation."""
        like = next(self.parameters())
        mean, logs = self.prior.mean_logs(like)
        noise = torch.randn(n, *self._top_shape, dtype=like.dtype, device=like.device)
        top = mean + torch.exp(logs) * temperature * noise
        y = self._decode(top, [None] * self.levels, temperature)
        return (y + 0.5).clamp(0.0, 1.0)

    def _nll(self, x: Tensor, noise: bool) -> Tensor:
        y = self.preprocess(x, noise)
        return self.dims * self.n_bits * math.log(2.0) - self(y)

    def nll(self, x: Tensor) -> Tensor:
        """Per-sample NLL (nats) of the quantised image, values at bin centres; computed without grad."""
        with torch.no_grad():
            return self._nll(x, noise=False)

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """``nll`` with gradients; ``stochastic`` uses uniform dequantisation as the authors' scores do."""
        return self._nll(x, noise=stochastic)

    def train_loss(self, x: Tensor) -> Tensor:
        return self._nll(x, noise=True)

    def layer_sets(self) -> dict[str, list[str]]:
        """``invconv``: every InvConv2d (the paper's default); ``all``: those plus every conv of the
        coupling networks — both in network order."""
        invconv: list[str] = []
        everything: list[str] = []
        for name, module in self.named_modules():
            if isinstance(module, InvConv2d):
                invconv.append(name)
                everything.append(name)
            elif isinstance(module, AffineCoupling):
                everything.extend(
                    f"{name}.{sub}" for sub, m in module.named_modules() if isinstance(m, nn.Conv2d)
                )
        return {"invconv": invconv, "all": everything}
