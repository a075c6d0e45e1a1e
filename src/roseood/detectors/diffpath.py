"""DiffPath (Heng et al., NeurIPS 2024): statistics of an image's deterministic diffusion path.

The image is encoded by the probability-flow ODE (DDIM run forwards, x0 → x_T) in ``steps`` steps; at
each step the model predicts the noise ε̂_i. DiffPath-6D, as the authors' code computes it, takes the
sums over the path and the pixels of ε̂, ε̂², ε̂³ and of the rate of change dε̂/dt (finite differences
times the number of steps), its square and cube: six numbers per image, scored by the −log density of a
Gaussian mixture fitted on (standardised) in-distribution statistics.

Simplified: the mixture's size and covariance type are chosen by BIC among a few (the paper's code
grid-searches 50/100 components and four covariance types by 10-fold cross-validation on 50k+
training images); the 1-D variant (a KDE of √Σ(dε̂/dt)²) is not offered.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import Tensor

from roseood.detectors.base import register_detector
from roseood.detectors.diffusion import StatisticDetector, ddim_step, timestep_batch
from roseood.models.base import RoseModel


class DiffPath(StatisticDetector):
    """DiffPath-6D over a ``steps``-step DDIM encoding path (the paper: 10)."""

    method = "diffpath"

    def __init__(
        self, model: RoseModel | None, *, steps: int = 10, batch_size: int = 64, progress: bool | None = None
    ):
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.steps = self._timesteps(steps, "steps", low=2)  # ≥ 2: a rate of change

    @property
    def nfe_per_image(self) -> int:
        return self.steps

    def path_eps(self, x: Tensor) -> Tensor:
        """The predicted noise at each step of the DDIM encoding of ``x`` (in [-1, 1]): (N, steps, ...)."""
        total = self.model.train_timesteps
        ts = [i * (total // self.steps) for i in range(self.steps)] + [total]  # respaced as "ddimN"
        out = []
        for t_from, t_to in itertools.pairwise(ts):
            eps = self.model.eps(x, timestep_batch(x, t_from))
            out.append(eps)
            x = ddim_step(self.model, x, eps, t_from, t_to)
        return torch.stack(out, 1)

    def statistics(self, x: Tensor) -> np.ndarray:
        def six(b: Tensor) -> Tensor:
            eps = self.path_eps(b).double()
            rate = eps.diff(dim=1) * self.steps
            return torch.stack(
                [
                    eps.sum((1, 2, 3, 4)),
                    eps.pow(2).sum((1, 2, 3, 4)),
                    eps.pow(3).sum((1, 2, 3, 4)),
                    rate.sum((1, 2, 3, 4)),
                    rate.pow(2).sum((1, 2, 3, 4)),
                    rate.pow(3).sum((1, 2, 3, 4)),
                ],
                1,
            )

        return self._batched(x, six, "DiffPath DDIM paths").numpy()


register_detector(DiffPath)
