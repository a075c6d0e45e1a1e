"""Run detectors side by side: fit on in-distribution training images, score test sets, collect metrics."""

from __future__ import annotations

import platform
import sys
import time
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roseood import __version__
from roseood.contracts import CountsEvaluations, Preprocessed, SharesFishers, rows_per_input
from roseood.data import ImageSet, dataset_spec, load_images, take
from roseood.data.jpeg import split_suffix
from roseood.data.loading import select
from roseood.data.preprocess import Preprocessing
from roseood.data.tensors import check_model_input
from roseood.detectors import METHODS, Detector, Ensemble, make_detector, method_params
from roseood.detectors.base import held_out_count, threshold_at
from roseood.errors import DataError, RoseError
from roseood.evaluation.cache import ResultCache, array_digest, cache_key
from roseood.evaluation.gallery import extremes
from roseood.evaluation.histories import compression_report, matched_sources, named_set, parse_match
from roseood.evaluation.result import EvaluationResult
from roseood.models.base import RoseModel, model_config, model_name
from roseood.models.checkpoint import model_fingerprint
from roseood.progress import duration, eta, forecast, note, resolve, stage, state
from roseood.validation import check_float, check_int, check_seed


@dataclass
class EvalSpec:
    """What to evaluate. ``fit_data`` defaults to the training split of the in-distribution set; a set
    without one (a folder, an ``.npz`` file) is split at random into fit, statistics and test images
    (``split_in_data``).

    ``layerwise``: ROSE methods return raw per-layer scores ``(N, layers)`` instead of one score per image
    (the paper's Figure 6). ``fit_draw``: the Fisher gets ``fit_samples`` images drawn at random (draw
    number ``fit_draw``) from the whole fit set while the ``stats_samples`` statistics images stay fixed
    (Figure 5's repeats; see ``sweep``). ``bootstrap``: resamples for every metric's 95 % interval
    over the test images (``EvaluationResult.add_intervals``); 0 for none. ``match_jpeg``: put every
    stored OOD set through a JPEG round-trip first, ``QUALITY[:SUBSAMPLING]`` or "auto" (the history found
    in the in-distribution test images; ``roseood.evaluation.histories``), so that the sets compared share
    their compression history; the sets are then named with it (``celeba+jpeg75``).
    """

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
    test_limits: dict[str, int] = field(default_factory=dict)  # method -> fewer test images (slow methods)
    overall_per_set: int = 1000  # images of each OOD set in "overall" (the paper: one thousand)
    layerwise: bool = False
    fit_draw: int | None = None
    bootstrap: int = 0
    match_jpeg: str | None = None

    def __post_init__(self) -> None:
        parse_match(self.match_jpeg)
        for name in ("fit_samples", "stats_samples", "test_samples", "batch_size", "overall_per_set"):
            check_int(getattr(self, name), name)
        check_int(self.bootstrap, "bootstrap", low=0)
        if self.bootstrap and self.layerwise:
            raise RoseError("bootstrap intervals are for one score per image, not layer-wise scores")
        check_seed(self.seed)
        check_float(self.brightness, "brightness", low=0.0, low_open=True)


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


def splits_in_data(spec: EvalSpec) -> bool:
    """Whether the fit images come out of the in-distribution set itself: no ``fit_data`` and no
    training split to fit on (a folder, an ``.npz`` file, a named set with a test split only)."""
    if spec.fit_data:
        return False
    named = dataset_spec(spec.in_data)
    return not (named is not None and "train" in named.splits)


def fit_source(spec: EvalSpec) -> str:
    """Where detectors are fitted: ``--fit-data``, else the training split of the in-distribution set."""
    if spec.fit_data:
        return spec.fit_data
    if splits_in_data(spec):
        raise DataError(
            f"{spec.in_data!r} has no training split to draw fit images from: name them with --fit-data"
        )
    return f"{spec.in_data.split(':')[0].lower().replace('-', '_')}:train"


