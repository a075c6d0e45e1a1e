"""Detectors for diffusion models (beside ROSE on their denoising loss): the shared base, a density on
in-distribution statistics, deterministic DDIM steps, and the denoising-loss baseline.

Every diffusion detector reports ``nfe_per_image``: the UNet evaluations (function evaluations) it
spends on one image, the cost measure of the diffusion OOD literature.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from scipy.special import logsumexp
from sklearn.mixture import GaussianMixture
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from torch import Tensor

from roseood.data.tensors import iter_batches
from roseood.detectors.aggregation import mixture_nll, one_blas_thread
from roseood.detectors.base import Detector, name_of, register_detector
from roseood.errors import RoseError
from roseood.models.base import RoseModel
from roseood.models.diffusion import DiffusionModel, as_diffusion_model
from roseood.validation import check_int, check_seed


class DiffusionDetector(Detector):
    """Base of the detectors that query a :class:`~roseood.models.diffusion.DiffusionModel`'s UNet
    (its EMA weights, in eval mode) without gradients. ``ddpm_only``: the method follows DDPM's forward
    process (ᾱ_t, DDIM steps) and refuses a flow-matching model in one line."""

    ddpm_only: bool = True

    def __init__(
        self,
        model: RoseModel | None,
        named: Mapping[str, Any] | None = None,
        /,
        *,
        batch_size: int = 64,
        progress: bool | None = None,
    ):
        """``named``: the subclass's parameters that select its method name (``name_of``), for refusals."""
        super().__init__(model, batch_size=batch_size, progress=progress)
        what = f"the {name_of(type(self), named or {})} method"
        self.model: DiffusionModel = as_diffusion_model(model, what)
        if self.ddpm_only:
            self.model.objective.require_forward_process(what)
            self.model.condition.fixed(1, torch.device("cpu"), what)  # one path

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
                rows = self.model.space.encode(batch.to(self.device))
                self.model.space.check_batch(rows)  # once per batch, not per UNet call of fn
                out.append(fn(rows).double().cpu())
        return torch.cat(out)


def ddim_step(
    model: DiffusionModel, x: Tensor, eps: Tensor, t_from: int, t_to: int, clip: bool = False
) -> tuple[Tensor, Tensor]:
    """One deterministic DDIM move of ``x`` (at ``t_from``, predicted noise ``eps``) to ``t_to``, in
    either direction; ``t_to`` = -1 is the clean image (ᾱ = 1) and ``t_to`` = T is pure noise (ᾱ = 0).

    ``clip``: the predicted clean image is clamped to [-1, 1] and the noise recomputed from it (as
    improved-diffusion's DDIM with ``clip_denoised``). Returns the moved ``x`` and the noise it used."""
    a = model.alphas_cumprod

    def alpha(t: int) -> Tensor:
        return a.new_tensor(1.0) if t < 0 else (a.new_tensor(0.0) if t >= len(a) else a[t])

    a_from, a_to = alpha(t_from), alpha(t_to)
    x0 = (x - (1 - a_from).sqrt() * eps) / a_from.sqrt()
    if clip:
        x0 = x0.clamp(-1, 1)
        eps = (x - a_from.sqrt() * x0) / (1 - a_from).sqrt()
    return a_to.sqrt() * x0 + (1 - a_to).sqrt() * eps, eps


def timestep_batch(x: Tensor, t: float) -> Tensor:
    """``t`` for every row of ``x``: integer timesteps as long, fractional ones as float."""
    dtype = torch.long if float(t).is_integer() else torch.float32
    return torch.full((x.shape[0],), t, dtype=dtype, device=x.device)


SELECTIONS = ("cv", "bic")


