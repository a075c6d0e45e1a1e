"""Likelihood Regret: the batched (vmap) encoder optimisation equals a per-image torch.optim.Adam loop."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from roseood.detectors import DETECTORS, METHODS, Detector, LikelihoodRegret, make_detector
from roseood.errors import DataError, RoseError
from roseood.models.glow import Glow
from roseood.models.vae import VAE
from roseood.randomness import per_input_seed
from tests.detectors.fake_models import ScaledSumModel, tiny_vae

STEPS = 4


def _images(n: int = 3) -> Tensor:
    return torch.rand(n, 1, 32, 32, generator=torch.Generator().manual_seed(1))


def _loop_encoders(model: VAE, x: Tensor, noise: Tensor, lr: float) -> list[nn.Module]:
    """The authors' procedure: per image a deep-copied encoder (eval) and torch.optim.Adam."""
    encoders = []
    for i in range(x.shape[0]):
        enc = copy.deepcopy(model.encoder).eval()
        opt = torch.optim.Adam(enc.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=5e-5)
        xi = x[i : i + 1]
        for step in range(noise.shape[0]):
            mu, logvar = enc(xi)
            z = mu + noise[step, i : i + 1] * (0.5 * logvar).exp()
            kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
            loss = (model.reconstruction_nll(model.decoder(z), xi) + kl).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        encoders.append(enc)
    return encoders


@pytest.mark.parametrize("sampled", [True, False])
def test_batched_optimisation_equals_per_image_adam(sampled: bool) -> None:
    # float64: Adam divides by √v, so float32 rounding in near-zero gradients could flip whole steps
    model, x = tiny_vae().double(), _images().double()
    noise = torch.randn(STEPS, 3, 4, dtype=torch.float64) if sampled else torch.zeros(STEPS, 3, 4).double()
    det = LikelihoodRegret(model, steps=STEPS, lr=1e-2, sample=sampled)
    params = det.optimize_encoders(x, noise if sampled else None)
    assert all(p.grad is None for p in model.parameters())  # the model itself is untouched
    moved = 0.0
    for i, enc in enumerate(_loop_encoders(model, x, noise, lr=1e-2)):
        for name, p in enc.named_parameters():
            # float64 throughout: rounding (2⁻⁵³ an operation, on any CPU) stays far inside these tolerances
            assert torch.allclose(params[name][i], p.detach(), rtol=1e-9, atol=1e-12), name
            moved = max(moved, (p.detach() - model.encoder.get_parameter(name)).abs().max().item())
    assert moved > 1e-3  # the optimisation did something


class _PerImage(nn.Module):
    """Reference encoder: image i goes through its own module."""

    def __init__(self, encoders: list[nn.Module]) -> None:
        super().__init__()
        self.encoders = nn.ModuleList(encoders)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        outs = [enc(x[i : i + 1]) for i, enc in enumerate(self.encoders)]
        return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


def test_regret_is_iwae_before_minus_after() -> None:
    model, x = tiny_vae().double(), _images().double()
    det = LikelihoodRegret(model, steps=STEPS, lr=1e-2, k=5, sample=False)
    original = model.encoder
    torch.manual_seed(7)
    regret = det.regret(x)
    assert model.encoder is original  # the temporary swap is undone
    reference = _PerImage(_loop_encoders(model, x, torch.zeros(STEPS, 3, 4).double(), lr=1e-2))
    with torch.no_grad(), per_input_seed(det.seed):  # the IWAE samples the detector draws per image
        before = model.iwae_nll(x, 5)
        model.encoder = reference
        try:
            after = model.iwae_nll(x, 5)
        finally:
            model.encoder = original
    assert torch.allclose(regret, before - after, rtol=1e-9, atol=1e-9)


def test_detector_api() -> None:
    """score() is each image's regret, float64, and does not depend on which images share a batch (each
    image's IWAE samples are drawn from its own seed): batches of 2 and of 5 give the same scores."""
    model, x = tiny_vae(), _images(5)
    det = LikelihoodRegret(model, steps=2, k=3, batch_size=2).fit(x[:1])
    scores = det.score(x)
    assert scores.shape == (5,) and scores.dtype == np.float64
    np.testing.assert_array_equal(scores, det.regret(x).numpy())
    whole = LikelihoodRegret(model, steps=2, k=3, batch_size=5).fit(x[:1]).score(x)
    np.testing.assert_allclose(
        whole, scores, rtol=1e-6, atol=1e-9
    )  # measured equal; a batched conv may round


def test_save_load_round_trip(tmp_path: Path) -> None:
    model, x = tiny_vae(), _images(3)
    det = LikelihoodRegret(model, steps=2, k=3, batch_size=2).fit(x[:1])
    torch.manual_seed(0)
    scores = det.score(x)
    det.save(tmp_path / "lr.pt")
    loaded = Detector.load(tmp_path / "lr.pt", model)
    assert isinstance(loaded, LikelihoodRegret) and loaded.get_params() == det.get_params()
    torch.manual_seed(0)
    assert np.array_equal(loaded.score(x), scores)


def test_registered() -> None:
    assert DETECTORS["lr"] is LikelihoodRegret
    assert METHODS["lr"][0] is LikelihoodRegret
    det = make_detector("lr", tiny_vae())
    assert (det.steps, det.lr, det.k, det.weight_decay) == (100, 1e-4, 20, 5e-5)


def test_bad_inputs_raise() -> None:
    for model in (None, Glow(levels=1, steps=1, hidden=4), ScaledSumModel()):
        with pytest.raises(RoseError, match="VAE"):
            LikelihoodRegret(model)
    model = tiny_vae()
    for kwargs in ({"steps": -1}, {"lr": 0.0}, {"k": 0}, {"betas": (0.9, 1.0)}, {"batch_size": 0}):
        with pytest.raises(RoseError):
            LikelihoodRegret(model, **kwargs)
    det = LikelihoodRegret(model, steps=2)
    with pytest.raises(DataError):
        det.optimize_encoders(_images(2), noise=torch.zeros(3, 2, 4))
    with pytest.raises(RoseError, match="not fitted"):
        det.score(_images(1))
    with pytest.raises(DataError):
        det.fit(_images(1)).score(torch.rand(1, 3, 32, 32))
