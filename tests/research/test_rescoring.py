"""``LayerScores``: one ROSE fit's layer scores of many image sets, its Fishers fitted once per model,
Fisher settings and images and then read from the cache (a confirmation run on new images refits
nothing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from research.rescoring import LayerScores

from roseood.detectors import ROSE
from roseood.evaluation.cache import CacheWarning, ResultCache
from roseood.models import VAE

pytestmark = pytest.mark.research  # not in the default run: see pyproject.toml's markers


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 1, 32, 32), dtype=np.uint8)


def _fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = ROSE.fit_fisher

    def counted(self: ROSE, x, fishers=None):  # type: ignore[no-untyped-def]
        if fishers is None:  # a fit, not Fishers taken
            calls.append(len(x))
        return real(self, x, fishers)

    monkeypatch.setattr(ROSE, "fit_fisher", counted)
    return calls


@pytest.mark.parametrize("fisher", ["diag", "ekfac"])
def test_the_fisher_is_fitted_once_and_new_image_sets_read_it_from_the_cache(
    tiny_vae: VAE, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fisher: str
) -> None:
    fits = _fits(monkeypatch)
    cache = ResultCache(tmp_path)
    fit, first, later = _images(24, 0), _images(6, 1), _images(6, 2)
    layers = tiny_vae.rose_layers()
    one = LayerScores(cache, tiny_vae, fisher, layers, fit, batch_size=8)
    one(first)
    again = LayerScores(cache, tiny_vae, fisher, layers, fit, batch_size=8)  # another run, same cache
    read = again(later).raw
    assert fits == [24]  # the second scorer took the stored Fishers
    fresh = LayerScores(ResultCache(tmp_path / "other"), tiny_vae, fisher, layers, fit, batch_size=8)
    # the stored Fishers are the fitted ones: the same float32 scores as a fit in this process up to
    # summation order (measured 1.8e-7 relative, float32's eps 1.2e-7); a Fisher of other images is far off
    np.testing.assert_allclose(read, fresh(later).raw, rtol=1e-5)
    other = LayerScores(ResultCache(tmp_path / "o2"), tiny_vae, fisher, layers, _images(24, 9), batch_size=8)
    assert np.abs(other(later).raw / read - 1).max() > 1e-3
    assert fits == [24, 24, 24]


def test_other_fisher_settings_or_images_fit_their_own(
    tiny_vae: VAE, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fits = _fits(monkeypatch)
    cache = ResultCache(tmp_path)
    layers = tiny_vae.rose_layers()
    test = _images(4, 3)
    LayerScores(cache, tiny_vae, "diag", layers, _images(24, 0), batch_size=8)(test)
    LayerScores(cache, tiny_vae, "kfac", layers, _images(24, 0), batch_size=8)(test)
    LayerScores(cache, tiny_vae, "diag", layers, _images(24, 5), batch_size=8)(test)
    LayerScores(cache, tiny_vae, "diag", layers[:1], _images(24, 0), batch_size=8)(test)
    assert fits == [24, 24, 24, 24]


def test_a_damaged_fisher_entry_is_refitted_with_a_warning(
    tiny_vae: VAE, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fits = _fits(monkeypatch)
    cache = ResultCache(tmp_path)
    layers, fit = tiny_vae.rose_layers(), _images(24, 0)
    LayerScores(cache, tiny_vae, "diag", layers, fit, batch_size=8)(_images(4, 1))
    (entry,) = (tmp_path / "states").glob("*.pt")
    entry.write_bytes(entry.read_bytes()[:-7])
    with pytest.warns(CacheWarning, match="cache entry not used"):
        LayerScores(cache, tiny_vae, "diag", layers, fit, batch_size=8)(_images(4, 2))
    assert fits == [24, 24]
