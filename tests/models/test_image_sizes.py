"""Architectures that scale with the image size, and checkpoints that record the preprocessing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from roseood.data.preprocess import Preprocessing
from roseood.errors import CheckpointError, RoseError
from roseood.models import FAMILIES, VAE, Glow, PixelCNN, load_model, save_model
from roseood.models.glow import default_levels
from roseood.models.vae import authors_key_map, pyramid
from roseood.serialization import save_file


@pytest.mark.parametrize(
    ("size", "stages", "final"),
    [(8, 1, 4), (28, 2, 7), (32, 3, 4), (48, 3, 6), (64, 4, 4), (96, 4, 6), (128, 5, 4)],
)
def test_the_vae_adds_a_stage_per_halving(size: int, stages: int, final: int) -> None:
    assert pyramid(size) == (stages, final)
    vae = VAE(in_channels=3, ngf=2, nz=3, image_size=size).eval()
    with torch.no_grad():
        assert vae.nll(torch.rand(2, 3, size, size)).shape == (2,)
    assert len(vae.layer_sets()["encoder"]) == stages + 2 and len(vae.layer_sets()["decoder"]) == stages + 1


@pytest.mark.parametrize("size", [4, 30, 60])
def test_sizes_without_a_pyramid_are_refused(size: int) -> None:
    with pytest.raises(RoseError, match=r"at least 8×8|odd"):
        VAE(image_size=size)


def test_the_32x32_vae_is_the_papers_network_unchanged() -> None:
    names = {k.rsplit(".", 1)[0] for k in VAE(ngf=32, nz=100).state_dict()}
    assert {n for n in names if "bn" not in n} == {
        v for v in authors_key_map(32, 100).values() if "bn" not in v
    }


def test_glow_levels_keep_the_top_latent_at_least_8x8() -> None:
    assert [default_levels(s) for s in (16, 28, 32, 64, 96, 128)] == [1, 1, 2, 3, 3, 4]
    assert Glow(image_size=64, steps=1, hidden=2).levels == 3 and Glow(steps=1, hidden=2).levels == 2
    assert Glow(image_size=64, levels=2, steps=1, hidden=2).levels == 2  # an explicit choice is kept


def test_checkpoints_record_the_preprocessing_and_refuse_one_that_does_not_fit(tmp_path: Path) -> None:
    model = FAMILIES["pixelcnn"].build(3, 48, width=3, blocks=1)
    assert isinstance(model, PixelCNN) and model.input_shape == (3, 48, 48)
    model.preprocessing = Preprocessing(3, 48, "stretch")
    save_model(model, tmp_path / "m.pt")
    assert load_model(tmp_path / "m.pt").preprocessing == Preprocessing(3, 48, "stretch")  # type: ignore[attr-defined]
    obj = torch.load(tmp_path / "m.pt", weights_only=True)
    save_file(obj | {"preprocessing": {"channels": 1, "size": 48, "resize": "crop"}}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="does not fit the model's inputs"):
        load_model(tmp_path / "bad.pt")
    save_file(obj | {"preprocessing": {"channels": 3, "size": 48, "resize": "squash"}}, tmp_path / "odd.pt")
    with pytest.raises(CheckpointError, match="unreadable preprocessing"):
        load_model(tmp_path / "odd.pt")
    del obj["preprocessing"]  # written before preprocessing was recorded: no record, the default (crop)
    save_file(obj, tmp_path / "old.pt")
    assert getattr(load_model(tmp_path / "old.pt"), "preprocessing", None) is None
