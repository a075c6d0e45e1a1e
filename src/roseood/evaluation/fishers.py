"""The one way ROSEs share fitted Fishers: a pool of ``FittedFishers`` by what identifies them (the Fisher
settings, the weights, the fit images: ``ROSE.fisher_key``), filled by fitting once, or from a result
cache, and handed to each ROSE explicitly (``ROSE.fit(..., fishers=)``, ``ROSE.fit_fisher(...,
fishers=)``). The ROSEs an evaluation will ask for (``expected``) that differ only in the Fisher kind are
fitted together, in one set of passes (``fit_together``: compact EKFAC taken from EKFAC's fit, KFAC and
KFAC-Tikhonov from one factor pass, a diagonal Fisher on the same gradients)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from roseood.contracts import SharesFishers
from roseood.detectors.rose import FisherArguments, FittedFishers, fit_together, joinable
from roseood.evaluation.cache import ResultCache, cache_key
from roseood.progress import note

Key = tuple[Hashable, str, str]  # the Fisher settings, the weights' fingerprint, the fit images' digest


class FisherPool:
    """The Fishers fitted so far (shared: ``FittedFishers.share``, so the ROSEs given them read each
    other's raw scores of the same images), and with a ``cache`` those an earlier run stored there.
    ``expected``: the detectors that will ask, so that the first of those that differ only in the Fisher
    kind fits them all."""

    def __init__(self, cache: ResultCache | None = None, expected: Sequence[object] = ()) -> None:
        self.cache = cache
        self.expected = [d for d in expected if isinstance(d, SharesFishers)]
        self._found: dict[Hashable, tuple[str, FittedFishers]] = {}

    def fishers(self, det: SharesFishers, images: Any) -> FittedFishers:
        """The Fishers ``det.fit_fisher(images)`` would fit: the pool's, else the cache's, else fitted now
        (``_fit``) and kept in both."""
        key = det.fisher_key(images)
        if key in self._found:
            by, found = self._found[key]
            if det.progress:
                note(f"{det.name}: the Fishers fitted {by}")
            return found
        found = self._fitted(det, images, key) if self.cache is not None else self._fit(det, images, key)
        self._found[key] = f"for {det.name} (the same settings and images)", found.share()
        return found

    def _fit(self, det: SharesFishers, images: Any, key: Key) -> FittedFishers:
        """``det``'s Fishers fitted now, and in the same passes those of the expected ROSEs on the same
        weights and images that can be (``joinable``: settings that differ only in the kind, a
        deterministic loss) and that neither the pool nor the cache holds; these are pooled (and cached)
        at once."""
        beside: dict[Key, None] = {}
        for other in self.expected:
            k = other.fisher_key(images)
            kin = k[1:] == key[1:] and k != key and joinable(det, k[0])
            if kin and k not in self._found and not self._cached(k):
                beside[k] = None
        if not beside:
            fitted: FittedFishers = det.fit_fisher(images)
            return fitted
        made, _ = fit_together(det, images, [k[0] for k in beside])
        for k, fits in zip(beside, made[1:], strict=True):
            self._found[k] = f"beside {det.name}'s (one set of passes)", fits.share()
            if self.cache is not None:
                self.cache.state(self._cache_key(k), fits.state, lambda _: None)
        return made[0]

    def _fitted(self, det: SharesFishers, images: Any, key: Key) -> FittedFishers:
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

        self.cache.state(self._cache_key(key), fit, load)
        return got[0]

    def _cached(self, key: Key) -> bool:
        return self.cache is not None and self.cache.has_state(self._cache_key(key))

    @staticmethod
    def _cache_key(key: Key) -> str:
        arguments, model, digest = key
        assert isinstance(arguments, FisherArguments)
        return cache_key({"rose-fishers": arguments.as_dict(), "model": model, "images": digest})
