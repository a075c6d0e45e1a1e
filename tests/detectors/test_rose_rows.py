"""ROSE over a diffusion model's rows: ``rows="each"`` scores one gradient per (image, timestep) row against
the Fisher of all rows, one column per layer and timestep; ``rows="bands"`` scores each row against the
images' Fisher and sums the layers, one column per timestep. Both checked against a per-row autograd loop;
the band methods fit, score, save and load, and fit their density on in-distribution images only."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE, Detector, make_detector
from roseood.errors import RoseError
from roseood.evaluation.evaluate import evaluate
from roseood.evaluation.splits import EvalSpec
from roseood.models.diffusion import DiffusionModel

LAYERS = ["unet.conv_in", "unet.mid_block.attentions.0.to_q", "unet.mid_block.attentions.0.group_norm"]


@pytest.fixture(scope="module")
def model() -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()


def images(n: int, seed: int) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def row_gradients(model: DiffusionModel, x: torch.Tensor, layer: str) -> torch.Tensor:
    """(N·K, params) gradients of each row's ε-MSE, written from DDPM's forward process, image by image
    and pair by pair (no batching, no hooks)."""
    module = model.get_submodule(layer)
    params = [p for p in module.parameters() if p.requires_grad]
    out = []
    for image in x:
        for t, noise in zip(model.loss_timesteps, model.loss_noise, strict=True):
            a = model.alphas_cumprod[t]
            xt = a.sqrt() * (image * 2 - 1) + (1 - a).sqrt() * noise
            loss = (model.unet(xt[None], t[None]).sample[0] - noise).pow(2).sum()
            out.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    return torch.stack(out).double()


def test_each_row_is_scored_against_the_fisher_of_all_rows(model):
    fit, held, test = images(6, 0), images(4, 1), images(2, 2)
    det = ROSE(model, fisher="diag", layers=LAYERS, rows="each", damping=1e-6, progress=False)
    det.fit(fit, held_out=held)
    got = det.layer_scores(test).numpy()
    k = model.k
    assert det.columns == [f"{n}@{int(t)}" for n in LAYERS for t in model.loss_timesteps]
    assert got.shape == (2, len(LAYERS) * k)
    for j, layer in enumerate(LAYERS):
        fisher = row_gradients(model, fit, layer).pow(2).mean(0)
        g = row_gradients(model, test, layer)  # rows image-major: (image 0, t0), (image 0, t1), ...
        expected = (g.pow(2) / (fisher + 1e-6)).sum(1).view(2, k).numpy()
        # float32 UNet gradients summed in another order than the batched hooks: measured 3e-6 relative
        np.testing.assert_allclose(got[:, j * k : (j + 1) * k], expected, rtol=1e-4)


def test_each_row_column_has_its_own_statistics_and_the_file_keeps_them(model, tmp_path):
    det = ROSE(model, fisher="diag", layers="mid", rows="each", progress=False)
    det.fit(images(8, 0), held_out=images(6, 1))
    assert det.mean_ is not None and det.mean_.shape == (len(det.layers) * model.k,)
    raw = det.layer_scores(images(6, 1)).numpy()
    np.testing.assert_allclose(det.mean_.numpy(), raw.mean(0), rtol=1e-6)
    det.save(tmp_path / "d.pt")
    loaded = Detector.load(tmp_path / "d.pt", model)
    assert isinstance(loaded, ROSE) and loaded.rows == "each"
    test = images(3, 2)
    # the file's float32 squared-gradient sums: 6e-8 relative each, well inside 1e-6
    np.testing.assert_allclose(loaded.score(test), det.score(test), rtol=1e-6)


def test_summed_rows_are_the_images_loss(model):
    """``row_loss`` is the denoising loss row by row: its K rows of an image sum to the image's loss."""
    x = images(3, 0)
    rows = model.row_loss(x.repeat_interleave(model.k, 0))
    torch.testing.assert_close(rows.view(3, model.k).sum(1), model.rose_loss(x))


def test_rows_each_needs_a_model_with_rows_and_fixed_pairs(model, tiny_vae):
    with pytest.raises(RoseError, match="one row per image"):
        ROSE(tiny_vae, rows="each")
    with pytest.raises(RoseError, match="cannot be stochastic"):
        ROSE(model, rows="each", stochastic=True)
    with pytest.raises(RoseError, match=r"^rows must be one of sum, each, bands, got 'all'$"):
        ROSE(model, rows="all")
    with pytest.raises(RoseError, match=r"^rows='bands' scores each row .* one row per image$"):
        make_detector("rose-bands", tiny_vae)
    with pytest.raises(RoseError, match="each image 3 times"):
        model.row_loss(images(4, 0))


@pytest.mark.float_sensitive
def test_each_band_is_every_row_scored_against_the_images_fisher_summed_over_layers(model):
    fit, held, test = images(6, 0), images(4, 1), images(2, 2)
    det = ROSE(model, fisher="diag", layers=LAYERS, rows="bands", damping=1e-6, progress=False)
    det.fit(fit, held_out=held)
    k = model.k
    assert det.columns == [f"layers@{int(t)}" for t in model.loss_timesteps]
    expected = np.zeros((2, k))
    for layer in LAYERS:
        # the Fisher of each image's gradient: the sum of its K rows' gradients
        fisher = row_gradients(model, fit, layer).view(6, k, -1).sum(1).pow(2).mean(0)
        g = row_gradients(model, test, layer)
        expected += (g.pow(2) / (fisher + 1e-6)).sum(1).view(2, k).numpy()
    # float32 UNet gradients summed in another order than the batched hooks (as above)
    np.testing.assert_allclose(det.layer_scores(test).numpy(), expected, rtol=1e-4)