def model_preprocessing(model: RoseModel) -> Preprocessing:
    """The preprocessing images get for ``model``: the one its checkpoint recorded (channels and size
    from its input shape, the resize method from ``model.preprocessing``; 1, 32, "crop" for a model that
    declares none). Models whose inputs are not images (named sets, folders) need the Python API."""
    shape = model.input_shape
    if model.input_kind != "image":
        raise DataError(
            f"this model takes {model.input_kind} inputs, not images: datasets and image files cannot "
            "feed it; fit and score it from Python (detector.fit(tensor), detector.score(tensor))"
        )
    recorded = model.preprocessing if isinstance(model, Preprocessed) else None
    resize = recorded.resize if isinstance(recorded, Preprocessing) else "crop"
    if shape is None:
        return Preprocessing(1, 32, resize)
    if len(shape) != 3 or shape[1] != shape[2] or shape[0] not in (1, 3):
        raise DataError(
            f"image sets are loaded as square (C, S, S) images with 1 or 3 channels; the model takes {shape}"
        )
    return Preprocessing(shape[0], shape[1], resize)


def _load(
    source: str, n: int | None, seed: int, model: RoseModel, spec: EvalSpec, brightness: float = 1.0
) -> ImageSet:
    """Load ``source`` with the model's preprocessing and state any conversion on stderr."""
    prep = model_preprocessing(model)
    images = load_images(
        source,
        n=n,
        seed=seed,
        channels=prep.channels,
        size=prep.size,
        resize=prep.resize,
        data_dir=spec.data_dir,
        brightness=brightness,
    )
    images.state_preprocessing()
    return images


def derived_seed(spec: EvalSpec, name: str) -> int:
    """The one seed policy: a seed for the named draw (an OOD set, a Fisher draw) from ``spec.seed`` and
    the name, not a position, so the same set gets the same images in every run and experiment (and
    cached scores are reused). A folder name that is not UTF-8 is hashed as its bytes."""
    return spec.seed + 1 + zlib.crc32(name.encode("utf-8", "surrogateescape")) % 100_000


