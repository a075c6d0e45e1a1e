"""The detector contract shared by ROSE and every baseline (scikit-learn spirit).

``fit(images, held_out=None)`` learns from in-distribution images (``held_out``: further ones the
detector may keep apart from its main fit, e.g. ROSE's layer statistics; the others learn from both),
``score(images)`` returns one number per image (higher = more out-of-distribution), ``save``/``load``
round-trip the learned state in one file that records the fingerprint of the model it was fitted on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import torch
from torch import Tensor

from roseood import distributed
from roseood.data.loading import ImageStream
from roseood.data.tensors import check_model_input
from roseood.errors import CheckpointError, RoseError
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint
from roseood.serialization import atomic_save, safe_load, share_equal_tensors
from roseood.validation import check_float, check_int

DETECTOR_FORMAT = "roseood-detector"


class Detector(ABC):
    """Base class: configuration in ``__init__``, learned state in ``state()``, validation at the edges."""

    method: ClassVar[str]

    def __init__(
        self, model: RoseModel | None, *, batch_size: int = 64, progress: bool | None = None
    ) -> None:
        self.model = model
        self.batch_size = check_int(batch_size, "batch_size")
        self.progress = bool(progress)  # opt-in (roseood.progress): a bar on a terminal, lines in a log
        self.fitted_ = False
        self.threshold_: float | None = None  # score above which an input is called OOD (calibrate)

    # -- to implement ----------------------------------------------------------------------------
    @abstractmethod
    def _fit(self, x: Tensor) -> None:
        """Learn from validated in-distribution inputs (all of them, held-out ones included)."""

    @abstractmethod
    def _score(self, x: Tensor) -> Tensor:
        """Per-image OOD scores (higher = more OOD) for validated images."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """JSON-able hyper-parameters that, with the model, rebuild an unfitted detector."""

    def state(self) -> dict[str, Any]:
        """Learned state (tensors and plain values); empty for detectors that learn nothing."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state()`` returned."""

    # -- public API ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        if self.model is None:
            return torch.device("cpu")
        return next(self.model.parameters(), torch.empty(0)).device

    def _check(self, images: Tensor | np.ndarray) -> Tensor:
        """Validate inputs against the model's declared input kind and shape (images when no model)."""
        return check_model_input(images, self.model)

    def _require_images(self) -> None:
        """Refuse a model whose inputs are not images (for methods built on image perturbations/codecs)."""
        kind = getattr(self.model, "input_kind", "image")
        if kind != "image":
            raise RoseError(f"the {self.method} method works on images only; this model takes {kind} inputs")

    def fit(self, images: Tensor | np.ndarray, held_out: Tensor | np.ndarray | None = None) -> Self:
        """Learn from in-distribution inputs (images: uint8 (N, C, H, W) or float in [0, 1]).

        ``held_out``: further in-distribution inputs; detectors without a use for a held-out set learn
        from ``images`` and ``held_out`` together.
        """
        x = self._check(images)
        self._fit(x if held_out is None else torch.cat([x, self._check(held_out)]))
        self.fitted_ = True
        return self

    def score(self, images: Tensor | np.ndarray, *, shard: bool = True) -> np.ndarray:
        """One OOD score per image as float64 numpy (higher = more likely out-of-distribution).

        Under torchrun each process scores its shard and every process gets all scores in input order;
        ``shard=False`` scores exactly ``images`` here (a process's own part of a stream)."""
        if not self.fitted_:
            raise RoseError(f"{self.method} detector is not fitted: call fit() or load() first")
        x = self._check(images)
        if shard:
            x = x[distributed.shard(x.shape[0])]
        out = self._score(x).detach() if x.shape[0] else torch.empty(0)
        out = out.to("cpu", torch.float64)
        return (distributed.gather_rows(out) if shard else out).numpy()

    def score_stream(self, stream: ImageStream, chunk: int = 4096) -> Iterator[tuple[int, np.ndarray]]:
        """Score images read lazily, ``chunk`` at a time (bounded memory); yields (first index, scores) in
        input order. Under torchrun each process reads and scores its share of every chunk."""
        for lo in range(0, len(stream), chunk):
            hi = min(lo + chunk, len(stream))
            part = distributed.shard(hi - lo)
            mine = stream.read(lo + part.start, lo + part.stop)
            local = self.score(mine, shard=False) if len(mine) else np.empty(0)
            yield lo, distributed.gather_rows(torch.from_numpy(local)).numpy()

    def calibrate(self, images: Tensor | np.ndarray, tpr: float = 0.95) -> Self:
        """Set ``threshold_`` so that a fraction ``tpr`` of these held-out in-distribution inputs (not
        the ones fitted on) score at or below it; ``decide`` then calls higher scores OOD."""
        tpr = check_float(tpr, "tpr", low=0.0, high=1.0, low_open=True)
        self.threshold_ = float(np.quantile(self.score(images), tpr, method="higher"))
        return self

    def decide(self, scores: np.ndarray, threshold: float | None = None) -> np.ndarray:
        """Boolean OOD decisions for ``scores`` at ``threshold`` (default: the calibrated ``threshold_``)."""
        cut = self.threshold_ if threshold is None else check_float(threshold, "threshold")
        if cut is None:
            raise RoseError(f"{self.method} detector has no threshold: calibrate() it or pass a threshold")
        return np.asarray(scores) > cut

    def save(self, path: str | Path) -> None:
        """Write hyper-parameters, learned state and the model's fingerprint to one file (atomically)."""
        if not self.fitted_:
            raise RoseError(f"{self.method} detector is not fitted; nothing to save")
        if not distributed.is_main():
            distributed.barrier()  # rank 0 writes; the others wait until the file is there
            return
        atomic_save(
            {
                "format": DETECTOR_FORMAT,
                "method": self.method,
                "params": self.params(),
                "state": share_equal_tensors(self.state()),
                "threshold": self.threshold_,
                "model_fingerprint": model_fingerprint(self.model) if self.model is not None else None,
            },
            path,
        )
        distributed.barrier()

    @classmethod
    def load(cls, path: str | Path, model: RoseModel | None) -> Detector:
        """Load a saved detector for ``model``; refuses a file fitted on a different model."""
        from roseood.detectors import DETECTORS

        obj = safe_load(path, DETECTOR_FORMAT)
        method = obj.get("method")
        if method == "ensemble" and cls is Detector:  # its members need their models: ``model`` is one
            from roseood.detectors.ensemble import Ensemble

            return Ensemble.load(path, model)
        if method not in DETECTORS:
            raise CheckpointError(f"{path}: unknown detector method {method!r}")
        if cls is not Detector and method != cls.method:
            raise CheckpointError(f"{path}: holds a {method!r} detector, not {cls.method!r}")
        expected = obj.get("model_fingerprint")
        if expected is not None:
            if model is None:
                raise CheckpointError(f"{path}: this {method} detector needs the model it was fitted on")
            actual = model_fingerprint(model)
            if actual != expected:
                raise CheckpointError(
                    f"{path}: fitted on model {expected}, but the given model is {actual}; "
                    "refit the detector for this model"
                )
        return DETECTORS[method](model, **obj["params"])._restore(obj, path)

    def _restore(self, obj: dict[str, Any], path: str | Path) -> Self:
        """Set the learned state and threshold of a loaded file (``obj``: its contents) on this detector."""
        try:
            self.load_state(obj["state"])
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        self.threshold_ = obj.get("threshold")
        self.fitted_ = True
        return self


def held_out_count(n: int, held_out: int | float) -> int:
    """The split policy: how many of ``n`` in-distribution inputs to hold out from the main fit.

    A float is a fraction of ``n`` (rounded); an int a count, capped at half of ``n`` so the main fit
    always keeps the larger part. The held-out inputs are the last ones.
    """
    if isinstance(held_out, float):
        return round(held_out * n)
    return min(held_out, n // 2)