def test_bands_share_the_fisher_of_the_summed_rows(model):
    fit, held = images(6, 0), images(4, 1)
    summed = ROSE(model, fisher="diag", layers="mid", progress=False).fit(fit, held_out=held)
    bands = ROSE(model, fisher="diag", layers="mid", rows="bands", progress=False)
    bands.fit(fit, held_out=held, fishers=summed.fishers_)
    assert bands.fishers_ == summed.fishers_
    own = ROSE(model, fisher="diag", layers="mid", rows="bands", progress=False).fit(fit, held_out=held)
    test = images(3, 2)
    summed.score(test)  # the summed rows' layer scores of the same images are no band scores
    np.testing.assert_allclose(bands.score(test), own.score(test), rtol=1e-6)
    each = ROSE(model, fisher="diag", layers="mid", rows="each", progress=False)
    with pytest.raises(RoseError, match=r"other Fisher settings than this ROSE's: rows 'sum' ≠ 'each'$"):
        each.fit(fit, held_out=held, fishers=summed.fishers_)


@pytest.mark.float_sensitive
@pytest.mark.parametrize("method", ["rose-bands", "rose-bands-stats"])
def test_each_band_method_fits_scores_saves_and_loads(method, model, tmp_path):
    det = make_detector(method, model, layers="mid", progress=False)
    det.fit(images(24, 0), held_out=images(24, 1))
    scores = det.score(images(5, 2))
    assert scores.shape == (5,) and np.isfinite(scores).all()
    stats = [f"eps_mse@{int(t)}" for t in model.loss_timesteps] if method == "rose-bands-stats" else []
    assert det.extra_columns_ == stats
    det.save(tmp_path / "d.pt")
    loaded = Detector.load(tmp_path / "d.pt", model)
    assert isinstance(loaded, ROSE) and loaded.rows == "bands"
    # a saved EKFAC is float32 (docs/design.md): it moves the band scores by ~1e-5 relative, which the
    # density's log scale passes on as absolute; measured 1.2e-5 of the largest score
    scale = np.abs(scores).max()
    np.testing.assert_allclose(loaded.score(images(5, 2)), scores, rtol=0, atol=1e-4 * scale)


def test_band_statistics_are_the_scored_rows_losses_with_no_further_denoiser_pass(model, monkeypatch):
    """rose-bands-stats reads each pair's ε-MSE from the rows it differentiated: the same numbers as the
    model's own statistics (one pass fewer per image), computed without calling ``image_statistics``."""
    det = make_detector("rose-bands-stats", model, layers="mid", progress=False)
    x = images(5, 2)
    expected = torch.stack(list(model.image_statistics(x).values()), 1).double().numpy()
    calls = []
    monkeypatch.setattr(DiffusionModel, "image_statistics", lambda self, b: calls.append(b))
    det.fit(images(24, 0), held_out=images(24, 1))
    got, names = det.extra_features(x, torch.zeros(5), det._scores_and_loss(x)[1])
    assert calls == [] and names == det.extra_columns_
    # the same ε-MSE, in a batch of rows with gradients instead of chunks without: float32 rounding
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_the_last_layers_preset_is_named_and_its_backward_pass_stops_at_them(model):
    """rose-bands-stats-last4 scores the denoiser's last 4 layers in forward order: a ROSE built with those
    layers by hand is named after it, and no gradient reaches the down blocks (the backward pass stops at
    the deepest layer scored, which is what makes it cheap)."""
    det = make_detector("rose-bands-stats-last4", model, progress=False)
    assert det.name == "rose-bands-stats-last4" and det.layers == model.rose_layers("last:4")
    by_hand = ROSE(model, rows="bands", aggregate="gmm:k=auto", features="layers,stats", layers=det.layers)
    assert by_hand.name == "rose-bands-stats-last4"
    reached = []
    handle = model.unet.down_blocks[0].register_full_backward_hook(lambda *a: reached.append(1))
    try:
        det.fit(images(24, 0), held_out=images(24, 1))
        assert np.isfinite(det.score(images(3, 2))).all()
    finally:
        handle.remove()
    assert reached == []


def test_the_band_density_is_fitted_on_in_distribution_images_only(model):
    """The same spec with different OOD sets gives the same fitted detector, to the bit."""
    states = []
    for ood in (["mnist"], ["noise", "constant"]):
        spec = EvalSpec("fashion_mnist", ood, ["rose-bands-stats"], fit_samples=16, stats_samples=24)
        spec = replace(spec, test_samples=6, detector_kwargs={"rose-bands-stats": {"layers": "mid"}})
        result = evaluate(model, spec, progress=False, tpr=0.95)
        states.append(result.detectors["rose-bands-stats"].state())
    first, second = states
    for key in ("mean", "std"):
        assert torch.equal(first[key], second[key])
    for key, value in first["aggregation"].items():
        assert torch.equal(value, second["aggregation"][key])


def test_too_few_held_out_images_for_the_band_density_are_refused_in_one_line(model):
    det = make_detector("rose-bands", model, layers="mid", progress=False)
    with pytest.raises(RoseError, match=r"^gmm:k=auto needs at least 20 statistics images .* got 12$"):
        det.fit(images(8, 0), held_out=images(12, 1))
