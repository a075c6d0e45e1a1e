"""How ROSE turns its per-layer scores (N, L) into one OOD score per image, and checks for degenerate fits.

Every aggregation is fitted on raw layer scores of held-out in-distribution images (ROSE's statistics
images, never the Fisher's) and then maps raw layer scores to one score (higher = more OOD):

- ``relu-norm`` (the paper, default): ``‖ReLU(ẑ + β)‖_p`` with ẑ the z-normalised layer scores;
  ``ties=max`` orders the images it maps to 0 (every layer at or below its mean − β) by their largest
  ẑ + β (≤ 0) instead of leaving them tied — the same order for every image scored above 0.
- ``max-z`` (the authors' notebook): ``max_l ẑ_l`` — no ReLU, so no ties at 0.
- ``log-z``: z-scores of log layer scores (layer scores are heavy-tailed); ``max`` for ``p = inf``,
  else ``‖ReLU(ẑ_log + β)‖_p``.
- ``two-sided``: ``‖ẑ_log‖_p`` — a layer counts whichever way the image moves it from in-distribution
  images: a simple image (a digit against CIFAR-10) moves many layers *less* than natural ones do. On the
  log scale, because a raw score is ≥ 0 and so cannot fall many deviations below its mean.
- ``gaussian``: −log density of the log layer-score vector under a Gaussian with Ledoit-Wolf shrinkage.
- ``gmm``: −log density under a small Gaussian mixture (``k`` components), in the spirit of DoSE.

``density_problem``, ``zscore_problem`` and ``tie_problem`` name what makes an aggregation's fit degenerate
(too few images, tied aggregated scores); ``roseood.detectors.rose.problems`` the layer scores' problems.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.covariance import LedoitWolf
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

from roseood.catalogue import DECISION_TPR
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import tensor
from roseood.registry import Registry
from roseood.validation import check_float, check_int, check_seed

TIE_RULES = ("keep", "max")  # relu-norm's images at 0: left tied (the paper), or ordered by max ẑ + β
MIN_LOG_SPREAD = 1e-2  # gmm:k=auto: the least std of a log column it models (1 % relative variation)


def log_scores(raw: np.ndarray) -> np.ndarray:
    """Log of layer scores (which are ≥ 0), with 0 mapped to the log of the smallest positive float."""
    return np.log(np.maximum(raw, np.finfo(np.float64).tiny))


def tie_share(scores: np.ndarray) -> float:
    """Share of scores that equal at least one other score exactly (0 for continuous scores)."""
    if len(scores) == 0:
        return 0.0
    _, counts = np.unique(scores, return_counts=True)
    return float(counts[counts > 1].sum() / len(scores))


class Aggregation(ABC):
    """Maps raw layer scores (N, L) to one score per image, after ``fit`` on in-distribution ones."""

    name: ClassVar[str]

    @abstractmethod
    def fit(self, raw: np.ndarray) -> None:
        """Learn from raw layer scores (N, L) of held-out in-distribution images."""

    @abstractmethod
    def __call__(self, raw: np.ndarray) -> np.ndarray:
        """One score per image (higher = more OOD), float64 (N,)."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Hyper-parameters (keyword arguments of the constructor)."""

    def least_images(self) -> tuple[int, str]:
        """The fewest images ``fit`` takes, and why: what a detector checks before any image is read."""
        return 2, "(a spread)"

    def check_count(self, n: int) -> None:
        """Refuse fitting on ``n`` images in one line when ``least_images`` says it needs more."""
        need, why = self.least_images()
        if n < need:
            raise RoseError(f"{self.short_name} needs at least {need} statistics images {why}, got {n}")

    @property
    def short_name(self) -> str:
        """How a refusal names it: ``name``, with ``k`` for a mixture."""
        return self.name

    @abstractmethod
    def state(self) -> dict[str, torch.Tensor]:
        """Fitted state as tensors (saved with the detector)."""

    @abstractmethod
    def load_state(self, state: dict[str, torch.Tensor], columns: int) -> None:
        """Restore what ``state()`` returned for ``columns`` layer-score columns (refusing other shapes)."""

    @property
    def spec(self) -> str:
        """``name:k=v,...`` — parsed back by ``make_aggregation``."""
        args = ",".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}:{args}" if args else self.name


