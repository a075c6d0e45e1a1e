"""Reconstruction (DDPM-OOD, Graham et al., CVPR-W 2023): noise the image to many timesteps, denoise
each back, and score how far the reconstructions land from the image.

The sampler is PLMS (Liu et al., ICLR 2022) over ``steps`` evenly spaced timesteps (0, s, 2s, …, with
s = T // steps; the paper: 100), the pseudo-improved-Euler first step of PNDM without its Runge-Kutta
warm-up (``skip_prk_steps``, what the authors run), then 2nd-, 3rd- and 4th-order Adams–Bashforth
steps on the noise predictions. The starts are every ``skip``-th of those timesteps from the second
(the authors' ``inference_skip_factor``; 100 steps and skip 4: t = 10, 50, …, 970, 25 starts). Each
start noises the image with one fixed, seeded draw (the same for every image, so the score is
deterministic) and runs PLMS from there down to t = 0. Per start, the MSE between the image and its
reconstruction (clamped to the image range) — and with ``errors="mse+ssim"`` also 1 − SSIM — is
z-normalised with the mean and standard deviation over in-distribution images, and the score is the
mean of the z-scores, as the authors' code averages them.

Not as the paper: LPIPS (the paper's second error) needs downloaded network weights and is not offered;
the authors' evaluation script scores the MSE alone by default, which is ours. A latent model noises and
denoises its latents, and each reconstruction is decoded and compared with the decoded latent of the
image (the autoencoder's own reconstruction, so that its error is not counted as the denoiser's).
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
from roseood.models.diffusion import DiffusionModel
from roseood.validation import check_int, check_seed

ERRORS = ("mse", "mse+ssim")


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


def plms(model: DiffusionModel, x: Tensor, timesteps: list[int]) -> Tensor:
    """Denoise ``x`` (at ``timesteps[0]``) down the decreasing ``timesteps`` by PLMS: the first move
    with the mean of the noise predicted at its two ends (after a DDIM move), later ones with the
    Adams–Bashforth combination of the noise predicted at the last up to four points."""
    ets: list[Tensor] = []
    for t, t_prev in itertools.pairwise(timesteps):
        ets = [*ets[-3:], model.eps(x, timestep_batch(x, t))]
        if len(ets) == 1:
            euler = ddim_step(model, x, ets[0], t, t_prev)[0]
            eps = (ets[0] + model.eps(euler, timestep_batch(x, t_prev))) / 2
        elif len(ets) == 2:
            eps = (3 * ets[-1] - ets[-2]) / 2
        elif len(ets) == 3:
            eps = (23 * ets[-1] - 16 * ets[-2] + 5 * ets[-3]) / 12
        else:
            eps = (55 * ets[-1] - 59 * ets[-2] + 37 * ets[-3] - 9 * ets[-4]) / 24
        x = ddim_step(model, x, eps, t, t_prev)[0]
    return x


class Reconstruction(DiffusionDetector):
    """DDPM-OOD reconstruction errors from every ``skip``-th timestep of a ``steps``-step PLMS schedule."""

    method = "reconstruction"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        steps: int = 100,
        skip: int = 4,
        errors: str = "mse",
        seed: int = 0,
        batch_size: int = 64,
        progress: bool | None = None,
    ):
        super().__init__(model, batch_size=batch_size, progress=progress)
        total = self.model.train_timesteps
        if not 2 <= steps <= total or skip < 1:
            raise RoseError(f"reconstruction needs 2 ≤ steps ≤ {total} and skip ≥ 1, got {steps}, {skip}")
        if errors not in ERRORS:
            raise RoseError(f"reconstruction's errors must be one of {', '.join(ERRORS)}, got {errors!r}")
        self.steps, self.skip = self._timesteps(steps, "steps", low=2), check_int(skip, "skip")
        self.errors, self.seed = errors, check_seed(seed)
        self.mean_: Tensor | None = None
        self.std_: Tensor | None = None

    @property
    def schedule(self) -> list[int]:
        """The PLMS timesteps, increasing: 0, s, 2s, … (s = T // steps)."""
        stride = self.model.train_timesteps // self.steps
        return [i * stride for i in range(self.steps)]

    @property
    def starts(self) -> list[int]:
        """The timesteps reconstructed from: every ``skip``-th of the schedule, from its second."""
        return self.schedule[1 :: self.skip]

    @property
    def nfe_per_image(self) -> int:
        return sum(self.schedule.index(t) + 1 for t in self.starts)

    def reconstruction_errors(self, x: Tensor) -> Tensor:
        """(N, starts) reconstruction MSEs in [0, 1] pixel units (with ``mse+ssim``: then 1 − SSIM per
        start)."""
        g = torch.Generator().manual_seed(self.seed)
        noises = [torch.randn(self.model.space_shape, generator=g) for _ in self.starts]
        schedule = self.schedule
        decode = self.model.space.decode

        def errs(b: Tensor) -> Tensor:
            mse, dissim = [], []
            # a latent model's reconstructions are compared decoded, with the decoded latent of the image
            ref = b if self.model.autoencoder is None else decode(b).clamp(-1, 1)
            for t0, noise in zip(self.starts, noises, strict=True):
                xt = self.model.noised(b, timestep_batch(b, t0), noise.to(b).expand_as(b))
                rec = decode(plms(self.model, xt, schedule[schedule.index(t0) :: -1])).clamp(-1, 1)
                mse.append(((rec - ref) / 2).pow(2).flatten(1).mean(1))
                if self.errors == "mse+ssim":
                    dissim.append(1 - ssim(rec, ref))
            return torch.stack(mse + dissim, 1)

        return self._batched(x, errs, "reconstructions")

    def _fit(self, x: Tensor) -> None:
        if x.shape[0] < 2:
            raise RoseError(f"reconstruction needs at least 2 in-distribution images, got {x.shape[0]}")
        e = self.reconstruction_errors(x)
        self.mean_, self.std_ = e.mean(0), e.std(0).clamp_min(1e-12)

    def _score(self, x: Tensor) -> Tensor:
        assert self.mean_ is not None and self.std_ is not None
        return ((self.reconstruction_errors(x) - self.mean_) / self.std_).mean(1)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean_, "std": self.std_}

    def load_state(self, state: dict[str, Any]) -> None:
        self.mean_, self.std_ = state["mean"], state["std"]


register_detector(Reconstruction)
