"""The one way ROSEs share fitted Fishers: a pool of ``FittedFishers`` by what identifies them (the Fisher
settings, the weights, the fit images: ``ROSE.fisher_key``), filled by fitting once, or from a result
cache, and handed to each ROSE explicitly (``ROSE.fit(..., fishers=)``, ``ROSE.fit_fisher(...,
fishers=)``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from roseood.contracts import SharesFishers
from roseood.detectors.rose import FisherArguments, FittedFishers
from roseood.evaluation.cache import ResultCache, cache_key
from roseood.progress import note


class FisherPool:
    """The Fishers fitted so far (shared: ``FittedFishers.share``, so the ROSEs given them read each
    other's raw scores of the same images), and with a ``cache`` those an earlier run stored there."""

    def __init__(self, cache: ResultCache | None = None) -> None:
        self.cache = cache
        self._found: dict[Hashable, tuple[str, FittedFishers]] = {}

    def fishers(self, det: SharesFishers, images: Any) -> FittedFishers:
        """The Fishers ``det.fit_fisher(images)`` would fit: the pool's, else the cache's, else fitted now
        (``_fit``) and kept in both."""
        key = det.fisher_key(images)
        if key in self._found:
            by, found = self._found[key]
            if det.progress:
                note(f"{det.name}: the Fishers fitted for {by} (the same settings and images)")
            return found
        found = self._fitted(det, images, key) if self.cache is not None else self._fit(det, images, key)
        self._found[key] = det.name, found.share()
        return found

    def _fit(self, det: SharesFishers, images: Any, key: tuple[Hashable, str, str]) -> FittedFishers:
        """``det``'s Fishers fitted now: the pool's of another kind on the same weights and images where
        they are its fit (``FittedFishers.taken_as``: ROSE-KFAC's and ROSE-KFAC-Tikhonov's), else
        ``det.fit_fisher(images)``."""
        arguments, model, digest = key
        assert isinstance(arguments, FisherArguments)
        for by, pooled in self._found.values():
            if (pooled.model, pooled.images) == (model, digest) and (taken := pooled.taken_as(arguments)):
                if det.progress:
                    note(f"{det.name}: the Kronecker factors fitted for {by} (one fit, inverted otherwise)")
                return taken
        fitted: FittedFishers = det.fit_fisher(images)
        return fitted

    def _fitted(self, det: SharesFishers, images: Any, key: tuple[Hashable, str, str]) -> FittedFishers:
        """The cache's Fishers under ``key``, else fitted now (``_fit``), stored there."""
        assert self.cache is not None
        arguments, model, digest = key
        assert isinstance(arguments, FisherArguments)
        got: list[FittedFishers] = []

        def fit() -> dict[str, Any]:
            got.append(self._fit(det, images, key))
            return got[0].state()

        def load(state: dict[str, Any]) -> None:
            got.append(FittedFishers.from_state(state, arguments, model=model, images=digest))

        parts = {"rose-fishers": arguments.as_dict(), "model": model, "images": digest}
        self.cache.state(cache_key(parts), fit, load)
        return got[0]
