"""The diffusion detectors: fitted on a tiny diffusion model, deterministic, saved and loaded alike,
their function evaluations per image reported; other models refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE, Detector, make_detector
from roseood.detectors.reconstruction import ssim
from roseood.errors import RoseError
from roseood.models.diffusion import DiffusionModel


@pytest.fixture(scope="module")
def model() -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()


SMALL = {"reconstruction": {"steps": 20, "skip": 8}}  # 3 starts, 30 NFEs (default: 25 starts, 1250)


@pytest.mark.float_sensitive
@pytest.mark.parametrize("method", ["denoising", "diffpath", "diffpath-1d", "msma", "reconstruction"])
def test_fit_score_save_load(model, method, tmp_path):
    g = torch.Generator().manual_seed(0)
    fit, test = torch.rand(60, 1, 8, 8, generator=g), torch.rand(6, 1, 8, 8, generator=g)
    det = make_detector(method, model, progress=False, **SMALL.get(method, {})).fit(fit)
    scores = det.score(test)
    assert scores.shape == (6,) and np.isfinite(scores).all()
    np.testing.assert_array_equal(det.score(test), scores)  # the same detector, tensors and kernels: exact
    det.save(tmp_path / "d.pt")
    # A loaded detector's tensors may have other layouts, so other kernels and rounding (float32 UNet):
    # measured 0 here; 1e-6 is ten float32 ulps.
    np.testing.assert_allclose(Detector.load(tmp_path / "d.pt", model).score(test), scores, rtol=1e-6)
    expected = {"denoising": 3, "diffpath": 10, "diffpath-1d": 10, "msma": 10, "reconstruction": 30}[method]
    assert det.nfe_per_image == expected


def test_diffusion_detectors_refuse_other_models(tiny_vae):
    with pytest.raises(RoseError, match="needs a diffusion model"):
        make_detector("diffpath", tiny_vae)


def test_ssim_is_one_for_equal_images_and_lower_otherwise():
    a = torch.rand(2, 3, 16, 16) * 2 - 1
    torch.testing.assert_close(ssim(a, a), torch.ones(2))
    assert (ssim(a, a.flip(3)) < 0.9).all()


def test_rose_batches_count_unet_rows_so_memory_does_not_grow_with_k(model):
    seen: list[int] = []
    hook = model.unet.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[0]))
    g = torch.Generator().manual_seed(1)
    fit, held, test = (torch.rand(n, 1, 8, 8, generator=g) for n in (12, 6, 5))
    try:
        small = ROSE(model, fisher="diag", layers="mid", batch_size=6).fit(fit, held_out=held)
        assert small.stream.images_per_batch(small.batch_size) == 2 and max(seen) == 6  # K = 3 rows per image
        scores = small.score(test)
    finally:
        hook.remove()
    big = ROSE(model, fisher="diag", layers="mid", batch_size=64).fit(fit, held_out=held)
    np.testing.assert_allclose(scores, big.score(test), rtol=1e-5)


def test_default_reconstruction_is_the_papers_25_starts_of_100_plms_steps(model):
    det = make_detector("reconstruction", model)
    assert det.starts == list(range(10, 1000, 40)) and det.nfe_per_image == sum(2 + 4 * j for j in range(25))


def test_density_selections(model):
    """The authors' cross-validated grid by default, capped by the fit set; BIC on request."""
    v = np.random.default_rng(0).normal(size=(60, 6))
    from roseood.detectors.diffusion import MixtureDensity

    cv = MixtureDensity()
    cv.fit(v)
    assert cv.chosen_["n_components"] == 5  # 50 and 100 capped at 54 training images / 10
    bic = MixtureDensity(selection="bic")
    bic.fit(v)
    assert bic.chosen_["n_components"] in (1, 2)
    with pytest.raises(RoseError, match="selection must be"):
        MixtureDensity(selection="aic")