class ZScore(Aggregation):
    """Shared code of relu-norm, max-z, log-z and two-sided: z-normalise (log) layer scores, then a norm or
    max of their positive part (``relu``), of themselves, or of their size (``two_sided``)."""

    log: ClassVar[bool] = False
    relu: ClassVar[bool] = True
    two_sided: ClassVar[bool] = False

    def __init__(self, beta: float | list[float] = 0.0, p: float = math.inf, ties: str = "keep") -> None:
        if not p >= 1:  # NaN too
            raise RoseError(f"p must be ≥ 1 (or inf), got {p}")
        if not all(math.isfinite(b) for b in (beta if isinstance(beta, list) else [beta])):
            raise RoseError(f"beta must be finite (a number or one number per layer), got {beta}")
        if ties not in TIE_RULES:
            raise RoseError(f"ties must be one of {', '.join(TIE_RULES)}, got {ties!r}")
        if isinstance(beta, list) and not beta:
            raise RoseError("beta: a number or one number per layer, got an empty list")
        self.beta, self.p, self.ties = beta, p, ties
        self.mean_: np.ndarray | None = None
        self.std_: np.ndarray | None = None

    def _check_beta(self, columns: int, error: type[RoseError]) -> None:
        """A list of β holds one value per layer-score column."""
        if isinstance(self.beta, list) and len(self.beta) != columns:
            raise error(f"beta: {len(self.beta)} values for {columns} layer-score columns")

    def _values(self, raw: np.ndarray) -> np.ndarray:
        return log_scores(raw) if self.log else raw

    def fit(self, raw: np.ndarray) -> None:
        self._check_beta(raw.shape[1], RoseError)
        v = torch.from_numpy(self._values(raw))  # torch's reductions: the same numbers as ROSE had before
        self.mean_, self.std_ = v.mean(0).numpy(), v.std(0).clamp_min(1e-12).numpy()

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """ẑ: (log) layer scores z-normalised with the fitted in-distribution mean and std, (N, L)."""
        if self.mean_ is None or self.std_ is None:
            raise RoseError(f"the {self.name} aggregation is not fitted")
        return (self._values(raw) - self.mean_) / self.std_

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        z = self.normalize(raw) + np.asarray(self.beta, dtype=np.float64)
        if not self.relu and not self.two_sided and math.isinf(self.p):  # max-z, log-z's max: no ties at 0
            return z.max(1)
        r = np.abs(z) if self.two_sided else np.maximum(z, 0.0)
        out = r.max(1) if math.isinf(self.p) else (r**self.p).sum(1) ** (1.0 / self.p)
        if self.ties == "max":  # images at 0 (every ẑ + β ≤ 0): ordered by their largest ẑ + β, kept ≤ 0
            out = np.where(out > 0, out, z.max(1))
        return out

    def params(self) -> dict[str, Any]:
        return {"beta": self.beta, "p": self.p, "ties": self.ties}

    def state(self) -> dict[str, torch.Tensor]:
        assert self.mean_ is not None and self.std_ is not None
        return {"mean": torch.from_numpy(self.mean_), "std": torch.from_numpy(self.std_)}

    def load_state(self, state: dict[str, torch.Tensor], columns: int) -> None:
        mean = tensor(state.get("mean"), "aggregation.mean", shape=(columns,), finite=False)
        std = tensor(state.get("std"), "aggregation.std", shape=(columns,))
        if bool(mean.isnan().any()) or not bool((std > 0).all()):
            raise CheckpointError("field 'aggregation.mean'/'std': NaN means or non-positive deviations")
        self._check_beta(columns, CheckpointError)
        self.mean_, self.std_ = mean.double().numpy(), std.double().numpy()


class ReluNorm(ZScore):
    """The paper's ``‖ReLU(ẑ + β)‖_p`` (default β = 0, p = ∞)."""

    name = "relu-norm"


class MaxZ(ZScore):
    """The authors' notebook: the plain maximum of ẑ over layers (no ReLU, so no ties at 0)."""

    name = "max-z"
    relu = False

    def __init__(self) -> None:
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {}


