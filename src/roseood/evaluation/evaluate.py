"""Run detectors side by side: build each once, fit it on in-distribution images (the ROSE variants
sharing one Fisher fit), score the test sets and collect metrics. What the images are comes from
``roseood.evaluation.splits``; how long it will take, from ``roseood.evaluation.forecast``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roseood.catalogue import DECISION_TPR
from roseood.contracts import SharesFishers
from roseood.data import ImageSet, take
from roseood.data.jpeg import split_suffix
from roseood.detectors import METHODS, Detector, Ensemble, make_detector, method_params
from roseood.detectors.base import threshold_at
from roseood.errors import DataError, RoseError
from roseood.evaluation.cache import ResultCache, array_digest, cache_key
from roseood.evaluation.fishers import FisherPool
from roseood.evaluation.forecast import forecast_evaluation, forecast_fit
from roseood.evaluation.gallery import extremes
from roseood.evaluation.result import EvaluationResult
from roseood.evaluation.splits import (
    OVERALL,
    EvalSets,
    EvalSpec,
    FitImages,
    fisher_count,
    load_fit_images,
    load_sets,
    overall_scores,
)
from roseood.machine import machine_description
from roseood.models.base import RoseModel, model_config, model_name
from roseood.models.checkpoint import model_fingerprint
from roseood.progress import duration, eta, note, resolve, stage
from roseood.validation import check_int


def build_detectors(
    method: str, models: list[RoseModel], spec: EvalSpec, progress: bool | None
) -> list[Detector]:
    """``method``'s detector for each model with the spec's settings, unfitted: a setting a model cannot
    take (rose-bands on a VAE) is refused here, before any image is read."""
    kwargs = spec.detector_kwargs.get(method, {})
    return [make_detector(method, m, batch_size=spec.batch_size, progress=progress, **kwargs) for m in models]


def assembled(members: list[Detector], model: RoseModel | list[RoseModel], progress: bool | None) -> Detector:
    """The detector an evaluation fits: the one member, or for a list of models an ``Ensemble`` of them."""
    return Ensemble(members, progress=progress) if isinstance(model, list) else members[0]


def fit_detector(det: Detector, fit: FitImages, pool: FisherPool | None = None) -> Detector:
    """Fit a built detector on ``fit``'s Fisher images, its held-out ones passed as ``held_out`` (ROSE's
    layer statistics), and record how the Fisher images were stored (``fit_storage_``, saved with it).
    ``pool``: where a ROSE's Fishers come from, so the ROSE variants compared share one Fisher fit and
    one backward pass per image set."""
    held_out = fit.held_out if len(fit.held_out) else None
    if pool is None or not isinstance(det, SharesFishers) or held_out is None:
        det.fit(fit.fisher, held_out=held_out)
    else:
        det.fit(fit.fisher, held_out=held_out, fishers=pool.fishers(det, fit.fisher))
    det.fit_storage_ = fit.storage
    return det


@dataclass(frozen=True)
class FittedDetector:
    """A detector fitted and calibrated by ``fit_calibrated``, with the images it saw."""

    detector: Detector
    fit: FitImages


def fit_calibrated(
    method: str,
    model: RoseModel | list[RoseModel],
    spec: EvalSpec,
    tpr: float = DECISION_TPR,
    progress: bool | None = None,
) -> FittedDetector:
    """Fit ``method`` on the spec's fit images (``fit_samples`` + ``stats_samples``) and set its
    threshold so that a fraction ``tpr`` of the held-out images counts as in-distribution: what
    ``rose fit`` saves. A list of models: an ensemble of the method on each."""
    models = model if isinstance(model, list) else [model]
    members = check_request(replace(spec, methods=[method]), models, tpr, progress)[method]
    det = assembled(members, model, progress)
    fit = load_fit_images(spec, models[0])
    if resolve(progress):
        what = f"fitting {method} on {len(fit.whole)} images"
        sample = fit.whole.images[: spec.batch_size]
        forecast_fit(members[0], len(models), sample, len(fit.fisher), len(fit.held_out), what)
    fit_detector(det, fit)
    det.calibrate(None if det.held_out_scores_ is not None else fit.held_out, tpr=tpr)
    return FittedDetector(det, fit)


def detector_params(method: str, spec: EvalSpec) -> dict[str, Any]:
    """The method's detector settings, defaults filled in, models as fingerprints: JSON-able."""
    params = method_params(method, batch_size=spec.batch_size, **spec.detector_kwargs.get(method, {}))
    return {k: model_fingerprint(v) if isinstance(v, RoseModel) else v for k, v in params.items()}


