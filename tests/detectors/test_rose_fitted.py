"""ROSE's settings as typed arguments and its fitted Fishers as an artifact of their own
(``roseood.detectors.rose``): ``__init__`` stores and checks, ``fit`` builds, and the Fishers a fit made
can be saved, loaded and taken by any ROSE with the same Fisher settings, weights and images."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.detectors import Detector
from roseood.detectors.rose import ROSE, FisherArguments, FittedFishers, ScoreArguments
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import seal
from roseood.models.vae import VAE


def test_init_stores_the_settings_and_builds_nothing(tiny_vae: VAE) -> None:
    """Nothing that ``fit`` makes exists before it: no layer gradients, aggregation or Fishers."""
    det = ROSE(tiny_vae, fisher="diag", aggregate="gmm:k=2", progress=False)
    assert "grads" not in vars(det.stream) and det.aggregation_ is None and det.fishers_ is None
    assert det.get_params()["aggregate"] == "gmm:k=2"
    args = det.fisher_arguments
    assert args == FisherArguments("diag", tuple(det.layers), rows="sum")
    assert det.score_arguments == ScoreArguments(aggregate="gmm:k=2")
    hash(args)  # a key: ROSEs with equal ones share a fit


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fisher": "full"}, r"^unknown Fisher approximation 'full'"),
        ({"damping": -1.0}, r"^damping must be"),
        ({"rcond": 2.0}, r"^rcond must be"),
        ({"p": 0.5}, r"^p must be"),
        ({"stats_fraction": 1.0}, r"^stats_fraction must lie in \(0, 1\)"),
        ({"aggregate": "gmm:q=3"}, r"^aggregation 'gmm' does not take q"),
        ({"rows": "pairs"}, r"^rows must be one of sum, each, bands, got 'pairs'$"),
        ({"max_size": "lots"}, r"max_size"),
        ({"adjust": "sideways"}, r"^unknown ROSE adjustment 'sideways'"),
    ],
)
def test_a_bad_setting_is_refused_at_construction(tiny_vae: VAE, settings: dict, message: str) -> None:
    with pytest.raises(RoseError, match=message):
        ROSE(tiny_vae, **settings)


def test_the_arguments_check_themselves() -> None:
    assert FisherArguments(max_size="NONE").max_size is None and FisherArguments(memory="1K").memory == 1024
    assert ScoreArguments(beta=(0.0, 1.0), p=2.0).aggregation().params()["p"] == 2.0
    assert ScoreArguments().aggregation().params()["p"] == math.inf
    with pytest.raises(RoseError, match=r"^a Fisher is fitted on rows 'sum' or 'each', got 'bands'$"):
        FisherArguments(rows="bands")


def _fitted(model: VAE, images: torch.Tensor) -> ROSE:
    return ROSE(model, fisher="kfac", progress=False).fit(images[:16], held_out=images[16:])


def test_fishers_saved_and_loaded_give_the_same_scores(
    tiny_vae: VAE, images: torch.Tensor, tmp_path: Path
) -> None:
    """A ROSE of another aggregation takes the loaded Fishers and scores as if it had fitted them."""
    first = _fitted(tiny_vae, images)
    assert first.fishers_ is not None
    first.fishers_.save(tmp_path / "f.pt")
    loaded = FittedFishers.load(tmp_path / "f.pt", tiny_vae)
    assert loaded.arguments == first.fisher_arguments and loaded.kinds == first.fishers_.kinds
    assert loaded.images == first.fishers_.images is not None
    taker = ROSE(tiny_vae, fisher="kfac", aggregate="max-z", progress=False)
    taker.fit(images[:16], held_out=images[16:], fishers=loaded)
    own = ROSE(tiny_vae, fisher="kfac", aggregate="max-z", progress=False).fit(
        images[:16], held_out=images[16:]
    )
    # the same float operations on the same Fisher values (saved float32 eigenvalues as fitted): equal
    # up to the eigenbases' compact storage (Householder vectors), rounding at 1e-6 relative
    np.testing.assert_allclose(taker.score(images[:6]), own.score(images[:6]), rtol=1e-5)


def test_loading_fishers_refuses_other_weights_and_damaged_files(
    tiny_vae: VAE, images: torch.Tensor, tmp_path: Path
) -> None:
    first = _fitted(tiny_vae, images)
    assert first.fishers_ is not None
    path = tmp_path / "f.pt"
    first.fishers_.save(path)
    other = VAE(in_channels=1, ngf=4, nz=4).eval()
    with pytest.raises(CheckpointError, match=r"f\.pt: Fishers fitted on model \w+, the given one is \w+$"):
        FittedFishers.load(path, other)
    (tmp_path / "bad.pt").write_bytes(path.read_bytes()[:-40])
    with pytest.raises(CheckpointError, match=r"bad\.pt"):
        FittedFishers.load(tmp_path / "bad.pt", tiny_vae)
    first.save(tmp_path / "det.pt")
    with pytest.raises(
        CheckpointError, match=r"det\.pt: expected a roseood-fishers file, found 'roseood-detector'$"
    ):
        FittedFishers.load(tmp_path / "det.pt", tiny_vae)


def _scaled(obj, factor: float):
    """``obj`` with every float tensor in it multiplied by ``factor``."""
    if isinstance(obj, torch.Tensor):
        return obj * factor if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _scaled(v, factor) for k, v in obj.items()}
    return [_scaled(v, factor) for v in obj] if isinstance(obj, list) else obj


@pytest.mark.parametrize("fisher", ["kfac", "ekfac", "ekfac-compact"])
def test_fishers_whose_scores_are_not_finite_are_refused_never_scored_nan(
    tiny_vae: VAE, images: torch.Tensor, tmp_path: Path, fisher: str
) -> None:
    """A Fishers file whose tensors were multiplied by 1000 and resealed loads (every field is of its
    type and shape), but its layer scores are not finite: a ROSE taking it is refused at fit, in one line
    naming the cause, and a fitted ROSE that meets such scores refuses to score, never returning NaN."""
    first = ROSE(tiny_vae, fisher=fisher, progress=False).fit(images[:16], held_out=images[16:])
    assert first.fishers_ is not None
    first.fishers_.save(tmp_path / "f.pt")
    obj = torch.load(tmp_path / "f.pt", weights_only=True)
    torch.save(seal(obj | {"state": _scaled(obj["state"], 1000.0)}), tmp_path / "f.pt")
    damaged = FittedFishers.load(tmp_path / "f.pt", tiny_vae)
    cause = r"all 5 layers \(a singular or damaged Fisher, or overflowing gradients\)"
    at_fit = rf"^ROSE-{fisher}: non-finite scores on the statistics images from {cause}, so every score"
    with pytest.raises(RoseError, match=at_fit):
        ROSE(tiny_vae, fisher=fisher, progress=False).fit(images[:16], held_out=images[16:], fishers=damaged)
    first.fishers_ = damaged  # fitted statistics, then Fishers that give non-finite layer scores
    with pytest.raises(RoseError, match=rf"^ROSE-{fisher}: 6 of 6 images get non-finite scores from {cause}"):
        first.score(images[:6])


def test_a_state_for_other_layers_is_refused(tiny_vae: VAE, images: torch.Tensor) -> None:
    first = _fitted(tiny_vae, images)
    assert first.fishers_ is not None
    fewer = FisherArguments("kfac", tuple(first.layers[:1]))
    with pytest.raises(CheckpointError, match=r"^field 'state.fishers' must hold one Fisher per layer"):
        FittedFishers.from_state(first.fishers_.state(), fewer, model="m")


def test_a_detector_file_keeps_what_its_fishers_were_fitted_on(
    tiny_vae: VAE, images: torch.Tensor, tmp_path: Path
) -> None:
    """The Fishers of a loaded detector know their fit images' digest, so another ROSE may take them
    (``rose evaluate`` adding a variant to a cached run); a damaged digest field is a one-line error."""
    first = _fitted(tiny_vae, images)
    assert first.fishers_ is not None
    first.save(tmp_path / "d.pt")
    loaded = Detector.load(tmp_path / "d.pt", tiny_vae)
    assert isinstance(loaded, ROSE) and loaded.fishers_ is not None
    assert loaded.fishers_.images == first.fishers_.images is not None
    taker = ROSE(tiny_vae, fisher="kfac", aggregate="max-z", progress=False)
    taker.fit(images[:16], held_out=images[16:], fishers=loaded.fishers_)  # checked: the same images
    obj = torch.load(tmp_path / "d.pt", weights_only=True)
    obj["state"]["fisher_images"] = 7
    torch.save(seal(obj), tmp_path / "d.pt")
    with pytest.raises(CheckpointError, match=r"'state.fisher_images' must be a digest, found 7"):
        Detector.load(tmp_path / "d.pt", tiny_vae)