def split_in_data(spec: EvalSpec, model: RoseModel, test: bool) -> tuple[ImageSet | None, ImageSet]:
    """The in-distribution set split at random (``derived_seed(spec, "split")``) into test images (with
    ``test``; ``test_samples``, at most a fifth) and fit images: Fisher images followed by the held-out
    statistics images, as ``fisher_count`` splits them. States the split in one line; each part keeps
    the set's file order."""
    n_test = spec.test_samples if test else 0
    pool = _load(spec.in_data, n_test + spec.fit_samples + spec.stats_samples, spec.seed, model, spec)
    n = len(pool)
    if test:
        n_test = min(n_test, n // 5)
        if n_test < 2:
            raise DataError(f"{pool.name} has {n} images: too few to split into fit and test images")
    order = np.random.default_rng(derived_seed(spec, "split")).permutation(n)
    n_fit = n - n_test
    n_stats = held_out_count(n_fit, spec.stats_samples)
    n_fisher = n_fit - n_stats
    parts = np.split(order, [n_test, n_test + n_fisher])
    test_set = select(pool, np.sort(parts[0]), f"{n_test} of {pool.source}") if test else None
    keep = np.concatenate([np.sort(parts[1]), np.sort(parts[2])])
    fit = select(pool, keep, f"{n_fit} of {pool.source}")
    tested = f", {n_test} to test" if test else ""
    state(
        f"{pool.name}: {n} images split at random (seed {spec.seed}): {n_fisher} to fit, {n_stats} held "
        f"out for statistics and the threshold{tested}"
    )
    return test_set, fit


def load_test_and_fit(spec: EvalSpec, model: RoseModel) -> tuple[ImageSet, ImageSet]:
    """The in-distribution test images and the fit images of an evaluation (see ``load_fit_images``)."""
    if splits_in_data(spec) and spec.fit_draw is None:
        test, fit = split_in_data(spec, model, test=True)
        assert test is not None
        return test, fit
    return _load(spec.in_data, spec.test_samples, spec.seed, model, spec), load_fit_images(spec, model)


def load_fit_images(spec: EvalSpec, model: RoseModel) -> ImageSet:
    """The images detectors are fitted on (Fisher samples followed by the ROSE statistics samples): from
    ``fit_data``, the in-distribution set's training split, or else all of the set, split at random."""
    if splits_in_data(spec) and spec.fit_draw is None:
        return split_in_data(spec, model, test=False)[1]
    if spec.fit_draw is None:
        return _load(fit_source(spec), spec.fit_samples + spec.stats_samples, spec.seed, model, spec)
    pool = _load(fit_source(spec), None, spec.seed, model, spec)
    order = np.random.default_rng(derived_seed(spec, "statistics")).permutation(len(pool))
    stats, rest = order[: spec.stats_samples], order[spec.stats_samples :]
    if spec.fit_samples > len(rest):
        raise DataError(f"{pool.name} has {len(rest)} images beside the statistics, not {spec.fit_samples}")
    draw = np.random.default_rng(derived_seed(spec, f"fit_draw:{spec.fit_draw}"))
    keep = np.concatenate([rest[draw.choice(len(rest), spec.fit_samples, replace=False)], stats])
    source = f"draw {spec.fit_draw} of {spec.fit_samples} (+ {spec.stats_samples} fixed) of {pool.source}"
    return replace(pool, images=pool.images[keep], labels=pool.labels[keep], source=source, files=None)


OVERALL = "overall"


def load_ood_sets(
    spec: EvalSpec, model: RoseModel, in_set: ImageSet | None = None
) -> tuple[dict[str, ImageSet], dict[str, str]]:
    """Load every OOD set but ``overall``, each through ``spec.match_jpeg``'s round-trip where one is
    asked for ("auto": the history of ``in_set``, the in-distribution test images); named sets whose files
    are absent become 'no data' entries."""
    sets: dict[str, ImageSet] = {}
    missing: dict[str, str] = {}
    if spec.match_jpeg is not None and in_set is None:
        raise RoseError("match_jpeg needs the in-distribution images to match the OOD sets to")
    sources = [s for s in spec.ood if s != OVERALL]
    if in_set is not None:
        sources = matched_sources(sources, spec.match_jpeg, in_set)
    for source in sources:
        base = split_suffix(source)[0]  # a matched set draws the images of the set as stored
        named = named_set(source) is not None
        try:
            sets[source] = _load(
                source, spec.test_samples, derived_seed(spec, base), model, spec, spec.brightness
            )
        except DataError as exc:
            if not named:
                raise
            missing[source] = str(exc)
            warnings.warn(f"{source}: no data ({exc})", stacklevel=3)  # shown once per message
    if not sets:
        raise DataError("none of the OOD sets could be loaded: " + "; ".join(missing.values()))
    return sets, missing


def overall_scores(
    scores: dict[str, np.ndarray], members: Sequence[str], per_set: int, seed: int
) -> np.ndarray:
    """The paper's "overall" OOD set (Section 5.1), scored without rescoring: ``per_set`` random images'
    scores of each member set, concatenated."""
    rng = np.random.default_rng(seed)
    parts = [scores[m][rng.permutation(len(scores[m]))[:per_set]] for m in members]
    return np.concatenate(parts)


def fisher_count(spec: EvalSpec, n_fit: int) -> int:
    """How many of the ``n_fit`` fit images every detector fits on; the rest (``stats_samples``, at most
    half, by the one split policy ``held_out_count``) are passed as ``held_out``. A ``fit_draw`` holds
    exactly ``fit_samples`` fit images followed by the statistics images."""
    if spec.fit_draw is not None:
        return spec.fit_samples
    return n_fit - held_out_count(n_fit, spec.stats_samples)


def pass_weight(detector: Detector, model: RoseModel) -> float:
    """A method's cost per image in the forecast's unit, one forward + backward pass of the model's
    per-image loss: a detector that counts its UNet evaluations (``nfe_per_image``, forward only) costs
    those over the loss's K rows at about three forward passes each (forward, then backward); 1 else."""
    if not isinstance(detector, CountsEvaluations):
        return 1.0
    return detector.nfe_per_image / (3 * rows_per_input(model))


def forecast_images(model: RoseModel, images: np.ndarray, passes: int, what: str, models: int = 1) -> None:
    """State what ``passes`` image passes (each image fitted on or scored, per method) will take here: one
    forward and backward pass of the model's per-image loss timed on a batch of ``images`` (after an
    untimed one), times ``passes`` and the ``models`` of an ensemble. A rough guide (methods differ:
    a likelihood needs no backward pass, ROSE's EKFAC fits in two passes); the global RNG is left as it was.
    """
    if not len(images):
        return
    loss = model.rose_loss
    device = next(model.parameters(), torch.empty(0)).device
    x = check_model_input(images, model).to(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        try:
            for batch in (x[:1], x):
                t0 = time.perf_counter()
                loss(batch).sum().backward()
                seconds = time.perf_counter() - t0
        except RuntimeError:  # no gradient to time (frozen weights): the run itself will say what is wrong
            return
        finally:
            for p in model.parameters():
                p.grad = None
    per_image = seconds / len(x)
    basis = f"{per_image * 1000:.3g} ms per image pass, timed on {len(x)}"
    forecast(what, per_image * passes * models, basis)


def _make(method: str, model: RoseModel, spec: EvalSpec, progress: bool | None) -> Detector:
    kwargs = spec.detector_kwargs.get(method, {})
    return make_detector(method, model, batch_size=spec.batch_size, progress=progress, **kwargs)


FittedFishers = dict[tuple[Any, ...], tuple[str, SharesFishers]]  # fisher_settings() -> (method, its ROSE)


def fit_detector(
    method: str,
    model: RoseModel | list[RoseModel],
    fit: ImageSet,
    spec: EvalSpec,
    progress: bool | None,
    fishers: FittedFishers | None = None,
) -> Detector:
    """Build and fit one detector on ``fit``, its tail passed as ``held_out`` (ROSE's layer statistics);
    a list of models: an ``Ensemble`` of one such detector per model. ``fishers``: the ROSE detectors
    fitted so far on these images; a ROSE with the same Fisher settings takes their Fishers instead of
    fitting its own, and a fresh fit is added."""
    det = (
        Ensemble([_make(method, m, spec, progress) for m in model], progress=progress)
        if isinstance(model, list)
        else _make(method, model, spec, progress)
    )
    n_fisher = fisher_count(spec, len(fit))
    held_out = fit.images[n_fisher:] if n_fisher < len(fit) else None
    if fishers is None or not isinstance(det, SharesFishers) or held_out is None:
        return det.fit(fit.images[:n_fisher], held_out=held_out)
    key = det.fisher_settings()
    source = fishers.get(key)
    if source is not None and resolve(progress):
        note(f"{method}: the Fishers fitted for {source[0]} (the same settings and images)")
    det.fit(fit.images[:n_fisher], held_out=held_out, fishers_from=source[1] if source else None)
    fishers.setdefault(key, (method, det))
    return det


@dataclass(frozen=True)
class FittedDetector:
    """A detector fitted and calibrated by ``fit_calibrated``, with the images it saw."""

    detector: Detector
    fit: ImageSet
    held_out: int  # the last ``held_out`` images of ``fit``: layer statistics and the threshold's sample


def fit_calibrated(
    method: str,
    model: RoseModel | list[RoseModel],
    spec: EvalSpec,
    tpr: float = 0.95,
    progress: bool | None = None,
) -> FittedDetector:
    """Fit ``method`` on the spec's fit images (``fit_samples`` + ``stats_samples``) and set its
    threshold so that a fraction ``tpr`` of the held-out images counts as in-distribution: what
    ``rose fit`` saves. A list of models: an ensemble of the method on each."""
    models = model if isinstance(model, list) else [model]
    _check_request(replace(spec, methods=[method]), models, tpr)
    fit = load_fit_images(spec, models[0])
    if resolve(progress):
        images = f"{len(fit)} images"
        sample = fit.images[: spec.batch_size]
        passes = 2 * len(fit) - fisher_count(spec, len(fit))  # fit, then score the held-out images
        forecast_images(models[0], sample, passes, f"fitting {method} on {images}", len(models))
    det = fit_detector(method, model, fit, spec, progress=progress)
    held_out = fit.images[fisher_count(spec, len(fit)) :]
    det.calibrate(held_out, tpr=tpr)
    return FittedDetector(det, fit, len(held_out))


def detector_params(method: str, spec: EvalSpec) -> dict[str, Any]:
    """The method's detector settings, defaults filled in, models as fingerprints: JSON-able."""
    params = method_params(method, batch_size=spec.batch_size, **spec.detector_kwargs.get(method, {}))
    return {k: model_fingerprint(v) if isinstance(v, RoseModel) else v for k, v in params.items()}


@dataclass
class _MethodRun:
    """One method's detector, fitted (or loaded from the cache) only when a score is actually missing."""

    method: str
    model: RoseModel | list[RoseModel]  # a list: an ensemble of the method's detector on each
    fit: ImageSet
    spec: EvalSpec
    progress: bool | None
    cache: ResultCache | None
    key: dict[str, Any]  # what determines the fitted detector: its cache key
    fishers: FittedFishers  # the ROSE Fishers fitted so far in this evaluation (shared by its runs)
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
        return fit_detector(self.method, self.model, self.fit, self.spec, self.progress, self.fishers)

    def _load(self, path: Path) -> Detector:
        kwargs = self.spec.detector_kwargs.get(self.method, {})
        extra = {name: kwargs.get(name) for name in METHODS[self.method].cls.extra_models}
        return Detector.load(path, self.model, **extra).show_progress(self.progress)

    def score(self, images: np.ndarray) -> tuple[np.ndarray, float]:
        """Scores of ``images`` (per layer with ``spec.layerwise``) and the seconds they took (cached: the
        seconds of the original run)."""
        layerwise = self.spec.layerwise

        def compute() -> np.ndarray:
            det = self.detector()
            torch.manual_seed(self.spec.seed)
            t0 = time.perf_counter()
            values = det.layer_scores(images).numpy() if layerwise else det.score(images)
            return np.append(values, time.perf_counter() - t0)

        if self.cache is None:
            out = compute()
        else:
            key = self.key | {"images": array_digest(images)} | ({"layerwise": True} if layerwise else {})
            out = self.cache.scores(cache_key(key), compute, None if layerwise else len(images) + 1)
        values = out[:-1].reshape(len(images), -1) if layerwise else out[:-1]
        return values, float(out[-1])

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
    _check_request(spec, models, tpr)
    progress = resolve(progress)
    first = models[0]  # the members take the same inputs (Ensemble checks): one set of images for all
    test, fit = load_test_and_fit(spec, first)
    ood, missing = load_ood_sets(spec, first, test)
    histories, mismatched = compression_report(test, ood)
    for line in mismatched:
        state(f"warning: {line}")
    ood_sets = {k: f"{len(v)} images from {v.source}" for k, v in ood.items()}
    if OVERALL in spec.ood:
        ood_sets[OVERALL] = f"{spec.overall_per_set} random images of each of: {', '.join(ood)}"
    detectors = {m: detector_params(m, spec) for m in spec.methods}
    fingerprint = "+".join(model_fingerprint(m) for m in models)
    settings = _settings(spec, models, fingerprint, test, fit, ood, ood_sets, detectors)
    settings["compression"] = histories
    result = EvaluationResult(in_name=spec.in_data, settings=settings, missing=missing)
    for name, images in {spec.in_data: test, **ood}.items():
        result.files[name], result.labels[name] = images.files, images.labels
    # what determines a fitted detector, for the cache (hashing the fit images only when there is one)
    fit_key = {"model": fingerprint, "n_fisher": fisher_count(spec, len(fit)), "seed": spec.seed}
    if cache is not None:
        fit_key["fit_images"] = array_digest(fit.images)
    if progress:
        _forecast(spec, models, fit, [test, *ood.values()])
    started = time.monotonic()
    fishers: FittedFishers = {}
    for i, method in enumerate(spec.methods):
        key = fit_key | {"method": method, "params": detectors[method]}
        run = _MethodRun(method, model, fit, spec, progress, cache, key, fishers)
        _evaluate_method(run, result, {spec.in_data: test, **ood}, examples, tpr)
        if progress and len(spec.methods) > 1:
            elapsed, left = (
                time.monotonic() - started,
                eta(i + 1, len(spec.methods), time.monotonic() - started),
            )
            note(
                f"{method} done: {i + 1}/{len(spec.methods)} methods in {duration(elapsed)}"
                + (f", {left} (if the rest take as long)" if left else "")
            )
    if spec.bootstrap:
        result.add_intervals(spec.bootstrap, spec.seed)
    return result


def _check_request(spec: EvalSpec, models: list[RoseModel], tpr: float | None) -> None:
    """Refuse, before any image is read, a request ``evaluate`` cannot answer."""
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
    for method in spec.methods:  # settings a model cannot take (rose-bands on a VAE) before any image
        for model in models:
            _make(method, model, spec, progress=False)


def _settings(
    spec: EvalSpec,
    models: list[RoseModel],
    fingerprint: str,
    test: ImageSet,
    fit: ImageSet,
    ood: dict[str, ImageSet],
    ood_sets: dict[str, str],
    detectors: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """What an evaluation ran on and with, printed and saved beside its numbers."""
    first = models[0]
    settings = {
        "model": model_name(first) if len(models) == 1 else f"ensemble of {len(models)} {model_name(first)}",
        "model_config": model_config(first),
        "model_fingerprint": fingerprint,
        "in_distribution": f"{test.name} ({len(test)} images from {test.source})",
        "fit_data": f"{fit.name} ({len(fit)} images: {fisher_count(spec, len(fit))} "
        f"for fitting, the rest for ROSE layer statistics)",
        "ood_sets": ood_sets,
        "preprocessing": model_preprocessing(first).describe(),
        "conversions": {s.name: s.conversion for s in (fit, test, *ood.values()) if s.conversion},
        "methods": list(spec.methods),
        "detectors": detectors,
        "seed": spec.seed,
        "brightness": spec.brightness,
        "machine": machine_description(),
    }
    if spec.test_limits:
        settings["test_limits"] = {m: f"at most {n} images per set" for m, n in spec.test_limits.items()}
    return settings


def _forecast(spec: EvalSpec, models: list[RoseModel], fit: ImageSet, tested: list[ImageSet]) -> None:
    """Say before any work how long the whole evaluation will take here (``forecast_images``)."""
    first = models[0]
    limits = [spec.test_limits.get(m) for m in spec.methods]
    sets = [len(s) for s in tested]
    scored = [sum(min(n, lim or n) for n in sets) for lim in limits]  # images each method scores
    detectors = [_make(m, first, spec, False) for m in spec.methods]
    weights = [pass_weight(d, first) for d in detectors]
    seen: set[tuple[Any, ...]] = set()
    for i, d in enumerate(detectors):  # a ROSE variant on an earlier one's Fishers reads its layer scores
        settings = d.score_settings() if isinstance(d, SharesFishers) else None
        if settings is not None:
            if settings in seen:
                weights[i] = 0.0
            seen.add(settings)
    passes = round(sum(w * (len(fit) + n) for w, n in zip(weights, scored, strict=True)))
    each = f"fitted on {len(fit)} images, {sum(scored) // len(limits)} scored"
    what = f"evaluating {len(spec.methods)} method{'s' if len(limits) > 1 else ''} ({each})"
    forecast_images(first, fit.images[: spec.batch_size], passes, what, len(models))


def _evaluate_method(
    run: _MethodRun,
    result: EvaluationResult,
    sets: dict[str, ImageSet],
    examples: int,
    tpr: float | None,
) -> None:
    """One method's scores of every set (and its threshold, examples and fit warnings) into ``result``."""
    method, spec, fit = run.method, run.spec, run.fit
    limit = spec.test_limits.get(method)
    scores = {}
    for name, images in sets.items():
        subset = take(images, limit, spec.seed) if limit else images
        with stage(f"{method} score {name}"):
            scores[name], seconds = run.score(subset.images)
        if name == spec.in_data:
            result.images_per_second[method] = len(subset) / max(seconds, 1e-9)
        if examples and not spec.layerwise:
            result.examples.setdefault(method, {})[name] = extremes(
                scores[name], subset.images.__getitem__, subset.files, examples
            )
    if tpr is not None:
        held_out = fit.images[fisher_count(spec, len(fit)) :]
        if not len(held_out):
            raise DataError(f"{fit.name}: no held-out images to set a decision threshold on")
        with stage(f"{method} threshold"):
            det, (held_scores, _) = run.detector(), run.score(held_out)
        det.threshold_ = result.thresholds[method] = threshold_at(held_scores, tpr)
        result.detectors[method] = det
    if OVERALL in spec.ood:  # the paper's sets: a matched twin (celeba+jpeg75 beside celeba) is not mixed in
        twin = {n for n in sets if split_suffix(n)[0] != n and split_suffix(n)[0] in sets}
        ood = [n for n in sets if n != spec.in_data and n not in twin]
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
    """``evaluate`` with ``spec.<field_name>`` set to each of ``values``; with ``repeats`` > 1, each value
    is run with ``fit_draw`` 0 … repeats − 1 (fresh random Fisher images, same statistics and test sets)."""
    draws = range(repeats) if repeats > 1 else [spec.fit_draw]
    return {
        v: [evaluate(model, replace(spec, **{field_name: v, "fit_draw": d}), progress, cache) for d in draws]
        for v in values
    }
