"""DiffPath (Heng et al., NeurIPS 2024): statistics of an image's deterministic diffusion path.

The image is encoded by DDIM run forwards (x0 → x_T) over the authors' "ddimN" respacing: timesteps
0, s, 2s, …, (N − 1)s with the integer stride s that gives exactly N of them, then pure noise. At each
step the UNet predicts the noise; the predicted clean image is clamped to [-1, 1] and the noise
recomputed from it (improved-diffusion's DDIM with ``clip_denoised``, which the authors' configs set):
that noise ε_i is both recorded and used for the step.

- **DiffPath-6D** (``diffpath``): sums over the path and the pixels of ε, ε², ε³ and of the rate of
  change dε/dt (differences × N), its square and cube; scored by the −log density of a Gaussian mixture
  on the standardised statistics, chosen as the authors do (50 or 100 components × four covariance
  types by 10-fold cross-validation, sizes capped by the fit set: see ``MixtureDensity``).
- **DiffPath-1D** (``diffpath-1d``): √Σ(dε/dt)², scored by the −log density of a Gaussian KDE with the
  authors' bandwidth (5, in the statistic's units).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import Tensor

from roseood.detectors.base import register_detector
from roseood.detectors.diffusion import (
    GaussianKDE,
    MixtureDensity,
    StatisticDetector,
    ddim_step,
    timestep_batch,
)
from roseood.errors import RoseError
from roseood.models.base import RoseModel

VARIANTS = ("6d", "1d")


def ddim_respacing(total: int, steps: int) -> list[int]:
    """The timesteps of improved-diffusion's "ddimN" respacing: 0, s, 2s, … with the smallest integer
    stride s that gives exactly ``steps`` of them below ``total``."""
    for stride in range(1, total):
        if len(range(0, total, stride)) == steps:
            return list(range(0, total, stride))
    raise RoseError(f"diffpath cannot take exactly {steps} DDIM steps of {total} with an integer stride")


class DiffPath(StatisticDetector):
    """DiffPath over a ``steps``-step DDIM encoding path (the paper: 10): the 6-D statistics with a
    Gaussian mixture (``variant="6d"``) or the 1-D one with a KDE (``variant="1d"``)."""

    method = "diffpath"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        steps: int = 10,
        variant: str = "6d",
        clip: bool = True,
        density: str = "cv",
        bandwidth: float = 5.0,
        batch_size: int = 64,
        progress: bool | None = None,
    ):
        if variant not in VARIANTS:
            raise RoseError(f"diffpath's variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        super().__init__(model, {"variant": variant}, batch_size=batch_size, progress=progress)
        self.variant = variant
        if not bandwidth > 0:
            raise RoseError(f"diffpath's KDE bandwidth must be positive, got {bandwidth}")
        self.steps = self._timesteps(steps, "steps", low=2)  # ≥ 2: a rate of change
        self.clip = bool(clip)
        self.density, self.bandwidth = density, float(bandwidth)
        self.timesteps = ddim_respacing(self.model.train_timesteps, steps)
        self.density_ = GaussianKDE(self.bandwidth) if variant == "1d" else MixtureDensity(selection=density)

    @property
    def nfe_per_image(self) -> int:
        return self.steps

    def path_eps(self, x: Tensor) -> Tensor:
        """The noise of each step of the DDIM encoding of ``x`` (in [-1, 1]): (N, steps, ...)."""
        out = []
        for t_from, t_to in itertools.pairwise([*self.timesteps, self.model.train_timesteps]):
            x, eps = ddim_step(
                self.model, x, self.model.eps(x, timestep_batch(x, t_from)), t_from, t_to, clip=self.clip
            )
            out.append(eps)
        return torch.stack(out, 1)

    def statistics(self, x: Tensor) -> np.ndarray:
        def stats(b: Tensor) -> Tensor:
            eps = self.path_eps(b).double()
            rate = eps.diff(dim=1) * self.steps
            if self.variant == "1d":
                return rate.pow(2).sum((1, 2, 3, 4)).sqrt()[:, None]
            dims = (1, 2, 3, 4)
            return torch.stack([v.pow(p).sum(dims) for v in (eps, rate) for p in (1, 2, 3)], 1)

        return self._batched(x, stats, "DiffPath DDIM paths").numpy()


register_detector(DiffPath, {"diffpath": {}, "diffpath-1d": {"variant": "1d"}})
