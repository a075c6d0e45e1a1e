"""Detectors for diffusion models (beside ROSE on their denoising loss): the shared base, a density on
in-distribution statistics, deterministic DDIM steps, and the denoising-loss baseline.

Every diffusion detector reports ``nfe_per_image``: the UNet evaluations (function evaluations) it
spends on one image, the cost measure of the diffusion OOD literature.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.mixture import GaussianMixture
from torch import Tensor

from roseood.data.tensors import iter_batches
from roseood.detectors.aggregation import mixture_nll
from roseood.detectors.base import Detector, register_detector
from roseood.errors import RoseError
from roseood.models.base import RoseModel
from roseood.models.diffusion import DiffusionModel, as_diffusion_model
from roseood.validation import check_int, check_seed


class DiffusionDetector(Detector):
    """Base of the detectors that query a :class:`~roseood.models.diffusion.DiffusionModel`'s UNet
    (its EMA weights, in eval mode) without gradients."""

    def __init__(self, model: RoseModel | None, *, batch_size: int = 64, progress: bool | None = None):
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.model: DiffusionModel = as_diffusion_model(model, f"the {self.method} method")

    def _timesteps(self, value: Any, name: str, *, low: int = 1) -> int:
        """A count of the model's timesteps (steps, levels): an integer from ``low`` to the model's train
        timesteps, beyond which the same timesteps would only repeat."""
        return check_int(value, name, low=low, high=self.model.train_timesteps)

    @property
    def nfe_per_image(self) -> int:
        """UNet evaluations spent on one image when scoring."""
        raise NotImplementedError

    def _batched(self, x: Tensor, fn: Any, desc: str) -> Tensor:
        """``fn`` (a batch in [-1, 1] on the model's device → per-image rows) over ``x`` in batches."""
        self.model.eval()
        out = []
        with torch.no_grad():
            for batch in iter_batches(x, self.batch_size, desc if self.progress else None):
                out.append(fn(self.model.to_model_space(batch.to(self.device))).double().cpu())
        return torch.cat(out)


def ddim_step(model: DiffusionModel, x: Tensor, eps: Tensor, t_from: int, t_to: int) -> Tensor:
    """One deterministic DDIM move of ``x`` (at ``t_from``, predicted noise ``eps``) to ``t_to``, in
    either direction; ``t_to`` = -1 is the clean image (ᾱ = 1) and ``t_to`` = T is pure noise (ᾱ = 0)."""
    a = model.alphas_cumprod

    def alpha(t: int) -> Tensor:
        return a.new_tensor(1.0) if t < 0 else (a.new_tensor(0.0) if t >= len(a) else a[t])

    a_from, a_to = alpha(t_from), alpha(t_to)
    x0 = (x - (1 - a_from).sqrt() * eps) / a_from.sqrt()
    return a_to.sqrt() * x0 + (1 - a_to).sqrt() * eps


def timestep_batch(x: Tensor, t: int) -> Tensor:
    return torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)


