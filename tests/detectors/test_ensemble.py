"""Ensemble: members' scores z-normalised on held-out inputs and combined; save/load with their models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.detectors import NLL, ROSE, Detector, Ensemble, LikelihoodRatio
from roseood.errors import CheckpointError, DataError, RoseError
from roseood.integrity import seal
from tests.detectors.fake_models import ScaledSumModel, tiny_vae


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("combine", ["mean", "max"])
def test_scores_are_the_combined_z_scores_of_the_members(combine: str) -> None:
    models = [ScaledSumModel(2.0, 1.0), ScaledSumModel(-0.5, 3.0), ScaledSumModel(1.0, -7.0)]
    x, held, test = _images(8), _images(10, seed=1), _images(5, seed=2)
    det = Ensemble([NLL(m) for m in models], combine=combine).fit(x, held_out=held)
    raw_held = np.stack([m.nll(held).double().numpy() for m in models], 1)
    raw = np.stack([m.nll(test).double().numpy() for m in models], 1)
    z = (raw - raw_held.mean(0)) / raw_held.std(0)
    assert np.allclose(det.member_scores(test), z)
    assert np.allclose(det.score(test), z.mean(1) if combine == "mean" else z.max(1))
    assert np.allclose(det.member_scores(held).mean(0), 0) and np.allclose(det.member_scores(held).std(0), 1)


def test_default_split_holds_out_the_last_fifth() -> None:
    model = ScaledSumModel(1.0)
    x = _images(20)
    det = Ensemble([NLL(model), NLL(ScaledSumModel(2.0))]).fit(x)
    assert det.mean_ is not None
    assert np.isclose(det.mean_[0], model.nll(x[16:]).double().mean().item())


def test_rose_members_save_and_load_with_their_models(tmp_path: Path) -> None:
    models = [tiny_vae(0), tiny_vae(1)]
    x, test = _images(24), _images(6, seed=3)
    det = Ensemble([ROSE(m, fisher="diag", progress=False) for m in models]).fit(x[:16], held_out=x[16:])
    scores = det.score(test)
    assert scores.shape == (6,) and np.isfinite(scores).all()
    det.calibrate(x[16:])
    det.save(tmp_path / "ens.pt")
    loaded = Ensemble.load(tmp_path / "ens.pt", models=models)
    assert isinstance(loaded, Ensemble) and loaded.threshold_ == det.threshold_
    assert np.allclose(loaded.score(test), scores)
    with pytest.raises(CheckpointError, match="member 0 was fitted on model"):
        Ensemble.load(tmp_path / "ens.pt", models=models[::-1])
    with pytest.raises(CheckpointError, match="needs 2 models, got 1"):
        Detector.load(tmp_path / "ens.pt", models[0])  # the generic loader says what it needs
    obj = torch.load(tmp_path / "ens.pt", weights_only=False)
    obj["state"]["members"] = obj["state"]["members"][:1]  # a damaged file: one member's state lost
    torch.save(seal(obj), tmp_path / "damaged.pt")
    with pytest.raises(CheckpointError, match="not a complete state of an ensemble of 2"):
        Ensemble.load(tmp_path / "damaged.pt", models=models)
    ROSE(models[0], fisher="diag", progress=False).fit(x[:16], held_out=x[16:]).save(tmp_path / "r.pt")
    with pytest.raises(CheckpointError, match="not an ensemble"):
        Ensemble.load(tmp_path / "r.pt", models=models)


def test_an_ensemble_of_one_is_its_member_rescaled(tmp_path: Path) -> None:
    model = ScaledSumModel(3.0, 2.0)
    x, test = _images(10), _images(4, seed=5)
    det = Ensemble([NLL(model)]).fit(x[:5], held_out=x[5:])
    det.save(tmp_path / "one.pt")
    raw = NLL(model).fit(x).score(test)
    assert det.mean_ is not None and det.std_ is not None
    assert np.allclose(det.score(test), (raw - det.mean_[0]) / det.std_[0])
    assert np.allclose(Detector.load(tmp_path / "one.pt", model).score(test), det.score(test))


def test_bad_members_and_inputs_get_clear_errors() -> None:
    x = _images(10)
    with pytest.raises(RoseError, match="at least one member"):
        Ensemble([])
    with pytest.raises(RoseError, match="background model"):
        Ensemble([LikelihoodRatio(ScaledSumModel(1.0), background=ScaledSumModel(2.0))])
    with pytest.raises(RoseError, match="different inputs"):
        Ensemble([NLL(ScaledSumModel(1.0)), NLL(ScaledSumModel(1.0, image_size=16))])
    with pytest.raises(RoseError, match="unknown ensemble combination"):
        Ensemble([NLL(ScaledSumModel(1.0))], combine="median")
    with pytest.raises(DataError, match="constant or non-finite"):  # a member that cannot be scaled
        Ensemble([NLL(ScaledSumModel(0.0, 1.0)), NLL(ScaledSumModel(1.0))]).fit(x[:5], held_out=x[5:])
    with pytest.raises(DataError, match="at least 2 held-out"):
        Ensemble([NLL(ScaledSumModel(1.0))]).fit(x[:5], held_out=x[5:6])
    with pytest.raises(RoseError, match="not fitted"):
        Ensemble([NLL(ScaledSumModel(1.0))]).score(x)
    with pytest.raises(DataError):  # wrong image shape, checked once for all members
        Ensemble([NLL(ScaledSumModel(1.0))]).fit(torch.rand(10, 3, 8, 8))


def test_an_ensemble_over_noise_draws_of_one_diffusion_model(tmp_path: Path) -> None:
    """docs/diffusion.md's recipe: copies of one diffusion model at other noise draws are other models
    (their pairs are in the fingerprint); the ensemble fits, scores and reloads with them in order."""
    import copy

    from roseood.models.diffusion import DiffusionModel

    torch.manual_seed(0)
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2}).eval()
    draws = [copy.deepcopy(model) for _ in range(2)]
    for seed, m in enumerate(draws):
        m.set_denoising(seed=seed)
    x = torch.rand(14, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    ens = Ensemble([ROSE(m, fisher="diag", layers="mid") for m in draws]).fit(x[:10], held_out=x[10:])
    members = ens.member_scores(x[:3])
    assert members.shape == (3, 2) and not np.allclose(members[:, 0], members[:, 1])  # the draws differ
    ens.save(tmp_path / "e.pt")
    np.testing.assert_allclose(Ensemble.load(tmp_path / "e.pt", models=draws).score(x[:3]), ens.score(x[:3]))
    with pytest.raises(CheckpointError):
        Ensemble.load(tmp_path / "e.pt", models=draws[::-1])  # each member checks its draw


def test_rose_beside_diffpath_on_one_diffusion_model(tmp_path: Path) -> None:
    """docs/diffusion.md's ROSE + DiffPath recipe: two methods on one model; its score is the mean of the
    parts' scores, each z-normalised by its own mean and standard deviation on the held-out images (the
    combination the lab notebook's draw-spread runs measured); it saves and reloads with the model."""
    from roseood.detectors import DiffPath
    from roseood.models.diffusion import DiffusionModel

    torch.manual_seed(0)
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2}).eval()
    x = torch.rand(30, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    fit, held, test = x[:16], x[16:24], x[24:]
    ens = Ensemble([ROSE(model, fisher="diag", layers="mid"), DiffPath(model, steps=4, density="bic")]).fit(
        fit, held_out=held
    )
    parts = []
    for det in (ROSE(model, fisher="diag", layers="mid"), DiffPath(model, steps=4, density="bic")):
        det.fit(fit, held_out=held)
        h = det.score(held)
        parts.append((det.score(test) - h.mean()) / h.std())
    np.testing.assert_allclose(ens.score(test), np.mean(parts, 0), rtol=1e-6)
    ens.save(tmp_path / "e.pt")
    np.testing.assert_allclose(
        Ensemble.load(tmp_path / "e.pt", models=[model, model]).score(test), ens.score(test)
    )
