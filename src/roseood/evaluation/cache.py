"""A content-addressed store of fitted detectors and per-image scores, so interrupted runs resume.

Keys are hashes of everything that determines a result: the model's and background's fingerprints, the
method and its hyper-parameters, the seed, and the bytes of the fit and test images themselves (so their
number and sizes too). A run that stops half-way therefore recomputes only what is missing, and a
changed setting never silently reuses a stale result.

Every entry is a checksummed roseood file that records its own key. An entry that is damaged, empty,
not a file, another entry's (e.g. two files swapped), of the wrong length or non-finite is never used:
it is recomputed with a one-line ``CacheWarning`` naming it. Non-finite scores are not stored.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from roseood.detectors.base import Detector
from roseood.detectors.files import DETECTOR_FORMAT
from roseood.errors import CheckpointError, RoseWarning
from roseood.integrity import field, tensor
from roseood.serialization import array_digest as array_digest
from roseood.serialization import safe_load, save_file, share_equal_tensors

SCORES_FORMAT = "roseood-scores"
STATE_FORMAT = "roseood-state"
T = TypeVar("T")


class CacheWarning(RoseWarning):
    """A cache entry that could not be used (damaged, mismatched): it is recomputed."""


def cache_key(parts: dict[str, Any]) -> str:
    """A stable hash of JSON-able ``parts`` (keys sorted, non-JSON values by ``str``)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class ResultCache:
    """Detectors under ``root/detectors``, score arrays under ``root/scores``, fitted parts of a detector
    (a ROSE's Fishers) under ``root/states``; all keyed by ``cache_key``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.pt"

    @staticmethod
    def _discard(path: Path, reason: str) -> None:
        """Warn that the entry at ``path`` is not used and remove it (whatever it is) for its rewrite."""
        warnings.warn(f"{path}: cache entry not used ({reason}); recomputing it", CacheWarning, stacklevel=3)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    @staticmethod
    def _reason(exc: CheckpointError, path: Path) -> str:
        return str(exc).removeprefix(f"{path}: ")

    def _stored(self, path: Path, read: Callable[[Path], T]) -> T | None:
        """The entry at ``path`` as ``read`` gives it; None when there is none, or when ``read`` finds it
        unusable (a ``CheckpointError``: then it is discarded with a one-line warning)."""
        if path.exists() or path.is_symlink():
            try:
                return read(path)
            except CheckpointError as exc:
                self._discard(path, self._reason(exc, path))
        return None

    def detector(self, key: str, load: Callable[[Path], Detector], build: Callable[[], Detector]) -> Detector:
        """The detector stored under ``key`` (via ``load``), else ``build()`` it and store it."""
        path = self._path("detectors", key)

        def read(path: Path) -> Detector:
            if field(safe_load(path, DETECTOR_FORMAT), "tag", str) != key:
                raise CheckpointError("it holds another entry's detector")
            return load(path)

        if (stored := self._stored(path, read)) is not None:
            return stored
        det = build()
        det.save(path, tag=key)
        return det

    def scores(self, key: str, compute: Callable[[], np.ndarray], length: int | None = None) -> np.ndarray:
        """The score array stored under ``key`` (checked to hold ``length`` finite rows when given),
        else ``compute()`` it and store it if it is finite."""
        return self.arrays(key, ("scores",), lambda: {"scores": compute()}, length)["scores"]

    def arrays(
        self,
        key: str,
        names: tuple[str, ...],
        compute: Callable[[], dict[str, np.ndarray]],
        rows: int | None = None,
    ) -> dict[str, np.ndarray]:
        """The float64 arrays ``names`` stored under ``key`` (scores beside what was measured with them:
        the seconds they took, the loss they are gradients of), else ``compute()`` them and store them if
        all are finite; ``rows``: the rows of each array ("scores" always has rows; another may be one
        value)."""
        path = self._path("scores", key)
        if (stored := self._stored(path, lambda p: self._read_arrays(p, key, names, rows))) is not None:
            return stored
        values = {name: np.asarray(v, dtype=np.float64) for name, v in compute().items()}
        assert set(values) == set(names), (sorted(values), names)  # the caller's own two statements
        if all(np.isfinite(v).all() for v in values.values()):
            arrays = {name: torch.from_numpy(v) for name, v in values.items()}
            save_file({"format": SCORES_FORMAT, "key": key, "arrays": arrays}, path)
        return values

    def state(
        self, key: str, compute: Callable[[], dict[str, Any]], check: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """The state dict stored under ``key`` (accepted by ``check``, which raises ``CheckpointError``
        otherwise), else ``compute()`` it and store it."""
        path = self._path("states", key)

        def read(path: Path) -> dict[str, Any]:
            obj = safe_load(path, STATE_FORMAT)
            if field(obj, "key", str) != key:
                raise CheckpointError("it holds another entry's state")
            state = field(obj, "state", dict)
            check(state)
            return state

        if (stored := self._stored(path, read)) is not None:
            return stored
        state = compute()
        save_file({"format": STATE_FORMAT, "key": key, "state": share_equal_tensors(state)}, path)
        return state

    @staticmethod
    def _read_arrays(path: Path, key: str, names: tuple[str, ...], rows: int | None) -> dict[str, np.ndarray]:
        obj = safe_load(path, SCORES_FORMAT)
        if field(obj, "key", str) != key:
            raise CheckpointError("it holds another entry's scores")
        arrays = field(obj, "arrays", dict)
        if set(arrays) != set(names):
            raise CheckpointError(f"it holds {sorted(map(str, arrays))}, expected {sorted(names)}")
        out = {}
        for name in names:
            values = tensor(arrays[name], f"arrays.{name}")
            if values.dtype != torch.float64:
                raise CheckpointError(f"field 'arrays.{name}' must be float64, found {values.dtype}")
            if (values.dim() == 0 and name == "scores") or (
                rows is not None and values.dim() > 0 and values.shape[0] != rows
            ):
                raise CheckpointError(f"its {name} hold {tuple(values.shape)} values, expected {rows} rows")
            out[name] = values.numpy()
        return out

    def has_scores(self, key: str) -> bool:
        return self._path("scores", key).is_file()

    def has_state(self, key: str) -> bool:
        return self._path("states", key).is_file()
