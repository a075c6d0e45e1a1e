"""The detector contract shared by ROSE and every baseline (scikit-learn spirit).

``fit(images, held_out=None)`` learns from in-distribution images (``held_out``: further ones the
detector may keep apart from its main fit, e.g. ROSE's layer statistics; the others learn from both),
``score(images)`` returns one number per image (higher = more out-of-distribution), ``save``/``load``
round-trip the learned state in one file that records the fingerprint of the model it was fitted on
(and, from ``rose fit``, how its fit images were stored: ``fit_storage_``).

A detector declares what it needs beyond in-distribution images in class attributes (``keeps_held_out``,
``extra_models``, ``layerwise``, ``reports_fit_warnings``); callers ask these, never the class. Its
parameters are its ``__init__`` keywords (``get_params``, the scikit-learn way). Adding a detector is one
file: a subclass plus ``register_detector(cls, {"method-name": {preset kwargs}, ...})``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from roseood import distributed
from roseood.catalogue import DECISION_TPR
from roseood.data.jpeg import Storage
from roseood.data.loading import ImageStream, read_readable
from roseood.data.tensors import ImageData, loader_batches
from roseood.detectors.aggregation import threshold_at
from roseood.detectors.files import built_from_file, check_model, file_contents, read_file, restore
from roseood.detectors.inputs import model_inputs
from roseood.errors import CheckpointError, DataError, RoseError
from roseood.models.base import RoseModel
from roseood.progress import progress, resolve
from roseood.registry import Registry
from roseood.serialization import save_file
from roseood.validation import check_float, check_int


class Detector(ABC):
    """Base class: configuration in ``__init__``, learned state in ``state()``, validation at the edges.

    Every keyword-only ``__init__`` argument but the ``runtime_params`` and ``extra_models`` is a
    parameter, stored on the instance under its own name: ``get_params`` reads them, files record them.
    """

    method: ClassVar[str]
    keeps_held_out: ClassVar[bool] = False  # fit() keeps ``held_out`` apart (else learns from both)
    extra_models: ClassVar[tuple[str, ...]] = ()  # further models __init__ and load() take by keyword
    layerwise: ClassVar[bool] = False  # offers layer_scores(): one raw score per layer
    reports_fit_warnings: ClassVar[bool] = False  # fit() may leave degenerate-fit warnings in fit_warnings_
    runtime_params: ClassVar[tuple[str, ...]] = ("progress",)  # how it runs, not what it computes
    noun: ClassVar[str | None] = None  # what messages call this kind (None: "a '<method>' detector")

    def __init__(
        self, model: RoseModel | None, *, batch_size: int = 64, progress: bool | None = None
    ) -> None:
        self.model = model
        self.batch_size = check_int(batch_size, "batch_size")
        self.progress = resolve(progress)  # unset: a bar when stderr is a terminal (roseood.progress)
        self.fitted_ = False
        self.threshold_: float | None = None  # score above which an input is called OOD (calibrate)
        self.fit_warnings_: list[str] = []
        self.held_out_scores_: np.ndarray | None = None  # what fit scored its held-out inputs (if it did)
        # how its fit images were stored (their JPEG history), recorded by ``rose fit``; None: unknown
        self.fit_storage_: Storage | None = None

    # -- to implement ----------------------------------------------------------------------------
    def _fit(self, x: Tensor) -> None:
        """Learn from validated in-distribution inputs (held-out ones included); every detector that
        does not declare ``keeps_held_out`` implements this."""
        raise NotImplementedError(f"{type(self).__name__} implements no _fit")

    def _fit_apart(self, x: Tensor, held_out: Tensor) -> None:
        """Learn from validated ``x``, keeping the (≥ 2) ``held_out`` inputs apart; the detectors that
        declare ``keeps_held_out`` implement this and ``held_out_share`` instead of ``_fit``."""
        raise NotImplementedError(f"{type(self).__name__} declares keeps_held_out but has no _fit_apart")

    def held_out_share(self) -> int | float:
        """How many inputs (int) or what share (float) ``fit`` holds out when given no ``held_out``."""
        raise NotImplementedError(f"{type(self).__name__} declares keeps_held_out but no held_out_share")

    @abstractmethod
    def _score(self, x: Tensor) -> Tensor:
        """Per-image OOD scores (higher = more OOD) for validated images."""

    @classmethod
    def param_names(cls) -> list[str]:
        """The names of the parameters: keyword-only ``__init__`` arguments that are not runtime
        options or further models."""
        skip = {*cls.runtime_params, *cls.extra_models}
        return [
            name
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in skip
        ]

    def get_params(self) -> dict[str, Any]:
        """JSON-able hyper-parameters that, with the model(s), rebuild an unfitted detector."""
        return {name: getattr(self, name) for name in self.param_names()}

    def state(self) -> dict[str, Any]:
        """Learned state (tensors and plain values); empty for detectors that learn nothing."""
        return {}

    def show_progress(self, enabled: bool | None) -> Detector:
        """Set whether its long steps report progress (a runtime setting, never saved; unset: when stderr
        is a terminal), e.g. on a detector just loaded from a file; returns it."""
        self.progress = resolve(enabled)
        return self

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state()`` returned."""

    # -- public API ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        if self.model is None:
            return torch.device("cpu")
        return next(self.model.parameters(), torch.empty(0)).device

    def fit(self, images: ImageData, held_out: ImageData | None = None) -> Self:
        """Learn from in-distribution inputs (images: uint8 (N, C, H, W) or float in [0, 1]), as tensors,
        arrays or a torch ``DataLoader`` / ``Dataset`` of them (items: tensors, (image, label) tuples or
        dicts with an image).

        ``held_out``: further in-distribution inputs. A detector that ``keeps_held_out`` learns its
        main part from ``images`` and the rest from ``held_out`` (without one: the last
        ``held_out_share()`` of ``images``, the package's one split policy); the others learn from both.
        """
        x = model_inputs(images, self.model, self.batch_size)
        held = None if held_out is None else model_inputs(held_out, self.model, self.batch_size)
        self.check_counts(x.shape[0], None if held is None else held.shape[0])
        self.fit_storage_ = None  # these images' is set by whoever knows it (``fit_detector``)
        self.held_out_scores_ = None  # set by a detector that scores its held-out images while fitting
        if not self.keeps_held_out:
            self._fit(x if held is None else torch.cat([x, held]))
        else:
            if held is None:
                n = held_out_count(x.shape[0], self.held_out_share())
                x, held = x[: x.shape[0] - n], x[x.shape[0] - n :]
            self._fit_apart(x, held)
        self.fitted_ = True
        return self

    def check_counts(self, fit: int, held_out: int | None = None) -> None:
        """Refuse in one line, before any input reaches the model, counts this detector cannot be fitted
        on: ``fit`` inputs and ``held_out`` ones (None: ``fit`` holds out its own share). ``fit()`` calls
        it first, and ``rose fit`` / ``rose evaluate`` with the counts asked for, before reading any."""
        if self.keeps_held_out and held_out is None:
            share = self.held_out_share()
            held_out = held_out_count(fit, share)
            if held_out < 2 or fit - held_out < 1:
                raise DataError(
                    f"{self.method} needs at least 3 in-distribution inputs, {share} of them (at "
                    f"least 2) held out, got {fit}; pass more, or held_out="
                )
        elif self.keeps_held_out and held_out is not None and held_out < 2:
            raise DataError(f"{self.method} needs at least 2 held-out in-distribution inputs, got {held_out}")
        last = held_out if self.keeps_held_out and held_out is not None else fit + (held_out or 0)
        self._check_last_count(last)

    def _check_last_count(self, n: int) -> None:
        """Refuse ``n`` inputs for the part fitted last (held-out ones where it keeps them apart): a
        density's minimum, say; nothing by default."""

    def score(self, images: ImageData, *, shard: bool = True) -> np.ndarray:
        """One OOD score per image as float64 numpy (higher = more likely out-of-distribution).

        Under torchrun each process scores its shard and every process gets all scores in input order;
        ``shard=False`` scores exactly ``images`` here (a process's own part of a stream). A ``DataLoader``
        or ``Dataset`` is scored batch by batch as it is read (never held whole), all in this process."""
        if not self.fitted_:
            raise RoseError(f"{self.method} detector is not fitted: call fit() or load() first")
        if isinstance(images, DataLoader | Dataset):
            batches = progress(loader_batches(images, self.batch_size), "scoring", enabled=self.progress)
            parts = [self.score(batch, shard=False) for batch in batches]
            if not parts:
                raise DataError("empty input set: the dataset gave no items")
            return np.concatenate(parts)
        x = model_inputs(images, self.model, self.batch_size)
        if shard:
            x = x[distributed.shard(x.shape[0])]
        out = self._score(x).detach() if x.shape[0] else torch.empty(0)
        out = out.to("cpu", torch.float64)
        return (distributed.gather_rows(out) if shard else out).numpy()

    def score_stream(
        self,
        stream: ImageStream,
        chunk: int = 4096,
        *,
        start: int = 0,
        on_error: Callable[[int, str], None] | None = None,
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Score images ``start``… of a lazily read stream, ``chunk`` at a time (bounded memory); yields
        (first index, scores) in input order. Under torchrun each process reads and scores its share of
        every chunk. ``on_error(index, message)``: a file that cannot be read scores NaN and the rest go
        on (without it, its ``DataError`` is raised)."""
        for lo in range(start, len(stream), chunk):
            hi = min(lo + chunk, len(stream))
            part = distributed.shard(hi - lo)
            mine, kept = read_readable(stream, lo + part.start, lo + part.stop, on_error)
            local = np.full(part.stop - part.start, np.nan)
            if len(kept):
                local[kept - lo - part.start] = self.score(mine, shard=False)
            yield lo, distributed.gather_rows(torch.from_numpy(local)).numpy()

    def calibrate(self, images: ImageData | None = None, tpr: float = DECISION_TPR) -> Self:
        """Set ``threshold_`` so that a fraction ``tpr`` of these held-out in-distribution inputs (not
        the ones fitted on) score at or below it; ``decide`` then calls higher scores OOD. ``None``: the
        held-out inputs ``fit`` scored already (``held_out_scores_``; ROSE's statistics images), not
        scored twice."""
        scores = self.held_out_scores_ if images is None else self.score(images)
        if scores is None:
            raise RoseError(f"{self.method} detector kept no held-out scores at fit: calibrate(images)")
        self.threshold_ = threshold_at(scores, tpr)
        return self

    def decide(self, scores: np.ndarray, threshold: float | None = None) -> np.ndarray:
        """Boolean OOD decisions for ``scores`` at ``threshold`` (default: the calibrated ``threshold_``)."""
        cut = self.threshold_ if threshold is None else check_float(threshold, "threshold")
        if cut is None:
            raise RoseError(f"{self.method} detector has no threshold: calibrate() it or pass a threshold")
        return np.asarray(scores) > cut

    def save(self, path: str | Path, *, tag: str | None = None) -> None:
        """Write hyper-parameters, learned state and the model's fingerprint to one file (atomically,
        with a checksum); ``tag`` is stored as given (the result cache records its key)."""
        if not self.fitted_:
            raise RoseError(f"{self.method} detector is not fitted; nothing to save")
        if not distributed.is_main():
            distributed.barrier()  # rank 0 writes; the others wait until the file is there
            return
        save_file(file_contents(self, tag), path)
        distributed.barrier()

    @property
    def name(self) -> str:
        """The user-facing method name this detector's parameters match (``rose-ekfac`` for a ``rose``
        detector with ``fisher="ekfac"``; ``method_name``), once built: a check inside ``__init__`` names
        it by its arguments (``name_of``), whichever of its attributes are set by then."""
        return method_name(type(self), self._matches)

    def _matches(self, param: str, value: Any) -> bool:
        """Whether parameter ``param`` holds a preset's ``value`` (a detector that resolves a value, as ROSE
        resolves a named layer set to its layers, compares what it resolved)."""
        return bool(getattr(self, param, None) == value)

    def __repr__(self) -> str:
        """What ``print(detector)`` shows: its class, the method its parameters match, its state."""
        if not hasattr(self, "fitted_"):  # mid-__init__ (in a debugger), before its state is set
            return f"<{type(self).__name__}: being built>"
        kind = f"{type(self).__name__} {self.name}"
        if not self.fitted_:
            return f"<{kind}: not fitted>"
        cut = self.threshold_
        return f"<{kind}: fitted, " + ("no threshold>" if cut is None else f"OOD above {cut:.6g}>")

    def layer_scores(self, images: ImageData) -> Tensor:
        """Raw per-layer scores ``(N, layers)``, for detectors with ``layerwise``."""
        raise RoseError(f"the {self.method} detector has no layer-wise scores")

    @classmethod
    def load(cls, path: str | Path, model: Any = None, **extra_models: Any) -> Detector:
        """Load a saved detector for ``model`` (an ensemble: its members' models, in order) and the
        further models its kind needs (``extra_models``, e.g. ``background=``); refuses a file fitted on
        other models. The file's method name is looked up in ``DETECTORS``, never imported. Loading through
        the detector's own class (``LikelihoodRatio.load``) requires its further models; the generic
        ``Detector.load`` leaves them to be attached later (scoring refuses until they are)."""
        obj, found = read_file(path, DETECTORS)  # the method by the registry, every field checked
        if not issubclass(found, cls):
            wanted = cls.noun or f"a {cls.method!r} detector"
            raise CheckpointError(f"{path}: holds a {found.method!r} detector, not {wanted}")
        extra = {k: extra_models.get(k) for k in found.extra_models}
        if cls is found and (missing := [k for k, m in extra.items() if m is None]):
            raise CheckpointError(
                f"{path}: a {found.method} detector needs its {missing[0]} model ({missing[0]}=)"
            )
        return found.from_file(obj, path, model, **{k: m for k, m in extra.items() if m is not None})

    @classmethod
    def from_file(cls, obj: Mapping[str, Any], path: str | Path, model: Any, **extra_models: Any) -> Detector:
        """Rebuild this kind of detector from a loaded file's contents ``obj``, its fields checked (see
        ``load``)."""
        if isinstance(model, list | tuple):
            if len(model) != 1:
                raise CheckpointError(
                    f"{path}: holds one {cls.method} detector, not an ensemble; it takes one model, "
                    f"got {len(model)}"
                )
            model = model[0]
        check_model(obj, path, model, cls.method)
        return restore(built_from_file(path, cls, model, **obj["params"], **extra_models), obj, path)


class Method(NamedTuple):
    """A named detection method (``rose evaluate --methods``): a detector class and its preset keywords."""

    cls: type[Detector]
    kwargs: dict[str, Any]


DETECTORS: Registry[str, type[Detector]] = Registry("detector")  # a file's ``method`` → its class
METHODS: Registry[str, Method] = Registry("method")  # the names users pick methods by


def register_detector(cls: type[Detector], methods: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Register a detector class under its ``method`` name and the user-facing ``methods`` it offers
    (name → preset keyword arguments; default: its ``method`` name with no presets). Every parameter
    needs a type hint: a saved file's values are checked against them when it is read."""
    hints = inspect.signature(cls.__init__, eval_str=True).parameters
    bare = [name for name in cls.param_names() if hints[name].annotation is inspect.Parameter.empty]
    if bare:
        raise RoseError(
            f"{cls.__name__}: parameter {', '.join(bare)} has no type hint, which a saved file's values are "
            f"checked against when it is read; annotate it (e.g. {bare[0]}: int = 64)"
        )
    DETECTORS.register(cls.method, cls)
    for name, kwargs in (methods if methods is not None else {cls.method: {}}).items():
        METHODS.register(name, Method(cls, dict(kwargs)))


