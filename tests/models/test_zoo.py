"""The reference zoo shipped in zoo/: every folder matches its checksums, loads by name and runs; a
damaged, extended or missing file is refused in one line."""

from __future__ import annotations

import shutil

import pytest
import torch

from roseood.errors import CheckpointError, RoseError
from roseood.models import load_model
from roseood.models.diffusion import DiffusionModel
from roseood.models.zoo import ZOO_NAMES, write_checksums, zoo_data, zoo_dir, zoo_path


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_every_zoo_model_matches_its_checksums_loads_by_name_and_runs(name):
    folder = zoo_path(name)  # every file against zoo/SHA256SUMS
    model = load_model(name)
    assert isinstance(model, DiffusionModel) and folder.name == name
    channels = 1 if zoo_data(name) == "fashion_mnist" else 3
    assert model.input_shape == (channels, 32, 32)
    assert model.denoising["k"] == 8 and model.ema_decay == 0.999
    x = torch.rand(1, channels, 32, 32, generator=torch.Generator().manual_seed(0))
    loss = model.nll(x)
    # a trained DDPM's ε-MSE per pixel on a uniform-noise image stays within a few times its ε variance
    assert loss.shape == (1,) and torch.isfinite(loss).all()
    assert 0 < loss.item() / (8 * x[0].numel()) < 5


@pytest.fixture
def copy(tmp_path, monkeypatch):
    """One zoo folder copied into a zoo of its own, with its checksums, as $ROSEOOD_ZOO."""
    name = ZOO_NAMES[0]
    shutil.copytree(zoo_dir() / name, tmp_path / name)
    write_checksums(tmp_path)
    monkeypatch.setenv("ROSEOOD_ZOO", str(tmp_path))
    assert zoo_path(name) == tmp_path / name
    return tmp_path / name


def test_a_changed_file_is_refused(copy):
    weights = copy / "unet" / "diffusion_pytorch_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        load_model(copy.name)


def test_an_added_or_missing_file_is_refused(copy):
    (copy / "extra.json").write_text("{}")
    with pytest.raises(CheckpointError, match="not in SHA256SUMS"):
        zoo_path(copy.name)
    (copy / "extra.json").unlink()
    (copy / "roseood.json").unlink()
    with pytest.raises(CheckpointError, match=r"roseood\.json is missing"):
        zoo_path(copy.name)


def test_a_model_absent_from_the_zoo_says_where_it_ships(copy):
    with pytest.raises(CheckpointError, match="ships with the repository"):
        zoo_path(ZOO_NAMES[-1])
    with pytest.raises(RoseError, match="unknown zoo model"):
        zoo_path("ddpm-svhn-s0")