class MixtureDensity:
    """−log density under a Gaussian mixture fitted on standardised in-distribution statistics; the
    number of components (up to ``max_k``, at least 20 images each) and the covariance type (full or
    diagonal) chosen by BIC: a cheap, deterministic stand-in for the papers' cross-validated grid."""

    def __init__(self, max_k: int = 8, seed: int = 0) -> None:
        self.max_k, self.seed = check_int(max_k, "max_k"), check_seed(seed)
        self.state_: dict[str, Tensor] = {}

    def fit(self, v: np.ndarray) -> None:
        if not np.isfinite(v).all():
            raise RoseError("the in-distribution statistics are not finite")
        mean, std = v.mean(0), v.std(0) + 1e-12
        z = (v - mean) / std
        best: tuple[float, GaussianMixture] | None = None
        for k in (k for k in (1, 2, 4, 8, 16) if k <= max(1, min(self.max_k, len(v) // 20))):
            for cov in ("full", "diag"):
                gm = GaussianMixture(k, covariance_type=cov, reg_covar=1e-4, random_state=self.seed).fit(z)
                bic = gm.bic(z)
                if best is None or bic < best[0]:
                    best = (bic, gm)
        assert best is not None
        gm = best[1]
        covs = (
            gm.covariances_
            if gm.covariance_type == "full"
            else np.stack([np.diag(c) for c in gm.covariances_])
        )
        self.state_ = {
            k: torch.from_numpy(np.asarray(val, dtype=np.float64))
            for k, val in (
                ("mean", mean),
                ("std", std),
                ("weights", gm.weights_),
                ("means", gm.means_),
                ("covariances", covs),
            )
        }

    def __call__(self, v: np.ndarray) -> np.ndarray:
        s = {k: t.numpy() for k, t in self.state_.items()}
        return mixture_nll((v - s["mean"]) / s["std"], s["weights"], s["means"], s["covariances"])


class DenoisingLoss(DiffusionDetector):
    """The diffusion model's own likelihood proxy: its denoising loss at the same K fixed (timestep,
    noise) pairs ROSE differentiates (with ``weighting="elbo"``, the DDPM variational bound on −log p(x)
    up to constants). The analogue of the paper's NLL baseline."""

    method = "denoising"

    @property
    def nfe_per_image(self) -> int:
        return self.model.k

    def _fit(self, x: Tensor) -> None:
        """The loss needs no fitting."""

    def _score(self, x: Tensor) -> Tensor:
        self.model.eval()
        out = []
        for batch in iter_batches(x, self.batch_size, "denoising loss" if self.progress else None):
            out.append(self.model.nll(batch.to(self.device)).double().cpu())
        return torch.cat(out)


class StatisticDetector(DiffusionDetector):
    """A detector that maps each image to a few statistics and scores their −log density under a
    mixture fitted on in-distribution images (DiffPath, MSMA)."""

    def __init__(self, model: RoseModel | None, *, batch_size: int = 64, progress: bool | None = None):
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.density_ = MixtureDensity()

    def statistics(self, x: Tensor) -> np.ndarray:
        """Per-image statistics (N, D) of validated images in [0, 1]."""
        raise NotImplementedError

    def _fit(self, x: Tensor) -> None:
        self.density_.fit(self.statistics(x))

    def _score(self, x: Tensor) -> Tensor:
        return torch.from_numpy(self.density_(self.statistics(x)))

    def state(self) -> dict[str, Any]:
        return {"density": self.density_.state_}

    def load_state(self, state: dict[str, Any]) -> None:
        self.density_.state_ = dict(state["density"])


class MSMA(StatisticDetector):
    """Multiscale score matching analysis (Mahmood et al., ICLR 2021): the norms of the model's score
    at ``levels`` noise levels, evaluated at the image itself, with a Gaussian mixture on them.

    With a DDPM the score at level t is −ε̂(x_t, t)/√(1 − ᾱ_t); the unperturbed input at level t is the
    image scaled as the forward process scales it, √ᾱ_t x (the VP analogue of MSMA's x at σ_t). Levels:
    ``levels`` timesteps evenly spaced over (0, T)."""

    method = "msma"

    def __init__(
        self, model: RoseModel | None, *, levels: int = 10, batch_size: int = 64, progress: bool | None = None
    ):
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.levels = self._timesteps(levels, "levels")

    @property
    def nfe_per_image(self) -> int:
        return self.levels

    def statistics(self, x: Tensor) -> np.ndarray:
        total = self.model.train_timesteps
        ts = [int((i + 0.5) * total / self.levels) for i in range(self.levels)]
        a = self.model.alphas_cumprod

        def norms(b: Tensor) -> Tensor:
            cols = []
            for t in ts:
                eps = self.model.eps(a[t].sqrt() * b, timestep_batch(b, t))
                cols.append(eps.flatten(1).norm(dim=1) / (1 - a[t]).sqrt())
            return torch.stack(cols, 1)

        return self._batched(x, norms, "MSMA score norms").numpy()


register_detector(DenoisingLoss)
register_detector(MSMA)