class LogZ(ZScore):
    """z-scores of log layer scores: max over layers (p = ∞) or ``‖ReLU(ẑ_log + β)‖_p``."""

    name = "log-z"
    log = True
    relu = False


class TwoSided(ZScore):
    """``‖ẑ_log‖_p`` (p = ∞: the largest |ẑ_log|): layers whose scores fall far *below* the in-distribution
    ones count as much as those far above."""

    name = "two-sided"
    log = True
    relu = False
    two_sided = True

    def __init__(self, p: float = math.inf) -> None:
        super().__init__(p=p)

    def params(self) -> dict[str, Any]:
        return {"p": self.p}


# numpy's and scipy's BLAS on one thread for the densities: their matrices are a few columns wide, where
# more threads only wait on each other (a gmm:k=auto fit and score of 500 + 300 images of 9 columns, 2-core
# AMD EPYC: 0.7-1.0 s with OpenBLAS's two threads and 0.3 s with one on idle cores, 20 s and 1 s beside
# other jobs)
one_blas_thread = threadpool_limits.wrap(limits=1, user_api="blas")


@one_blas_thread
def mixture_nll(v: np.ndarray, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> np.ndarray:
    """−log density of the rows of ``v`` (N, L) under a Gaussian mixture (k,), (k, L), (k, L, L)."""
    logp = np.stack(
        [
            np.log(w) + multivariate_normal(m, c, allow_singular=True).logpdf(v)
            for w, m, c in zip(weights, means, covariances, strict=True)
        ],
        axis=-1,
    ).reshape(len(v), -1)
    return -logsumexp(logp, axis=1)


class Density(Aggregation):
    """−log density of the log layer-score vector under a Gaussian mixture fitted on in-distribution
    images; ``_fit_mixture`` gives the weights (k,), means (k, L) and covariances (k, L, L)."""

    def __init__(self) -> None:
        self.weights_: np.ndarray | None = None
        self.means_: np.ndarray | None = None
        self.covariances_: np.ndarray | None = None

    @abstractmethod
    def _fit_mixture(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    @one_blas_thread
    def fit(self, raw: np.ndarray) -> None:
        v = log_scores(raw)
        if not np.isfinite(v).all():
            raise RoseError(
                f"the {self.name} aggregation cannot be fitted on non-finite layer scores; "
                "increase the damping or choose other layers"
            )
        self.weights_, self.means_, self.covariances_ = self._fit_mixture(v)

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        if self.weights_ is None or self.means_ is None or self.covariances_ is None:
            raise RoseError(f"the {self.name} aggregation is not fitted")
        return mixture_nll(log_scores(raw), self.weights_, self.means_, self.covariances_)

    def state(self) -> dict[str, torch.Tensor]:
        assert self.weights_ is not None and self.means_ is not None and self.covariances_ is not None
        return {
            "weights": torch.from_numpy(self.weights_),
            "means": torch.from_numpy(self.means_),
            "covariances": torch.from_numpy(self.covariances_),
        }

    def load_state(self, state: dict[str, torch.Tensor], columns: int) -> None:
        weights = tensor(state.get("weights"), "aggregation.weights", ndim=1)
        k = weights.shape[0]
        means = tensor(state.get("means"), "aggregation.means", shape=(k, columns))
        covariances = tensor(state.get("covariances"), "aggregation.covariances", shape=(k, columns, columns))
        if not bool((weights > 0).all()):
            raise CheckpointError("field 'aggregation.weights' must be positive")
        self.weights_, self.means_, self.covariances_ = (
            t.double().numpy() for t in (weights, means, covariances)
        )


class Gaussian(Density):
    """One Gaussian with Ledoit-Wolf shrinkage covariance (well-conditioned with few images)."""

    name = "gaussian"

    def _fit_mixture(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lw = LedoitWolf().fit(v)
        return np.ones(1), lw.location_[None], lw.covariance_[None]

    def params(self) -> dict[str, Any]:
        return {}


class GMM(Density):
    """A Gaussian mixture (``k`` full-covariance components, ``reg`` added to the diagonals). ``k="auto"``:
    on the standardised log scores (``reg`` then relative to each column's spread), the number of
    components (1 … ``max_k``) and the covariance (full or diagonal) that give each half of the statistics
    images the highest likelihood when fitted on the other half (two folds, split by ``seed``), refitted on
    all of them."""

    name = "gmm"
    MIN_AUTO = 20  # statistics images k="auto" needs: two halves of ten

    def __init__(self, k: int | str = 3, reg: float = 1e-3, seed: int = 0, max_k: int = 5) -> None:
        super().__init__()
        self.k: int | str = k if k == "auto" else check_int(k, "gmm k")
        self.reg = check_float(reg, "gmm reg", low=0.0)
        self.seed = check_seed(seed, "gmm seed")
        self.max_k = check_int(max_k, "gmm max_k")
        self.choice_: tuple[int, str] | None = None  # k="auto": the components and covariance chosen

    def _mixture(self, k: int, covariance: str, v: np.ndarray) -> GaussianMixture:
        gm = GaussianMixture(
            k, covariance_type=covariance, reg_covar=self.reg, random_state=self.seed, n_init=2
        )
        return gm.fit(v)

    @property
    def short_name(self) -> str:
        return f"{self.name}:k={self.k}"

    def least_images(self) -> tuple[int, str]:
        if self.k == "auto":
            return self.MIN_AUTO, "to choose its mixture by held-out likelihood"
        return 2 * int(self.k), "(two per component)"

    def _choose(self, v: np.ndarray) -> tuple[int, str]:
        """The (components, covariance) with the highest two-fold held-out log-likelihood."""
        self.check_count(len(v))
        order = np.random.default_rng(self.seed).permutation(len(v))
        halves = (order[: len(v) // 2], order[len(v) // 2 :])
        best, choice = -np.inf, (1, "full")
        for covariance in ("full", "diag"):
            for k in range(1, min(self.max_k, len(halves[0]) // 2) + 1):
                fits = [self._mixture(k, covariance, v[a]).score(v[b]) for a, b in (halves, halves[::-1])]
                if np.mean(fits) > best:
                    best, choice = float(np.mean(fits)), (k, covariance)
        return choice

    def _fit_mixture(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.k != "auto":
            k = int(self.k)
            self.check_count(len(v))
            gm = self._mixture(k, "full", v)
            return gm.weights_, gm.means_, gm.covariances_
        # reg is then relative to each column's spread, at least MIN_LOG_SPREAD: a column that barely
        # varies (a near-constant statistic) would otherwise give a covariance so thin that scipy's
        # density calls every other value impossible (an infinite score)
        centre, scale = v.mean(0), np.maximum(v.std(0), MIN_LOG_SPREAD)
        z = (v - centre) / scale
        self.choice_ = k, covariance = self._choose(z)
        gm = self._mixture(k, covariance, z)
        cov = gm.covariances_ if covariance == "full" else np.stack([np.diag(c) for c in gm.covariances_])
        # back to the log scores' own units: the same ranking (the density changes by a constant)
        return gm.weights_, centre + gm.means_ * scale, cov * scale[:, None] * scale[None, :]

    def params(self) -> dict[str, Any]:
        auto = {"max_k": self.max_k} if self.k == "auto" else {}  # max_k bounds the choice only
        return {"k": self.k, "reg": self.reg, "seed": self.seed, **auto}


AGGREGATIONS: Registry[str, type[Aggregation]] = Registry("aggregation")
for _aggregation in (ReluNorm, MaxZ, LogZ, TwoSided, Gaussian, GMM):
    AGGREGATIONS.register(_aggregation.name, _aggregation)


def _parse_value(text: str) -> Any:
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def make_aggregation(spec: str, **params: Any) -> Aggregation:
    """Build an aggregation from ``name[:k=v,...]`` (the CLI's ``--aggregate``) plus keyword ``params``."""
    name, _, args = spec.partition(":")
    cls = AGGREGATIONS.get(name)
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise RoseError(f"aggregation parameter {item!r} is not key=value (e.g. gmm:k=4)")
        params[key.strip()] = _parse_value(value.strip())
    # the constructor's own parameters (as detectors take theirs): params() leaves out what a default
    # instance does not use (a GMM's max_k, which bounds k="auto" only)
    accepted = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    unknown = [k for k in params if k not in accepted]
    if unknown:
        raise RoseError(
            f"aggregation {name!r} does not take {', '.join(unknown)}; its parameters: "
            f"{', '.join(accepted) or 'none'}"
        )
    try:
        return cls(**params)
    except (TypeError, ValueError, RoseError) as exc:
        raise RoseError(f"bad parameter for aggregation {name!r}: {exc}") from None


def threshold_at(held_out_scores: np.ndarray, tpr: float = DECISION_TPR) -> float:
    """The decision threshold that calls a fraction ``tpr`` of these held-out in-distribution scores
    in-distribution (at or below it): what ``Detector.calibrate`` sets."""
    tpr = check_float(tpr, "tpr", low=0.0, high=1.0, low_open=True)
    return float(np.quantile(held_out_scores, tpr, method="higher"))


def density_problem(values: np.ndarray, agg: Aggregation) -> list[str]:
    """A message when a density aggregation has as many columns as it has images to fit on, or more: a full
    covariance of L columns needs more than L images to be defined (GMM's k=auto fits on halves, so more
    than 2L), and a stable one about ten times L; else nothing."""
    if not isinstance(agg, Density):
        return []
    n, columns = values.shape
    need = 2 * columns + 2 if isinstance(agg, GMM) and agg.k == "auto" else columns + 1
    if n >= need:
        return []
    return [
        f"the {agg.name} density models {columns} columns from {n} statistics images: a full covariance "
        f"needs at least {need} ({10 * columns} for a stable one), so it rests on shrinkage or the diagonal; "
        "give more --stats-samples, or fewer columns (--layers, features=layers)"
    ]


MIN_ZSCORE_IMAGES = 20  # below this, the statistics images' own z-scores are bounded near the threshold


def zscore_problem(values: np.ndarray, agg: Aggregation) -> list[str]:
    """A message when a z-score aggregation is fitted on fewer than ``MIN_ZSCORE_IMAGES`` images: on n
    images no z-score exceeds (n − 1)/√n (1/√2 on two), so a threshold calibrated on them measures the
    count, not the data; else nothing."""
    n = len(values)
    if not isinstance(agg, ZScore) or n >= MIN_ZSCORE_IMAGES:
        return []
    bound = (n - 1) / math.sqrt(n) if n > 1 else 0.0
    return [
        f"{agg.name} z-normalises from {n} statistics images, whose own z-scores cannot exceed "
        f"(n − 1)/√n = {bound:.3g}: its threshold reflects the count, not the data; give at least "
        f"{MIN_ZSCORE_IMAGES} --stats-samples"
    ]


def tie_problem(raw: np.ndarray, layers: list[str], agg: Aggregation, tpr: float = DECISION_TPR) -> list[str]:
    """A message when the fitted ``agg`` gives several statistics images exactly the score at which the
    ``tpr`` decision threshold falls (e.g. ReLU zeros when over 1 − ``tpr`` of them are 0): a decision
    cannot tell those images apart. Ties below the threshold change no decision (every tied image is
    called in-distribution either way), so they are not reported; else nothing."""
    if not np.isfinite(raw).all():
        return []
    scores = agg(raw)
    threshold = threshold_at(scores, tpr)
    count = int((scores == threshold).sum())
    if count < 2:
        return []
    cause = ""
    if isinstance(agg, ZScore):
        below = (agg.normalize(raw) + np.asarray(agg.beta, dtype=np.float64) <= 0).mean(0)
        cause = f" (layer {layers[int(below.argmax())]} is below its mean − β on {below.max():.0%})"
    return [
        f"{count / len(scores):.0%} of the statistics images get tied ROSE scores ({count} at "
        f"{threshold:.3g}) with --aggregate {agg.spec}{cause}, and the {tpr:.0%}-TPR decision threshold "
        "falls on them: use --aggregate relu-norm:ties=max (orders the images at 0), max-z or log-z, or a "
        "larger beta (e.g. relu-norm:beta=3)"
    ]
