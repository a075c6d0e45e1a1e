"""ROSE with ``rows="each"`` on a diffusion model: one gradient per (image, timestep) row, scored against
the Fisher of all rows, one column per layer and timestep; checked against a per-row autograd loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE, Detector
from roseood.errors import RoseError
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
    torch.testing.assert_close(rows.view(3, model.k).sum(1), model.denoising_loss(x))


def test_rows_each_needs_a_model_with_rows_and_fixed_pairs(model, tiny_vae):
    with pytest.raises(RoseError, match="one row per image"):
        ROSE(tiny_vae, rows="each")
    with pytest.raises(RoseError, match="cannot be stochastic"):
        ROSE(model, rows="each", stochastic=True)
    with pytest.raises(RoseError, match="rows must be 'sum' or 'each'"):
        ROSE(model, rows="all")
    with pytest.raises(RoseError, match="each image 3 times"):
        model.row_loss(images(4, 0))
