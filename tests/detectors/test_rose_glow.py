"""ROSE on Glow: EKFAC and the dense Fisher on LU-decomposed invertible 1×1 convolutions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.curvature import LayerGradients, make_fisher
from roseood.detectors import ROSE, Detector
from roseood.models import Glow


@pytest.fixture
def tiny_glow() -> Glow:
    torch.manual_seed(0)
    glow = Glow(in_channels=1, image_size=8, levels=2, steps=2, hidden=8, lu=True)
    glow.train()
    with torch.no_grad():
        glow.train_loss(torch.rand(32, 1, 8, 8))
        for p in glow.parameters():  # move off the zero-initialised start so no layer is trivial
            p.add_(0.05 * torch.randn_like(p))
    return glow.eval()


def test_dense_rose_is_the_same_in_lu_and_weight_coordinates(tiny_glow):
    """sᵀF⁻¹s is invariant to an invertible reparameterisation: the LU parameters (lower, upper,
    log-scale) and the effective weight W must give the same exact-Fisher score — which also checks
    that the log-determinant term is in the weight-space gradient."""
    x = torch.rand(400, 1, 8, 8)
    names = tiny_glow.rose_layers("invconv")[:1]
    scores = {}
    for coords in ("native", "weight"):
        grads = LayerGradients(tiny_glow, names, coords=coords)(tiny_glow.rose_loss, x)[names[0]]
        f = make_fisher("dense", 0.0)
        f.update(grads, 0)
        f.end_pass(0)
        scores[coords] = f.quad(grads)
    torch.testing.assert_close(scores["native"], scores["weight"], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("fisher", "layers"), [("ekfac", "invconv"), ("diag", "invconv"), ("diag", "all")])
def test_rose_runs_on_glow_and_round_trips(tiny_glow, tmp_path, fisher, layers):
    x = torch.rand(40, 1, 8, 8)
    det = ROSE(tiny_glow, fisher=fisher, layers=layers, batch_size=16).fit(x[:30], held_out=x[30:])
    s = det.score(x[:5])
    assert s.shape == (5,) and np.isfinite(s).all()
    det.save(tmp_path / "d.pt")
    # the file keeps the Fisher compactly (float32 eigenvalues): a score near 0 moves by ~1e-4 of itself
    # but by < 1e-5 of the largest score, so the tolerance is also relative to the largest score, as in
    # tests/detectors/test_rose.py's save-load test
    loaded = Detector.load(tmp_path / "d.pt", tiny_glow).score(x[:5])
    np.testing.assert_allclose(loaded, s, rtol=1e-5, atol=1e-5 * np.abs(s).max())
