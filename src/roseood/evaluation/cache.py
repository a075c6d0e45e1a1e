"""A content-addressed store of fitted detectors and per-image scores, so interrupted runs resume.

Keys are hashes of everything that determines a result: the model's and background's fingerprints, the
method and its hyper-parameters, the seed, and the bytes of the fit and test images themselves. A run
that stops half-way therefore recomputes only what is missing, and a changed setting never silently
reuses a stale result. Files are written atomically.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from roseood.detectors.base import Detector
from roseood.errors import CheckpointError
from roseood.serialization import array_digest as array_digest
from roseood.serialization import save_npy


def cache_key(parts: dict[str, Any]) -> str:
    """A stable hash of JSON-able ``parts`` (keys sorted, non-JSON values by ``str``)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class ResultCache:
    """Detectors under ``root/detectors``, score arrays under ``root/scores``; both keyed by ``cache_key``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, kind: str, key: str, suffix: str) -> Path:
        return self.root / kind / f"{key}{suffix}"

    def detector(self, key: str, load: Callable[[Path], Detector], build: Callable[[], Detector]) -> Detector:
        """The detector stored under ``key`` (via ``load``), else ``build()`` it and store it.

        A stored file that cannot be read (e.g. cut short by a crash outside the atomic write) is
        rebuilt rather than failing the run.
        """
        path = self._path("detectors", key, ".pt")
        if path.exists():
            try:
                return load(path)
            except CheckpointError:
                path.unlink()
        det = build()
        det.save(path)
        return det

    def scores(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The score array stored under ``key``, else ``compute()`` it and store it."""
        path = self._path("scores", key, ".npy")
        if path.exists():
            try:
                return np.load(path, allow_pickle=False)
            except (OSError, ValueError):
                path.unlink()
        values = np.asarray(compute())
        save_npy(path, values)
        return values

    def has_scores(self, key: str) -> bool:
        return self._path("scores", key, ".npy").exists()