@dataclass
class _MethodRun:
    """One method's detector, fitted (or loaded from the cache) only when a score is actually missing."""

    method: str
    model: RoseModel | list[RoseModel]  # a list: an ensemble of the method's detector on each
    fit: FitImages
    spec: EvalSpec
    progress: bool | None
    cache: ResultCache | None
    key: dict[str, Any]  # what determines the fitted detector: its cache key
    pool: FisherPool  # the ROSE Fishers of this evaluation (shared by its runs, kept in its cache)
    built: Detector  # unfitted; fitted only when the cache has no fitted one
    _det: Detector | None = None

    def detector(self) -> Detector:
        if self._det is None:
            torch.manual_seed(self.spec.seed)
            with stage(f"{self.method} fit"):
                if self.cache is None:
                    self._det = self._build()
                else:
                    self._det = self.cache.detector(cache_key(self.key), self._load, self._build)
        return self._det

    def _build(self) -> Detector:
        return fit_detector(self.built, self.fit, self.pool)

    def _load(self, path: Path) -> Detector:
        kwargs = self.spec.detector_kwargs.get(self.method, {})
        extra = {name: kwargs.get(name) for name in METHODS[self.method].cls.extra_models}
        return Detector.load(path, self.model, **extra).show_progress(self.progress)

    def score(self, images: np.ndarray, digest: str | None = None) -> tuple[np.ndarray, float]:
        """Scores of ``images`` (per layer with ``spec.layerwise``) and the seconds they took (cached: the
        seconds of the original run, under ``digest``, the images' own unless given)."""
        layerwise = self.spec.layerwise

        def compute() -> dict[str, np.ndarray]:
            det = self.detector()
            torch.manual_seed(self.spec.seed)
            t0 = time.perf_counter()
            values = det.layer_scores(images).numpy() if layerwise else det.score(images)
            return {"scores": values, "seconds": np.array(time.perf_counter() - t0)}

        if self.cache is None:
            out = compute()
        else:
            key = self._scores_key(images, digest)
            out = self.cache.arrays(key, ("scores", "seconds"), compute, len(images))
        return out["scores"], float(out["seconds"])

    def _scores_key(self, images: np.ndarray, digest: str | None = None) -> str:
        """The cache key of this method's scores of ``images`` (digest: theirs unless given)."""
        layerwise = {"layerwise": True} if self.spec.layerwise else {}
        return cache_key(self.key | {"images": digest or array_digest(images)} | layerwise)

    def scored(
        self, sets: dict[str, ImageSet], digests: dict[str, str]
    ) -> dict[str, tuple[ImageSet, str | None]]:
        """Each set as this method scores it, with the digest its scores are stored under (None: the
        images' own): a seeded subset where the method has a test limit, else the set itself."""
        limit = self.spec.test_limits.get(self.method)
        if limit:
            return {name: (take(s, limit, self.spec.seed), None) for name, s in sets.items()}
        return {name: (s, digests.get(name)) for name, s in sets.items()}

    def cached(self, scored: dict[str, tuple[ImageSet, str | None]], tpr: float | None) -> bool:
        """Whether the cache holds every score ``_evaluate_method`` will ask for on ``scored`` (so nothing
        is fitted or scored: the forecast leaves the method out)."""
        if self.cache is None:
            return False
        asked = [self._scores_key(s.images, digest) for s, digest in scored.values()]
        if tpr is not None:
            asked.append(self._scores_key(self.fit.held_out))
        return all(self.cache.has_scores(key) for key in asked)

    def fit_warnings(self) -> list[str]:
        """The detector's degenerate-fit warnings (kept in its saved state, so cached runs have them; an
        ensemble's, per member), for detectors that report them (others are not even loaded)."""
        if not METHODS[self.method].cls.reports_fit_warnings:
            return []
        return self.detector().fit_warnings_


