"""What an evaluation runs on: its request (``EvalSpec``) and the images it draws from it: the fit images
(Fisher images, then the held-out statistics images), the in-distribution test images and the OOD sets,
each with the model's preprocessing and a seed derived from its name."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from roseood.contracts import Preprocessed
from roseood.data import ImageSet, load_images
from roseood.data.jpeg import Storage
from roseood.data.loading import select
from roseood.data.preprocess import Preprocessing
from roseood.data.registry import locate, split_of
from roseood.detectors.base import held_out_count
from roseood.errors import DataError, RoseError
from roseood.evaluation.histories import compression_report, ood_sources, parse_match, storage_of
from roseood.evaluation.metrics import INTERVAL_MIN_SCORES
from roseood.models.base import RoseModel
from roseood.progress import state
from roseood.validation import check_float, check_int, check_seed


@dataclass
class EvalSpec:
    """What to evaluate. ``fit_data`` defaults to the training split of the in-distribution set; a set
    without one (a folder, an ``.npz`` file) is split at random into fit, statistics and test images
    (``load_sets``).

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
        for i, name in enumerate(self.ood):  # results are keyed by these names: one set would hide another
            if name == self.in_data:
                raise DataError(f"OOD set {name!r} is the in-distribution set itself: name another set")
            if name in self.ood[:i]:
                raise DataError(f"OOD set {name!r} is named twice")
        if OVERALL in self.ood and len(self.ood) == 1:
            raise DataError(f"{OVERALL!r} mixes the other OOD sets: name one beside it (mnist,overall)")
        for source in (self.in_data, self.fit_data, *self.ood):  # a bad split or class selection: before work
            if source:
                locate(source, data_dir=self.data_dir)
        for name in ("fit_samples", "stats_samples", "test_samples", "batch_size", "overall_per_set"):
            check_int(getattr(self, name), name)
        if self.test_samples < INTERVAL_MIN_SCORES:  # a metric of one image a set: no spread, no interval
            raise DataError(
                f"test_samples: at least {INTERVAL_MIN_SCORES} test images a set, got {self.test_samples}"
            )
        check_int(self.bootstrap, "bootstrap", low=0)
        if self.bootstrap and self.layerwise:
            raise RoseError("bootstrap intervals are for one score per image, not layer-wise scores")
        check_seed(self.seed)
        check_float(self.brightness, "brightness", low=0.0, low_open=True)


def _fit_origin(spec: EvalSpec) -> str | None:
    """Where the fit images come from: ``fit_data``, else the in-distribution set's training split (of
    the same classes, ``fashion_mnist:train@7``); None where there is neither (a folder, an ``.npz``
    file, a named set with a test split only)."""
    return spec.fit_data or split_of(spec.in_data, "train")


def splits_in_data(spec: EvalSpec) -> bool:
    """Whether the fit images come out of the in-distribution set itself: no ``fit_data`` and no
    training split to fit on."""
    return _fit_origin(spec) is None


def fit_source(spec: EvalSpec) -> str:
    """Where detectors are fitted: ``--fit-data``, else the training split of the in-distribution set."""
    source = _fit_origin(spec)
    if source is None:
        raise DataError(
            f"{spec.in_data!r} has no training split to draw fit images from: name them with --fit-data"
        )
    return source


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


@dataclass(frozen=True)
class _Wanted:
    """One set to load: ``n`` images (None: all) of ``source`` drawn with ``seed``; ``named``: an OOD set
    whose absent files make a 'no data' entry instead of an error."""

    source: str
    n: int | None
    seed: int
    brightness: float = 1.0
    named: bool = False


def _load_all(
    spec: EvalSpec, prep: Preprocessing, wanted: Sequence[_Wanted]
) -> tuple[list[ImageSet | None], dict[str, str]]:
    """Every wanted set loaded with the model's preprocessing ``prep`` (its conversion stated on
    stderr), in order: the one place an evaluation reads images; a named set whose files are absent is
    None, with why in the second value (warned once per message, at the caller of the public loader)."""
    sets: list[ImageSet | None] = []
    missing: dict[str, str] = {}
    for w in wanted:
        try:
            images = load_images(
                w.source,
                n=w.n,
                seed=w.seed,
                data_dir=spec.data_dir,
                **prep.options(),
                brightness=w.brightness,
            )
        except DataError as exc:
            if not w.named:
                raise
            missing[w.source] = str(exc)
            warnings.warn(f"{w.source}: no data ({exc})", stacklevel=4)
            sets.append(None)
            continue
        images.state_preprocessing()
        sets.append(images)
    return sets, missing


