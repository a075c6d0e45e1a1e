"""RND with perturbations: training learns the task, determinism, save/load, registry, bad inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roseood.data.perturbations import gaussian_blur
from roseood.detectors import DETECTORS, METHODS, RND, Detector, make_detector
from roseood.errors import DataError, RoseError
from tests.detectors.fake_models import ScaledSumModel

TINY: dict[str, Any] = {"width": 4, "out_dim": 8, "extra": 1, "batch_size": 16}


def _images(n: int = 32, channels: int = 1, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, channels, 32, 32, generator=torch.Generator().manual_seed(seed))


def test_predictor_learns_to_match_g0_on_clean_and_g1_on_perturbed() -> None:
    x = _images(64)
    det = RND(None, perturbation="gb", epochs=30, lr=3e-3, **TINY).fit(x)
    assert det.losses_[-1] < 0.5 * det.losses_[0]
    # The blurred training images score higher (the predictor maps them towards g1, not g0).
    assert det.score(gaussian_blur(x)).mean() > 2 * det.score(x).mean()


def test_scores_and_determinism() -> None:
    x = _images()
    first = RND(None, perturbation="random:0.3", epochs=2, **TINY).fit(x)
    scores = first.score(x[:5])
    assert scores.shape == (5,) and scores.dtype == np.float64 and (scores >= 0).all()
    again = RND(None, perturbation="random:0.3", epochs=2, **TINY).fit(x)
    assert np.array_equal(again.score(x[:5]), scores)  # seeded nets, shuffling and perturbations
    other = RND(None, perturbation="random:0.3", epochs=2, seed=1, **TINY).fit(x)
    assert not np.array_equal(other.score(x[:5]), scores)


@pytest.mark.parametrize("model", [None, ScaledSumModel(in_channels=3)])
def test_save_load_round_trip(tmp_path: Path, model: ScaledSumModel | None) -> None:
    x = _images(16, channels=3)
    det = RND(model, perturbation="dct:28", epochs=1, **TINY).fit(x)
    det.save(tmp_path / "rnd.pt")
    loaded = Detector.load(tmp_path / "rnd.pt", None)  # the generative model plays no part
    assert isinstance(loaded, RND) and loaded.get_params() == det.get_params()
    assert loaded.losses_ == det.losses_
    assert np.array_equal(loaded.score(x), det.score(x))


def test_registered() -> None:
    assert DETECTORS["rnd"] is RND
    specs = {"rnd-svd": "svd:28", "rnd-dct": "dct:28", "rnd-gb": "gb", "rnd-random": "random:0.2"}
    for name, spec in specs.items():
        assert METHODS[name][0] is RND
        det = make_detector(name, None)
        assert isinstance(det, RND) and det.perturbation == spec


def test_bad_inputs_raise() -> None:
    with pytest.raises(RoseError, match="perturbation"):
        RND(None, perturbation="blur")
    for kwargs in ({"epochs": 0}, {"width": 0}, {"lr": 0.0}, {"extra": -1}, {"batch_size": 0}):
        with pytest.raises(RoseError):
            RND(None, **kwargs)
    det = RND(None, epochs=1, **TINY)
    with pytest.raises(RoseError, match="not fitted"):
        det.score(_images(1))
    det.fit(_images(8))
    with pytest.raises(DataError, match="1-channel"):
        det.score(_images(1, channels=3))
    with pytest.raises(DataError):
        det.score(torch.rand(1, 1, 16, 16))
    with pytest.raises(DataError):
        det.fit(torch.zeros(0, 1, 32, 32))
