"""``FisherPool`` (``roseood.evaluation.fishers``): ROSEs with equal Fisher settings take one fit, and
those that differ only in the Fisher kind are fitted in one set of passes, each scoring as if it had
fitted its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.detectors.rose import ROSE, fit_together
from roseood.detectors.rose import detector as detector_module
from roseood.errors import RoseError
from roseood.evaluation import FisherPool, ResultCache
from roseood.evaluation import fishers as fishers_module
from roseood.models.glow import Glow
from roseood.models.vae import VAE

KINDS = ("kfac", "kfac-tikhonov", "ekfac", "ekfac-compact", "ekfac-compact-wide", "diag")


def counted(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The Fisher kinds of each fit ``fit_together`` makes from now on (whoever calls it)."""
    fits: list[list[str]] = []

    def counting(lead: ROSE, images: object, beside: tuple = ()) -> object:
        fits.append([lead.fisher, *(a.fisher for a in beside)])
        return fit_together(lead, images, beside)  # type: ignore[arg-type]

    for module in (fishers_module, detector_module):
        monkeypatch.setattr(module, "fit_together", counting)
    return fits


@pytest.mark.filterwarnings("ignore::roseood.errors.DegenerateFitWarning")  # 8 statistics images
@pytest.mark.parametrize(("kinds", "max_size"), [(KINDS, "auto"), (KINDS[::-1], "20K")])
def test_roses_differing_only_in_kind_are_fitted_in_one_set_of_passes_each_as_its_own_fit(
    tiny_vae: VAE,
    images: torch.Tensor,
    monkeypatch: pytest.MonkeyPatch,
    kinds: tuple[str, ...],
    max_size: str,
) -> None:
    """The first of the expected ROSEs to ask fits them all in one set of passes (KFAC-Tikhonov on KFAC's
    factors, compact EKFAC and its wide twin on EKFAC's, KFAC and the diagonal one fed in EKFAC's second
    pass), in either order and with layers that ``max_size`` makes diagonal; a KFAC of another damping
    fits its own. Each is its own fit to the last bit: the same Fishers, the same scores."""
    fit, held, test = images[:16], images[16:], images[:6]

    def rose(fisher: str, **settings: object) -> ROSE:
        return ROSE(tiny_vae, fisher=fisher, max_size=max_size, progress=False, **settings)  # type: ignore[arg-type]

    fits = counted(monkeypatch)
    dets = [rose(kind) for kind in kinds] + [rose("kfac", damping=1e-3)]
    pool = FisherPool(expected=dets)
    for det in dets:
        det.fit(fit, held_out=held, fishers=pool.fishers(det, fit))
    assert fits == [list(kinds), ["kfac"]]
    if max_size != "auto":
        assert "diag" in dets[0].fishers_.kinds.values()  # type: ignore[union-attr]
    fits.clear()
    for det in dets[:-1]:
        alone = rose(det.fisher).fit(fit, held_out=held)
        assert det.fishers_ is not None and alone.fishers_ is not None
        np.testing.assert_array_equal(det.score(test), alone.score(test))
        assert same(det.fishers_.state(), alone.fishers_.state())  # what a detector file keeps, rcond too
    assert fits == [[k] for k in kinds]


def test_a_stochastic_loss_fits_each_kind_apart(
    tiny_vae: VAE, images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass of a stochastic loss draws anew: kinds fitted together would not be their own fits."""
    fits = counted(monkeypatch)
    dets = [ROSE(tiny_vae, fisher=k, stochastic=True, progress=False) for k in ("ekfac", "diag")]
    pool = FisherPool(expected=dets)
    for det in dets:
        pool.fishers(det, images[:16])
    assert fits == [["ekfac"], ["diag"]]
    with pytest.raises(RoseError, match="diag Fishers cannot be fitted beside ROSE-ekfac"):
        fit_together(dets[0], images[:16], [dets[1].fisher_arguments])


def test_kinds_reading_other_gradient_coordinates_of_a_reparameterised_layer_are_fitted_apart(
    images: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Glow's LU-factorised 1×1 convolutions: a diagonal Fisher reads their own parameters, Kronecker ones
    the weight, so ROSE-diag is fitted apart from ROSE-EKFAC there; KFAC beside it reads the same."""
    torch.manual_seed(0)
    glow = Glow(in_channels=1, image_size=32, levels=2, steps=2, hidden=8).eval()
    dets = [ROSE(glow, fisher=k, layers="invconv", progress=False) for k in ("ekfac", "diag", "kfac")]
    fits = counted(monkeypatch)
    pool = FisherPool(expected=dets)
    for det in dets:
        pool.fishers(det, images[:16])
    assert fits == [["ekfac", "kfac"], ["diag"]]


def test_fishers_fitted_together_are_kept_in_the_cache_as_a_fit_is(
    tiny_vae: VAE, images: torch.Tensor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached pool stores each of the Fishers it fitted together; a later pool on that cache loads
    them all, fitting none."""
    fit = images[:16]
    dets = [ROSE(tiny_vae, fisher=kind, progress=False) for kind in ("kfac", "kfac-tikhonov", "diag")]
    pool = FisherPool(ResultCache(tmp_path), expected=dets)
    first = [pool.fishers(det, fit) for det in dets]
    fits = counted(monkeypatch)
    later = FisherPool(ResultCache(tmp_path), expected=dets)
    loaded = [later.fishers(det, fit) for det in dets]
    assert fits == []
    for made, read in zip(first, loaded, strict=True):
        assert read is not made and same(read.state(), made.state())


def same(a: object, b: object) -> bool:
    """Whether two Fisher states (nested dicts of tensors and numbers) hold equal values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a, b)
    return a == b