class MixtureDensity:
    """−log density under a Gaussian mixture fitted on standardised in-distribution statistics.

    ``selection="cv"`` (the papers'): the size among ``components`` and the covariance type among
    ``covariance_types`` maximise the mean held-out log-likelihood over ``folds``-fold cross-validation
    (scikit-learn's GridSearchCV of a StandardScaler + GaussianMixture pipeline, unshuffled folds, as the
    authors' code). A size above ``n_train / min_per_component`` (``n_train``: the images in a training
    fold) is lowered to it, so that small fit sets do not get more components than they can support.
    ``selection="bic"``: a cheaper stand-in, 1–16 components (≥ 20 images each), full or diagonal
    covariance, by BIC."""

    def __init__(
        self,
        components: tuple[int, ...] = (50, 100),
        covariance_types: tuple[str, ...] = ("full", "tied", "diag", "spherical"),
        selection: str = "cv",
        folds: int = 10,
        max_iter: int = 200,
        min_per_component: int = 10,
        seed: int = 0,
    ) -> None:
        if selection not in SELECTIONS:
            raise RoseError(f"the density selection must be {' or '.join(SELECTIONS)}, got {selection!r}")
        self.components, self.covariance_types = tuple(components), tuple(covariance_types)
        self.selection, self.folds, self.max_iter = selection, folds, max_iter
        self.min_per_component, self.seed = min_per_component, check_seed(seed)
        self.state_: dict[str, Tensor] = {}
        self.chosen_: dict[str, Any] = {}

    least_images = 4  # two folds of two: the cross-validated choice's minimum

    def _select_cv(self, v: np.ndarray) -> tuple[StandardScaler, GaussianMixture]:
        folds = min(self.folds, len(v) // 2)
        if folds < 2:
            raise RoseError(
                f"the density needs at least {self.least_images} in-distribution images, got {len(v)}"
            )
        cap = max(1, (len(v) - -(-len(v) // folds)) // self.min_per_component)
        grid = {
            "gmm__n_components": sorted({min(k, cap) for k in self.components}),
            "gmm__covariance_type": list(self.covariance_types),
        }
        pipe = Pipeline(
            [
                ("scaler", StandardScaler()),
                ("gmm", GaussianMixture(max_iter=self.max_iter, random_state=self.seed)),
            ]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a candidate that fails on a fold scores NaN and loses
            search = GridSearchCV(pipe, grid, cv=KFold(folds)).fit(v)
        best = search.best_estimator_
        self.chosen_ = {k.removeprefix("gmm__"): val for k, val in search.best_params_.items()}
        return best.named_steps["scaler"], best.named_steps["gmm"]

    def _select_bic(self, v: np.ndarray) -> tuple[StandardScaler, GaussianMixture]:
        scaler = StandardScaler().fit(v)
        z = scaler.transform(v)
        best: tuple[float, GaussianMixture] | None = None
        for k in (k for k in (1, 2, 4, 8, 16) if k <= max(1, len(v) // 20)):
            for cov in ("full", "diag"):
                gm = GaussianMixture(k, covariance_type=cov, reg_covar=1e-4, random_state=self.seed).fit(z)
                bic = gm.bic(z)
                if best is None or bic < best[0]:
                    best = (bic, gm)
        assert best is not None
        self.chosen_ = {"n_components": best[1].n_components, "covariance_type": best[1].covariance_type}
        return scaler, best[1]

    @one_blas_thread
    def fit(self, v: np.ndarray) -> None:
        if not np.isfinite(v).all():
            raise RoseError("the in-distribution statistics are not finite")
        try:
            scaler, gm = (self._select_cv if self.selection == "cv" else self._select_bic)(v)
        except ValueError as exc:
            raise RoseError(f"the Gaussian mixture could not be fitted: {exc}") from None
        self.state_ = {
            k: torch.from_numpy(np.asarray(val, dtype=np.float64))
            for k, val in (
                ("mean", scaler.mean_),
                ("std", scaler.scale_),
                ("weights", gm.weights_),
                ("means", gm.means_),
                ("covariances", full_covariances(gm)),
            )
        }

    def __call__(self, v: np.ndarray) -> np.ndarray:
        s = {k: t.numpy() for k, t in self.state_.items()}
        return mixture_nll((v - s["mean"]) / s["std"], s["weights"], s["means"], s["covariances"])


def full_covariances(gm: GaussianMixture) -> np.ndarray:
    """A fitted mixture's covariances as (k, d, d) matrices, whatever its covariance type."""
    k, d = gm.means_.shape
    c = np.asarray(gm.covariances_)
    if gm.covariance_type == "full":
        return c
    if gm.covariance_type == "tied":
        return np.broadcast_to(c, (k, d, d)).copy()
    if gm.covariance_type == "diag":
        return np.stack([np.diag(row) for row in c])
    return c[:, None, None] * np.eye(d)  # spherical


class GaussianKDE:
    """−log density under a Gaussian kernel density estimate of one in-distribution statistic, with a
    fixed ``bandwidth`` in the statistic's own units (DiffPath-1D)."""

    least_images = 1

    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self.state_: dict[str, Tensor] = {}

    def fit(self, v: np.ndarray) -> None:
        if not np.isfinite(v).all():
            raise RoseError("the in-distribution statistics are not finite")
        self.state_ = {"points": torch.from_numpy(np.asarray(v, dtype=np.float64).reshape(-1))}

    def __call__(self, v: np.ndarray) -> np.ndarray:
        pts, h = self.state_["points"].numpy(), self.bandwidth
        d = (np.asarray(v, dtype=np.float64).reshape(-1, 1) - pts[None, :]) / h
        return -(logsumexp(-0.5 * d**2, axis=1) - np.log(len(pts) * h * np.sqrt(2 * np.pi)))


class DenoisingLoss(DiffusionDetector):
    """The diffusion model's own likelihood proxy: its denoising loss at the same K fixed (timestep,
    noise) pairs ROSE differentiates (with ``weighting="elbo"``, the DDPM variational bound on −log p(x)
    up to constants). The analogue of the paper's NLL baseline."""

    method = "denoising"
    ddpm_only = False  # the model's own per-image loss, whatever its objective

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
    density fitted on in-distribution images (DiffPath, MSMA); subclasses set ``density_``."""

    density_: MixtureDensity | GaussianKDE

    def statistics(self, x: Tensor) -> np.ndarray:
        """Per-image statistics (N, D) of validated images in [0, 1]."""
        raise NotImplementedError

    def _fit(self, x: Tensor) -> None:
        self.density_.fit(self.statistics(x))

    def _check_last_count(self, n: int) -> None:
        if n < self.density_.least_images:
            raise RoseError(
                f"{self.name}'s density needs at least {self.density_.least_images} in-distribution images, "
                f"got {n}"
            )

    def _score(self, x: Tensor) -> Tensor:
        return torch.from_numpy(self.density_(self.statistics(x)))

    def state(self) -> dict[str, Any]:
        return {"density": self.density_.state_}

    def load_state(self, state: dict[str, Any]) -> None:
        self.density_.state_ = dict(state["density"])


def fractional_timestep(alphas_cumprod: Tensor, alpha_bar: float) -> float:
    """The (fractional) timestep at which the schedule reaches ``alpha_bar``: the log-SNR
    log(ᾱ / (1 − ᾱ)) interpolated linearly between the integer timesteps around it."""
    a = alphas_cumprod.double().cpu()
    snr = (a / (1 - a)).log()
    target = float(np.log(alpha_bar / (1 - alpha_bar)))
    if not float(snr[-1]) <= target <= float(snr[0]):
        raise RoseError(
            f"noise level ᾱ = {alpha_bar:.6g} lies outside this model's schedule "
            f"(ᾱ from {float(a[-1]):.6g} to {float(a[0]):.6g})"
        )
    j = int((snr >= target).sum()) - 1  # the last timestep at or above the target log-SNR
    if j == len(a) - 1:
        return float(j)
    return j + float((snr[j] - target) / (snr[j] - snr[j + 1]))


class MSMA(StatisticDetector):
    """Multiscale score matching analysis (Mahmood et al., ICLR 2021): the σ-weighted norms ‖σ s(x, σ)‖
    of the model's score at ``levels`` noise levels σ, geometric from ``sigma_high`` to ``sigma_low``
    (in [0, 1] pixel units), evaluated at the image itself, with a Gaussian mixture (2–20 components,
    full covariance, 10-fold cross-validation) on them.

    On a VP diffusion model: x_t / √ᾱ_t = y + σ_y ε with σ_y² = (1 − ᾱ_t)/ᾱ_t, and the model's [-1, 1]
    images y = 2x − 1 double σ, so σ maps to ᾱ = 1/(1 + 4σ²), reached at a fractional timestep (log-SNR
    interpolated; the UNet takes float timesteps). The score in pixel units at the image x is
    s = −2√ᾱ ε̂(√ᾱ y, t)/√(1 − ᾱ) = −ε̂/σ, so ‖σ s‖ = ‖ε̂(√ᾱ y, t)‖."""

    method = "msma"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        levels: int = 10,
        sigma_low: float = 0.01,
        sigma_high: float = 1.0,
        density: str = "cv",
        batch_size: int = 64,
        progress: bool | None = None,
    ):
        super().__init__(model, batch_size=batch_size, progress=progress)
        if not 0 < sigma_low <= sigma_high:
            raise RoseError(f"msma needs 0 < sigma_low ≤ sigma_high, got {sigma_low}, {sigma_high}")
        self.levels = self._timesteps(levels, "levels")
        self.sigma_low, self.sigma_high, self.density = sigma_low, sigma_high, density
        self.density_ = MixtureDensity(
            components=tuple(range(2, 21, 2)), covariance_types=("full",), selection=density, max_iter=100
        )
        self.timesteps()  # a σ outside the model's schedule is refused here, not after a long fit

    @property
    def nfe_per_image(self) -> int:
        return self.levels

    def sigmas(self) -> np.ndarray:
        """The noise levels in [0, 1] pixel units, largest first (a latent model: in half the latents'
        units, as if they were images in [-1, 1])."""
        return np.exp(np.linspace(np.log(self.sigma_high), np.log(self.sigma_low), self.levels))

    def timesteps(self) -> list[tuple[float, float]]:
        """(ᾱ, fractional timestep) of each noise level on the model's schedule."""
        scale = 2.0  # [0, 1] pixel units in the UNet's [-1, 1]; a latent model's latents read as such
        out = []
        for sigma in self.sigmas():
            alpha_bar = 1.0 / (1.0 + (scale * sigma) ** 2)
            out.append((alpha_bar, fractional_timestep(self.model.alphas_cumprod, alpha_bar)))
        return out

    def statistics(self, x: Tensor) -> np.ndarray:
        levels = self.timesteps()

        def norms(b: Tensor) -> Tensor:
            cols = []
            for alpha_bar, t in levels:
                a = torch.full((b.shape[0],), alpha_bar, dtype=b.dtype, device=b.device)
                eps = self.model.eps(a.sqrt().view(-1, 1, 1, 1) * b, timestep_batch(b, t), alpha_bar=a)
                cols.append(eps.flatten(1).norm(dim=1))
            return torch.stack(cols, 1)

        return self._batched(x, norms, "MSMA score norms").numpy()


register_detector(DenoisingLoss)
register_detector(MSMA)
