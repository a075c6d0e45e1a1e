"""Run detectors side by side: fit on in-distribution training images, score test sets, collect metrics."""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roseood import __version__
from roseood.data import DATASETS, ImageSet, load_images
from roseood.detectors import METHODS, Detector, make_detector
from roseood.errors import DataError, RoseError
from roseood.evaluation.result import EvaluationResult
from roseood.models.base import GenerativeModel
from roseood.models.checkpoint import model_fingerprint


@dataclass
class EvalSpec:
    """What to evaluate. ``fit_data`` defaults to the training split of the in-distribution set."""

    in_data: str
    ood: Sequence[str]
    methods: Sequence[str]
    fit_data: str | None = None
    fit_samples: int = 10000
    stats_samples: int = 2000
    test_samples: int = 5000
    seed: int = 2021
    data_dir: str | Path | None = None
    batch_size: int = 64
    brightness: float = 1.0
    detector_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)


def machine_description() -> dict[str, Any]:
    """Versions and hardware, printed next to every number we report."""
    return {
        "roseood": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }


def fit_source(spec: EvalSpec) -> str:
    """Where detectors are fitted: ``--fit-data``, else the training split of the in-distribution set."""
    if spec.fit_data:
        return spec.fit_data
    name = spec.in_data.split(":")[0].lower().replace("-", "_")
    if name in DATASETS and "train" in DATASETS[name].splits:
        return f"{name}:train"
    raise DataError(
        f"{spec.in_data!r} is not a named dataset with a training split: "
        "name the images to fit on with --fit-data"
    )


def _load(
    source: str, n: int, seed: int, model: GenerativeModel, spec: EvalSpec, brightness: float = 1.0
) -> ImageSet:
    return load_images(
        source,
        n=n,
        seed=seed,
        channels=model.in_channels,
        size=model.image_size,
        data_dir=spec.data_dir,
        brightness=brightness,
    )


def load_fit_images(spec: EvalSpec, model: GenerativeModel) -> ImageSet:
    """The images detectors are fitted on (Fisher samples followed by the ROSE statistics samples)."""
    return _load(fit_source(spec), spec.fit_samples + spec.stats_samples, spec.seed, model, spec)


def load_ood_sets(spec: EvalSpec, model: GenerativeModel) -> tuple[dict[str, ImageSet], dict[str, str]]:
    """Load every OOD set; named sets whose files are absent become 'no data' entries, not errors."""
    sets: dict[str, ImageSet] = {}
    missing: dict[str, str] = {}
    for i, source in enumerate(spec.ood):
        named = source.split(":")[0].lower().replace("-", "_") in DATASETS
        try:
            sets[source] = _load(source, spec.test_samples, spec.seed + 1 + i, model, spec, spec.brightness)
        except DataError as exc:
            if not named:
                raise
            missing[source] = str(exc)
            print(f"warning: {source}: no data ({exc})", file=sys.stderr)
    if not sets:
        raise DataError("none of the OOD sets could be loaded: " + "; ".join(missing.values()))
    return sets, missing


def fisher_count(spec: EvalSpec, n_fit: int) -> int:
    """How many of the ``n_fit`` fit images go to the Fisher; the rest (at most half) to ROSE statistics."""
    return n_fit - min(spec.stats_samples, n_fit // 2)


def fit_detector(
    method: str, model: GenerativeModel, fit: ImageSet, spec: EvalSpec, progress: bool
) -> Detector:
    """Build and fit one detector; ROSE gets its layer statistics from the held-out tail of ``fit``."""
    det = make_detector(
        method, model, batch_size=spec.batch_size, progress=progress, **spec.detector_kwargs.get(method, {})
    )
    n_fisher = fisher_count(spec, len(fit))
    if method.startswith("rose"):
        det.fit(fit.images[:n_fisher], stats_images=fit.images[n_fisher:])  # type: ignore[call-arg]
    else:
        det.fit(fit.images)
    return det


def evaluate(model: GenerativeModel, spec: EvalSpec, progress: bool = True) -> EvaluationResult:
    """Fit each method on in-distribution training images and score the in-distribution test set and
    every OOD set with the same images and seeds."""
    if not spec.methods:
        raise RoseError("no methods given")
    unknown = [m for m in spec.methods if m not in METHODS]
    if unknown:
        raise RoseError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    test = _load(spec.in_data, spec.test_samples, spec.seed, model, spec)
    fit = load_fit_images(spec, model)
    ood, missing = load_ood_sets(spec, model)
    settings = {
        "model": model.kind,
        "model_config": model.config(),
        "model_fingerprint": model_fingerprint(model),
        "in_distribution": f"{test.name} ({len(test)} images from {test.source})",
        "fit_data": f"{fit.name} ({len(fit)} images: {fisher_count(spec, len(fit))} "
        f"for fitting, the rest for ROSE layer statistics)",
        "ood_sets": {k: f"{len(v)} images from {v.source}" for k, v in ood.items()},
        "methods": list(spec.methods),
        "seed": spec.seed,
        "brightness": spec.brightness,
        "machine": machine_description(),
    }
    result = EvaluationResult(in_name=spec.in_data, settings=settings, missing=missing)
    for method in spec.methods:
        torch.manual_seed(spec.seed)
        det = fit_detector(method, model, fit, spec, progress)
        t0 = time.perf_counter()
        scores = {spec.in_data: det.score(test.images)}
        result.images_per_second[method] = len(test) / (time.perf_counter() - t0)
        for name, s in ood.items():
            scores[name] = det.score(s.images)
        result.scores[method] = {k: np.asarray(v) for k, v in scores.items()}
    return result