def derived_seed(spec: EvalSpec, name: str) -> int:
    """The one seed policy: a seed for the named draw (an OOD set, a Fisher draw) from ``spec.seed`` and
    the name, not a position, so the same set gets the same images in every run and experiment (and
    cached scores are reused). A folder name that is not UTF-8 is hashed as its bytes."""
    return spec.seed + 1 + zlib.crc32(name.encode("utf-8", "surrogateescape")) % 100_000


def _split(spec: EvalSpec, pool: ImageSet, test: bool) -> tuple[ImageSet | None, ImageSet]:
    """The in-distribution ``pool`` split at random (``derived_seed(spec, "split")``) into test images
    (with ``test``; ``test_samples``, at most a fifth) and fit images: Fisher images followed by the
    held-out statistics images, as ``fisher_count`` splits them. States the split in one line; each
    part keeps the set's file order."""
    n = len(pool)
    n_test = min(spec.test_samples, n // 5) if test else 0
    if test and n_test < 2:
        raise DataError(
            f"{pool.name} has {n} image{'s' if n != 1 else ''}: too few to split into fit and test images"
        )
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


def _in_wanted(spec: EvalSpec, test: bool) -> tuple[list[_Wanted], bool]:
    """The in-distribution sets to load for the fit images (and, with ``test``, the test images first),
    and whether they are one pool to split (no ``fit_data`` nor training split, no ``fit_draw``)."""
    origin = _fit_origin(spec)
    if origin is None and spec.fit_draw is None:
        n_test = spec.test_samples if test else 0
        return [_Wanted(spec.in_data, n_test + spec.fit_samples + spec.stats_samples, spec.seed)], True
    n_fit = spec.fit_samples + spec.stats_samples if spec.fit_draw is None else None  # a draw: all
    fit = _Wanted(origin or fit_source(spec), n_fit, spec.seed)  # fit_source: no origin is an error
    return ([_Wanted(spec.in_data, spec.test_samples, spec.seed), fit] if test else [fit]), False


def _in_sets(
    spec: EvalSpec, loaded: Sequence[ImageSet | None], split: bool, test: bool
) -> tuple[ImageSet | None, ImageSet]:
    """The test images (with ``test``) and the fit images (Fisher images, then the statistics images)
    from what ``_in_wanted`` asked for: the pool split, or the fit set as loaded or drawn from."""
    sets = [s for s in loaded if s is not None]
    if split:
        return _split(spec, sets[0], test)
    fit = sets[-1]
    if spec.fit_draw is not None:
        return (sets[0] if test else None), _drawn(spec, fit)
    n_fisher = fisher_count(spec, len(fit))
    if len(fit) - n_fisher < 1:  # every fit holds images out: statistics, a threshold
        raise DataError(f"{fit.name} has {len(fit)} image: too few to fit on some and hold out the rest")
    warn_if_short(spec, fit.name, n_fisher, len(fit) - n_fisher)
    return (sets[0] if test else None), fit


def _drawn(spec: EvalSpec, pool: ImageSet) -> ImageSet:
    """``fit_draw``'s fit images: ``fit_samples`` drawn at random from ``pool`` beside the
    ``stats_samples`` statistics images, which stay fixed across draws."""
    order = np.random.default_rng(derived_seed(spec, "statistics")).permutation(len(pool))
    stats, rest = order[: spec.stats_samples], order[spec.stats_samples :]
    if spec.fit_samples > len(rest):
        raise DataError(f"{pool.name} has {len(rest)} images beside the statistics, not {spec.fit_samples}")
    draw = np.random.default_rng(derived_seed(spec, f"fit_draw:{spec.fit_draw}"))
    keep = np.concatenate([rest[draw.choice(len(rest), spec.fit_samples, replace=False)], stats])
    source = f"draw {spec.fit_draw} of {spec.fit_samples} (+ {spec.stats_samples} fixed) of {pool.source}"
    return replace(pool, images=pool.images[keep], labels=pool.labels[keep], source=source, files=None)


@dataclass(frozen=True)
class FitImages:
    """The images detectors are fitted on, split once (``fisher_count``): the Fisher's, then those held out
    (ROSE's layer statistics, a threshold's sample), both views of ``whole``'s images; ``storage``: how
    the Fisher images were stored, saved with a detector (``rose score`` checks its images against it)."""

    whole: ImageSet
    fisher: np.ndarray
    held_out: np.ndarray
    storage: Storage


def _fit_images(spec: EvalSpec, fit: ImageSet) -> FitImages:
    """``fit`` split by the one split policy, its Fisher images' history read once for every detector."""
    n = fisher_count(spec, len(fit))
    return FitImages(fit, fit.images[:n], fit.images[n:], storage_of(fit.name, fit.images[:n]))


@dataclass(frozen=True)
class EvalSets:
    """Every image set of an evaluation, loaded once (``load_sets``)."""

    test: ImageSet  # the in-distribution test images
    fit: FitImages
    ood: dict[str, ImageSet]
    missing: dict[str, str]  # named OOD sets whose files are absent: why
    compression: dict[str, str]  # each set's compression history, as ``compression_report`` found it
    preprocessing: Preprocessing  # the model's, which every set was loaded with


def load_sets(spec: EvalSpec, model: RoseModel) -> EvalSets:
    """The test, fit and OOD images of an evaluation, read in one place (``_load_all``), and the one
    compression check of the OOD sets against the test images (a warning line for each whose history
    differs): the images pass down once, splitting, loading and checking each done here."""
    prep = model_preprocessing(model)
    wanted, split = _in_wanted(spec, test=True)
    test, fit = _in_sets(spec, _load_all(spec, prep, wanted)[0], split, test=True)
    assert test is not None
    ood_wanted = _ood_wanted(spec, test)
    ood, missing = _ood_sets(ood_wanted, *_load_all(spec, prep, ood_wanted))
    compression, mismatched = compression_report(test, ood)
    for line in mismatched:
        state(f"warning: {line}")
    for images in (test, *ood.values()):
        if len(images) < INTERVAL_MIN_SCORES:
            state(
                f"warning: {images.name}: {len(images)} image: its metrics rest on it alone, with no interval"
            )
    return EvalSets(test, _fit_images(spec, fit), ood, missing, compression, prep)


def load_fit_images(spec: EvalSpec, model: RoseModel) -> FitImages:
    """The images detectors are fitted on (Fisher samples, then the ROSE statistics samples): from
    ``fit_data``, the in-distribution set's training split, or else all of the set, split at random."""
    wanted, split = _in_wanted(spec, test=False)
    fit = _in_sets(spec, _load_all(spec, model_preprocessing(model), wanted)[0], split, test=False)[1]
    return _fit_images(spec, fit)


def warn_if_short(spec: EvalSpec, name: str, n_fisher: int, n_stats: int) -> None:
    """One warning line where ``fit_data`` (or a training split) gives fewer fit or statistics images
    than ``fit_samples`` and ``stats_samples`` ask (a set too small, or the statistics capped at half): a
    fit on fewer images than asked must not pass unremarked. A random split states its counts itself."""
    if n_fisher >= spec.fit_samples and n_stats >= spec.stats_samples:
        return
    n, asked = n_fisher + n_stats, spec.fit_samples + spec.stats_samples
    why = f"it has {n} images, not {asked}" if n < asked else "the statistics take at most half"
    state(
        f"warning: {name}: {spec.fit_samples} fit and {spec.stats_samples} statistics images asked, "
        f"{n_fisher} and {n_stats} used ({why})"
    )


OVERALL = "overall"


def load_ood_sets(
    spec: EvalSpec, model: RoseModel, in_set: ImageSet | None = None
) -> tuple[dict[str, ImageSet], dict[str, str]]:
    """Load every OOD set but ``overall``, each through ``spec.match_jpeg``'s round-trip where one is
    asked for ("auto": the history of ``in_set``, the in-distribution test images); named sets whose files
    are absent become 'no data' entries."""
    wanted = _ood_wanted(spec, in_set)
    return _ood_sets(wanted, *_load_all(spec, model_preprocessing(model), wanted))


def _ood_wanted(spec: EvalSpec, in_set: ImageSet | None) -> list[_Wanted]:
    """The OOD sets to load, named and matched once by ``ood_sources``; a matched set draws the images
    of the set as stored (its seed is the stored set's)."""
    if spec.match_jpeg is not None and in_set is None:
        raise RoseError("match_jpeg needs the in-distribution images to match the OOD sets to")
    sources = ood_sources([s for s in spec.ood if s != OVERALL], spec.match_jpeg, in_set)
    return [
        _Wanted(s.name, spec.test_samples, derived_seed(spec, s.base), spec.brightness, s.named)
        for s in sources
    ]


def _ood_sets(
    wanted: Sequence[_Wanted], loaded: Sequence[ImageSet | None], missing: dict[str, str]
) -> tuple[dict[str, ImageSet], dict[str, str]]:
    """The loaded OOD sets by name, and the missing ones; an error where none could be loaded."""
    sets = {w.source: s for w, s in zip(wanted, loaded, strict=True) if s is not None}
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