def evaluate(
    model: RoseModel | list[RoseModel],
    spec: EvalSpec,
    progress: bool | None = None,
    cache: ResultCache | None = None,
    examples: int = 0,
    tpr: float | None = None,
) -> EvaluationResult:
    """Fit each method on in-distribution training images and score the in-distribution test set and
    every OOD set with the same images and seeds. A list of models: each method as an ``Ensemble`` of
    its detector on every model (e.g. one model per training seed).

    ``tpr``: also calibrate each detector as ``rose fit`` does (a fraction ``tpr`` of the held-out
    statistics images at or below its threshold) and keep it in ``result.detectors``, its threshold in
    ``result.thresholds``: per-image decisions (``write_decisions``) and a detector to save.

    ``spec.test_limits`` gives slow methods a seeded subset of each test set. ``progress`` reports one
    bar per stage (fit, each set's scoring) on a terminal, periodic lines in a log (unset: on a
    terminal). With a ``cache``, fitted detectors and scores are stored as they are made and reused, so
    a re-run after an interruption only computes what is missing. ``examples``: keep each set's
    ``examples`` most and least OOD images per method in ``result.examples`` (for
    ``write_evaluation_page``).
    """
    models = model if isinstance(model, list) else [model]
    progress = resolve(progress)
    built = check_request(spec, models, tpr, progress)
    first = models[0]  # the members take the same inputs (Ensemble checks): one set of images for all
    loaded = load_sets(spec, first)
    test, fit, ood = loaded.test, loaded.fit, loaded.ood
    result = _new_result(spec, models, loaded)
    # what determines a fitted detector, for the cache (hashing the fit images only when there is one)
    fingerprint = result.settings["model_fingerprint"]
    fit_key = {"model": fingerprint, "n_fisher": len(fit.fisher), "seed": spec.seed}
    if cache is not None:
        fit_key["fit_images"] = array_digest(fit.whole.images)
    sets = {spec.in_data: test, **ood}
    digests = {name: array_digest(s.images) for name, s in sets.items()} if cache is not None else {}
    started = time.monotonic()
    pool = FisherPool(cache, [d for members in built.values() for d in members])
    runs: list[_MethodRun] = []
    for method in spec.methods:
        key = fit_key | {"method": method, "params": result.settings["detectors"][method]}
        det = assembled(built[method], model, progress)
        runs.append(_MethodRun(method, model, fit, spec, progress, cache, key, pool, det))
    scored = {r.method: r.scored(sets, digests) for r in runs}
    planned = None
    if progress:  # what the cache already holds takes no time: those methods are left out
        pending = {r.method: built[r.method][0] for r in runs if not r.cached(scored[r.method], tpr)}
        if pending:
            planned = forecast_evaluation(spec, models, pending, fit, [test, *ood.values()])
    said = None if planned is None else (planned, time.monotonic())  # its timed batch not counted
    for i, (method, run) in enumerate(zip(spec.methods, runs, strict=True)):
        _evaluate_method(run, result, scored[method], examples, tpr)
        if progress and len(spec.methods) > 1:
            note(_done_line(method, i + 1, len(spec.methods), started, said))
    if spec.bootstrap:
        result.add_intervals(spec.bootstrap, spec.seed)
    return result


def _done_line(method: str, done: int, total: int, started: float, said: tuple[float, float] | None) -> str:
    """The line after the ``done``-th of ``total`` methods: the time so far and what is left, counted down
    from the forecast where one was ``said`` (its seconds, and when the work began: the methods share
    Fisher passes, so they cost unlike), else from the rate so far."""
    elapsed = time.monotonic() - started
    line = f"{method} done: {done}/{total} methods in {duration(elapsed)}"
    if done == total:
        return line
    if said is None:
        left = eta(done, total, elapsed)
        return f"{line}, {left} (if the rest take as long)" if left else line
    rest = said[0] - (time.monotonic() - said[1])
    return f"{line}, ≈ {duration(rest)} left by the forecast" if rest > 0 else line


def check_request(
    spec: EvalSpec, models: list[RoseModel], tpr: float | None, progress: bool | None
) -> dict[str, list[Detector]]:
    """Refuse, before any image is read, a request ``evaluate`` cannot answer; else each method's
    detector for each model, built once (unfitted)."""
    if not spec.methods:
        raise RoseError("no methods given")
    unknown = [m for m in spec.methods if m not in METHODS]
    if unknown:
        raise RoseError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    if spec.layerwise and not all(METHODS[m].cls.layerwise for m in spec.methods):
        raise RoseError("layer-wise scores exist for ROSE methods only")
    if not models:
        raise RoseError("no model given")
    if len(models) > 1 and spec.layerwise:
        raise RoseError("an ensemble has no layer-wise scores")
    if tpr is not None and spec.layerwise:
        raise RoseError("a decision threshold is for one score per image, not layer-wise scores")
    built = {method: build_detectors(method, models, spec, progress) for method in spec.methods}
    asked = spec.fit_samples + spec.stats_samples
    for det in (d for members in built.values() for d in members):
        det.check_counts(fisher_count(spec, asked), asked - fisher_count(spec, asked))
    return built


