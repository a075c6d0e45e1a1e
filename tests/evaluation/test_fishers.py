"""``FisherPool`` (``roseood.evaluation.fishers``): ROSEs with equal Fisher settings take one fit, and
ROSE-KFAC and ROSE-KFAC-Tikhonov one factor pass, each scoring as if it had fitted its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.detectors.rose import ROSE
from roseood.evaluation import FisherPool, ResultCache
from roseood.models.vae import VAE


@pytest.mark.filterwarnings("ignore::roseood.errors.DegenerateFitWarning")  # 8 statistics images
@pytest.mark.parametrize(
    ("kinds", "max_size"), [(("kfac", "kfac-tikhonov"), "auto"), (("kfac-tikhonov", "kfac"), "20K")]
)
def test_kfac_and_kfac_tikhonov_take_one_factor_pass_and_score_as_their_own_fits(
    tiny_vae: VAE,
    images: torch.Tensor,
    monkeypatch: pytest.MonkeyPatch,
    kinds: tuple[str, str],
    max_size: str,
) -> None:
    """Either order, without and with layers that ``max_size`` makes diagonal; EKFAC (a second pass,
    factors that stop early) and a KFAC of another damping fit their own."""
    fit, held, test = images[:16], images[16:], images[:6]
    fitted: list[str] = []
    real = ROSE.fit_fisher

    def counting(self: ROSE, x: torch.Tensor, fishers: object = None) -> object:
        if fishers is None:  # a fit, not Fishers taken
            fitted.append(self.fisher)
        return real(self, x, fishers)  # type: ignore[arg-type]

    def rose(fisher: str, **settings: object) -> ROSE:
        return ROSE(tiny_vae, fisher=fisher, max_size=max_size, progress=False, **settings)  # type: ignore[arg-type]

    monkeypatch.setattr(ROSE, "fit_fisher", counting)
    pool = FisherPool()
    dets = [rose(kind) for kind in (*kinds, "ekfac")] + [rose("kfac", damping=1e-3)]
    for det in dets:
        det.fit(fit, held_out=held, fishers=pool.fishers(det, fit))
    assert fitted == [kinds[0], "ekfac", "kfac"]
    first, second = (d.fishers_ for d in dets[:2])
    assert first is not None and second is not None and first is not second
    assert second.kinds == {n: k.replace(kinds[0], kinds[1]) for n, k in first.kinds.items()}
    if max_size != "auto":
        assert "diag" in second.kinds.values()  # the fallback layers' Fishers taken too
    fitted.clear()
    for det in dets[:2]:
        alone = rose(det.fisher).fit(fit, held_out=held)
        np.testing.assert_array_equal(det.score(test), alone.score(test))
        assert det.fishers_ is not None and alone.fishers_ is not None
        assert same(det.fishers_.state(), alone.fishers_.state())  # what a detector file keeps, rcond too
    assert fitted == list(kinds)


def test_fishers_taken_from_another_kind_are_kept_in_the_cache_as_a_fit_is(
    tiny_vae: VAE, images: torch.Tensor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached pool stores the KFAC-Tikhonov Fishers it took from KFAC's fit; a later pool on that
    cache loads both, fitting none."""
    fit = images[:16]
    dets = [ROSE(tiny_vae, fisher=kind, progress=False) for kind in ("kfac", "kfac-tikhonov")]
    pool = FisherPool(ResultCache(tmp_path))
    first = [pool.fishers(det, fit) for det in dets]
    monkeypatch.setattr(ROSE, "fit_fisher", lambda *_: pytest.fail("fitted, not loaded from the cache"))
    later = FisherPool(ResultCache(tmp_path))
    loaded = [later.fishers(det, fit) for det in dets]
    for made, read in zip(first, loaded, strict=True):
        assert read is not made and same(read.state(), made.state())


def same(a: object, b: object) -> bool:
    """Whether two Fisher states (nested dicts of tensors and numbers) hold equal values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    return a == b
