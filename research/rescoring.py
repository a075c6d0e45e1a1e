"""Fit a ROSE Fisher once, then re-score: the raw layer scores, losses and extra feature columns of any
image set, cached, so that aggregations, layer subsets and feature sets are compared without refitting
(``python -m research ablation``, ``near-ood`` and ``diffusion-defaults``). Each variant is a ROSE of its
settings whose statistics are fitted on the statistics images' columns by its own ``fit_columns`` (what
``fit_stats`` does once it has scored them) and that scores the other sets' columns by ``score_columns``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from roseood.data import load_images
from roseood.data.tensors import as_image_tensor
from roseood.detectors import ROSE
from roseood.detectors.features import COMPLEXITY_COLUMN
from roseood.errors import DegenerateFitWarning
from roseood.evaluation.cache import ResultCache, array_digest, cache_key
from roseood.evaluation.fishers import FisherPool
from roseood.evaluation.splits import EvalSpec, model_preprocessing
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint


@dataclass
class Columns:
    """One image set's raw layer scores (N, layers), the loss they differentiate (N,) and the extra
    feature columns (N, E) named ``extra_names``."""

    raw: np.ndarray
    loss: np.ndarray
    extra: np.ndarray
    extra_names: list[str]

    def features(self, features: str) -> np.ndarray:
        """The extra columns a ``ROSE(features=...)`` detector adds, in its order (none for ``layers``)."""
        return self.extra[:, self._kept(features)]

    def feature_names(self, features: str) -> list[str]:
        """The names of ``features(features)``'s columns."""
        return [self.extra_names[i] for i in self._kept(features)]

    def _kept(self, features: str) -> list[int]:
        wanted = set(features.split(","))
        return [i for i, name in enumerate(self.extra_names) if _feature_of(name) in wanted]


def fit_on_columns(det: ROSE, stats: Columns, keep: list[int] | None = None) -> ROSE:
    """``det`` with its statistics fitted on ``stats`` by its own ``fit_columns`` (every check and warning
    of ``fit``; the warnings kept in ``fit_warnings_``, not shown): how the bench compares ROSE settings on
    one scorer's columns. ``keep``: the raw columns ``det`` judges (its layers among the scorer's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateFitWarning)
        return det.fit_columns(*_parts(det, stats, keep), stats.feature_names(det.features))


def scores_on_columns(
    det: ROSE, sets: Mapping[str, Columns], keep: list[int] | None = None
) -> dict[str, np.ndarray]:
    """Each set's scores by ``det`` once ``fit_on_columns`` fitted it (``ROSE.score_columns``)."""
    return {name: det.score_columns(*_parts(det, c, keep)) for name, c in sets.items()}


def _parts(det: ROSE, c: Columns, keep: list[int] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``det`` judges of ``c``: the raw columns ``keep`` (all: None), the loss, its extra columns."""
    return (c.raw if keep is None else c.raw[:, keep]), c.loss, c.features(det.features)


def _feature_of(name: str) -> str:
    return "complexity" if name == COMPLEXITY_COLUMN else "stats"


@dataclass
class LayerScores:
    """``scorer(images)`` → ``Columns`` of one model and Fisher (fitted once, on ``fisher_images``, when a
    set's columns are not cached yet); ``features``: the extra columns to compute beside the layers;
    ``rows``: ``ROSE(rows=...)``; ``pool``: where its Fishers come from (unset: a pool of its own on
    ``cache``); scorers made from one by ``dataclasses.replace`` share its pool, so one with the same
    Fisher settings (another ``rows`` or ``features``) takes its Fishers instead of fitting them."""

    cache: ResultCache
    model: RoseModel
    fisher: str
    layers: list[str]
    fisher_images: np.ndarray
    batch_size: int = 64
    features: str = "layers"
    progress: bool = False
    rows: str = "sum"
    pool: FisherPool | None = field(default=None, repr=False)
    _det: ROSE | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.pool is None:
            self.pool = FisherPool(self.cache)

    def _key(self, what: str, images: np.ndarray) -> str:
        parts = {
            what: model_fingerprint(self.model),
            "fisher": self.fisher,
            "layers": self.layers,
            "fit_images": array_digest(self.fisher_images),
            "n_fisher": len(self.fisher_images),
            "images": array_digest(images),
        }
        return cache_key(parts | ({"rows": self.rows} if self.rows != "sum" else {}))

    def __call__(self, images: np.ndarray) -> Columns:
        key = self._key("ablation-layer-scores-and-loss", images)
        both = self.cache.arrays(key, ("scores", "loss"), lambda: self._compute(images), len(images))
        raw, loss = both["scores"], both["loss"]
        extra, names = np.empty((len(images), 0)), []
        if self.features != "layers":
            detector = self.detector(fit=False)
            names = detector.extra_features(self.as_tensor(images[:1]), self._loss_tensor(loss[:1]))[1]
            key = self._key(f"extra-columns:{self.features}", images)
            extra = self.cache.scores(
                key,
                lambda: detector.extra_features(self.as_tensor(images), self._loss_tensor(loss))[0],
                len(images),
            ).reshape(len(images), -1)
        return Columns(raw, loss, extra, names)

    def as_tensor(self, images: np.ndarray) -> Tensor:
        """``images`` as the model's float (N, C, H, W) input."""
        shape = self.model.input_shape
        assert shape is not None  # image models: (C, H, W)
        return as_image_tensor(images, shape[0], shape[1])

    @staticmethod
    def _loss_tensor(loss: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(loss))

    def detector(self, fit: bool = True) -> ROSE:
        """The ROSE whose Fisher gives the layer scores (fitted only when ``fit``: the extra columns need
        none) and whose ``features`` give the extra columns."""
        if self._det is None:
            self._det = ROSE(
                self.model,
                fisher=self.fisher,
                layers=self.layers,
                batch_size=self.batch_size,
                features=self.features,
                progress=self.progress,
                rows=self.rows,
            )
        if fit and self._det.fishers_ is None:
            assert self.pool is not None  # __post_init__ makes one
            images = self.as_tensor(self.fisher_images)
            self._det.fit_fisher(images, fishers=self.pool.fishers(self._det, images))
        return self._det

    def _compute(self, images: np.ndarray) -> dict[str, np.ndarray]:
        raw, loss = self.detector(fit=True).layer_scores_and_loss(images)
        return {"scores": raw.numpy(), "loss": loss.numpy()}


def in_test_images(spec: EvalSpec, model: RoseModel, data: str) -> np.ndarray:
    """``spec.test_samples`` images of ``data`` drawn with ``spec.seed`` from ``spec.data_dir``, as ``model``
    sees them: the in-distribution test set every research experiment scores beside its OOD sets."""
    options = model_preprocessing(model).options()
    return load_images(data, n=spec.test_samples, seed=spec.seed, data_dir=spec.data_dir, **options).images
