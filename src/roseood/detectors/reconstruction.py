"""Reconstruction (DDPM-OOD, Graham et al., CVPR-W 2023): noise the image to several timesteps, denoise
each back, and score how far the reconstructions land from the image.

For each start t (``starts``, fractions of T) the image is noised with a fixed, seeded noise draw (the
same for every image, so the score is deterministic) and denoised by ``steps`` deterministic DDIM steps.
Two errors per start — the MSE and 1 − SSIM (a structural error in place of the paper's LPIPS, which
would need downloaded network weights) — are z-normalised with in-distribution statistics, and the
score is their mean over starts and errors, as the paper averages its z-scores.

Simplified: DDIM instead of PLMS sampling, fewer starts and steps (the paper reconstructs from many
t with 100 steps), SSIM instead of LPIPS.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from roseood.detectors.base import register_detector
from roseood.detectors.diffusion import DiffusionDetector, ddim_step, timestep_batch
from roseood.errors import RoseError
from roseood.models.base import RoseModel
from roseood.validation import check_float, check_seed


def ssim(a: Tensor, b: Tensor, window: int = 7, sigma: float = 1.5) -> Tensor:
    """Mean structural similarity per image of (N, C, H, W) images in [-1, 1] (Gaussian window)."""
    coords = torch.arange(window, dtype=a.dtype, device=a.device) - window // 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = (g / g.sum())[:, None] * (g / g.sum())[None, :]
    c = a.shape[1]
    kernel = g.expand(c, 1, window, window)

    def blur(t: Tensor) -> Tensor:
        return F.conv2d(t, kernel, padding=window // 2, groups=c)

    a, b = (a + 1) / 2, (b + 1) / 2
    mu_a, mu_b = blur(a), blur(b)
    var_a, var_b = blur(a * a) - mu_a**2, blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return s.flatten(1).mean(1)


class Reconstruction(DiffusionDetector):
    """DDPM-OOD reconstruction error from ``starts`` (fractions of T), ``steps`` DDIM steps each."""

    method = "reconstruction"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        starts: list[float] | None = None,
        steps: int = 5,
        seed: int = 0,
        batch_size: int = 64,
        progress: bool | None = None,
    ):
        super().__init__(model, batch_size=batch_size, progress=progress)
        starts = list(starts) if starts is not None else [0.1, 0.2, 0.3, 0.4, 0.5]
        if not starts or len(starts) > self.model.train_timesteps:
            raise RoseError(f"reconstruction needs 1 to train-timesteps starts, got {len(starts)}")
        self.starts = [check_float(s, "starts", low=0.0, high=1.0, low_open=True) for s in starts]
        self.steps, self.seed = self._timesteps(steps, "steps"), check_seed(seed)
        self.mean_: Tensor | None = None
        self.std_: Tensor | None = None

    @property
    def nfe_per_image(self) -> int:
        return len(self.starts) * self.steps

    def errors(self, x: Tensor) -> Tensor:
        """(N, 2·starts) reconstruction errors: MSE and 1 − SSIM per start."""
        total = self.model.train_timesteps
        noise = torch.randn(x.shape[1:], generator=torch.Generator().manual_seed(self.seed))

        def errs(b: Tensor) -> Tensor:
            cols = []
            for start in self.starts:
                t0 = min(int(start * total), total - 1)
                ts = [round(t0 * (1 - i / self.steps)) for i in range(self.steps)] + [-1]
                xt = self.model.noised(b, timestep_batch(b, t0), noise.to(b).expand_as(b))
                for t_from, t_to in itertools.pairwise(ts):
                    xt = ddim_step(
                        self.model, xt, self.model.eps(xt, timestep_batch(b, t_from)), t_from, t_to
                    )
                rec = xt.clamp(-1, 1)
                cols += [(rec - b).pow(2).flatten(1).mean(1), 1 - ssim(rec, b)]
            return torch.stack(cols, 1)

        return self._batched(x, errs, "reconstructions")

    def _fit(self, x: Tensor) -> None:
        e = self.errors(x)
        self.mean_, self.std_ = e.mean(0), e.std(0).clamp_min(1e-12)

    def _score(self, x: Tensor) -> Tensor:
        assert self.mean_ is not None and self.std_ is not None
        return ((self.errors(x) - self.mean_) / self.std_).mean(1)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean_, "std": self.std_}

    def load_state(self, state: dict[str, Any]) -> None:
        self.mean_, self.std_ = state["mean"], state["std"]


register_detector(Reconstruction)