def method_name(cls: type[Detector], matches: Callable[[str, Any], bool]) -> str:
    """The registered preset of ``cls`` with the most keys whose values all ``matches`` (parameter, preset
    value), else its kind (``method``): the name users picked it by."""
    names = set(cls.param_names())
    found = [
        (len(kwargs), name)
        for name, (kind, kwargs) in METHODS.items()
        if kind is cls and all(k in names and matches(k, value) for k, value in kwargs.items())
    ]
    return max(found)[1] if found else cls.method


def name_of(cls: type[Detector], params: Mapping[str, Any]) -> str:
    """The name (``method_name``) of a ``cls`` detector built with ``params``, the others at their defaults:
    what a check inside ``__init__`` names it by, whichever attributes are set by then."""
    given = inspect.signature(cls.__init__).parameters
    return method_name(cls, lambda k, value: bool(params.get(k, given[k].default) == value))


def make_detector(method: str, model: Any, **overrides: Any) -> Detector:
    """Build an unfitted detector from a method name of ``METHODS``."""
    cls, kwargs = METHODS.get(method)
    return cls(model, **(kwargs | overrides))


def method_params(method: str, **overrides: Any) -> dict[str, Any]:
    """The parameters ``make_detector(method, model, **overrides)`` builds with, defaults filled in, and
    the further models it takes: what identifies an unfitted detector (for cache keys), found without
    building one."""
    cls, kwargs = METHODS.get(method)
    try:
        bound = inspect.signature(cls).bind_partial(**(kwargs | overrides))
    except TypeError as exc:
        raise RoseError(f"{method}: {exc}") from None
    bound.apply_defaults()
    keep = {*cls.param_names(), *cls.extra_models}
    return {k: v for k, v in bound.arguments.items() if k in keep}


def load_detector(path: str | Path, model: Any, **extra_models: Any) -> Detector:
    """Load any saved detector (``Detector.load``): ``model`` is its model, or for an ensemble the list of
    its members' models; ``extra_models`` are given to detectors that declare them (e.g. ``background``)."""
    return Detector.load(path, model, **extra_models)


def held_out_count(n: int, held_out: int | float) -> int:
    """The split policy: how many of ``n`` in-distribution inputs to hold out from the main fit.

    A float is a fraction of ``n`` (rounded); an int a count, capped at half of ``n`` so the main fit
    always keeps the larger part. The held-out inputs are the last ones.
    """
    if isinstance(held_out, float):
        return round(held_out * n)
    return min(held_out, n // 2)