def _new_result(spec: EvalSpec, models: list[RoseModel], loaded: EvalSets) -> EvaluationResult:
    """An empty result with the evaluation's settings, and the test sets' file names and labels."""
    test, ood = loaded.test, loaded.ood
    ood_sets = {k: f"{len(v)} images from {v.source}" for k, v in ood.items()}
    if OVERALL in spec.ood:
        ood_sets[OVERALL] = f"{spec.overall_per_set} random images of each of: {', '.join(ood)}"
    detectors = {m: detector_params(m, spec) for m in spec.methods}
    fingerprint = "+".join(model_fingerprint(m) for m in models)
    settings = _settings(spec, models, fingerprint, loaded, ood_sets, detectors)
    settings["compression"] = loaded.compression
    result = EvaluationResult(in_name=spec.in_data, settings=settings, missing=loaded.missing)
    for name, images in {spec.in_data: test, **ood}.items():
        result.files[name], result.labels[name] = images.files, images.labels
    return result


def _settings(
    spec: EvalSpec,
    models: list[RoseModel],
    fingerprint: str,
    loaded: EvalSets,
    ood_sets: dict[str, str],
    detectors: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """What an evaluation ran on and with, printed and saved beside its numbers."""
    first, test, fit, ood = models[0], loaded.test, loaded.fit, loaded.ood
    settings = {
        "model": model_name(first) if len(models) == 1 else f"ensemble of {len(models)} {model_name(first)}",
        "model_config": model_config(first),
        "model_fingerprint": fingerprint,
        "in_distribution": f"{test.name} ({len(test)} images from {test.source})",
        "fit_data": f"{fit.whole.name} ({len(fit.whole)} images: {len(fit.fisher)} "
        f"for fitting, the rest for ROSE layer statistics)",
        "ood_sets": ood_sets,
        "preprocessing": loaded.preprocessing.describe(),
        "conversions": {s.name: s.conversion for s in (fit.whole, test, *ood.values()) if s.conversion},
        "methods": list(spec.methods),
        "detectors": detectors,
        "seed": spec.seed,
        "brightness": spec.brightness,
        "machine": machine_description(),
    }
    if spec.test_limits:
        settings["test_limits"] = {m: f"at most {n} images per set" for m, n in spec.test_limits.items()}
    return settings


def _evaluate_method(
    run: _MethodRun,
    result: EvaluationResult,
    scored: dict[str, tuple[ImageSet, str | None]],
    examples: int,
    tpr: float | None,
) -> None:
    """One method's scores of every set (and its threshold, examples and fit warnings) into ``result``;
    ``scored``: each set as the method scores it, with its digest (``_MethodRun.scored``)."""
    method, spec = run.method, run.spec
    scores = {}
    for name, (subset, digest) in scored.items():
        with stage(f"{method} score {name}"):
            scores[name], seconds = run.score(subset.images, digest)
        if name == spec.in_data:
            result.images_per_second[method] = len(subset) / max(seconds, 1e-9)
        if examples and not spec.layerwise:
            result.examples.setdefault(method, {})[name] = extremes(
                scores[name], subset.images.__getitem__, subset.files, examples
            )
    if tpr is not None:
        held_out = run.fit.held_out
        if not len(held_out):
            raise DataError(f"{run.fit.whole.name}: no held-out images to set a decision threshold on")
        with stage(f"{method} threshold"):
            det, (held_scores, _) = run.detector(), run.score(held_out)
        det.threshold_ = result.thresholds[method] = threshold_at(held_scores, tpr)
        result.detectors[method] = det
    if OVERALL in spec.ood:  # the paper's sets: a matched twin (celeba+jpeg75 beside celeba) is not mixed in
        twin = {n for n in scored if split_suffix(n)[0] != n and split_suffix(n)[0] in scored}
        ood = [n for n in scored if n != spec.in_data and n not in twin]
        scores[OVERALL] = overall_scores(scores, ood, spec.overall_per_set, spec.seed)
    result.scores[method] = scores
    if warned := run.fit_warnings():
        result.settings.setdefault("fit_warnings", {})[method] = warned


def sweep(
    model: RoseModel,
    spec: EvalSpec,
    field_name: str,
    values: Sequence[Any],
    repeats: int = 1,
    progress: bool | None = None,
    cache: ResultCache | None = None,
) -> dict[Any, list[EvaluationResult]]:
    """``evaluate`` with ``spec.<field_name>`` set to each of ``values``, each run with ``fit_draw``
    0 … repeats − 1 (fresh random Fisher images, same statistics and test sets): one draw too, so a
    Fisher-size sweep fits on the asked count, not on the usual split of fit and statistics images."""
    check_int(repeats, "repeats")
    return {
        v: [
            evaluate(model, replace(spec, **{field_name: v, "fit_draw": d}), progress, cache)
            for d in range(repeats)
        ]
        for v in values
    }
