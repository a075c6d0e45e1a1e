"""The reference zoo shipped in zoo/: every folder matches its checksums, loads by name and runs; a
damaged, extended or missing file is refused in one line."""

from __future__ import annotations

import importlib.util
import math
import shutil
from pathlib import Path

import pytest
import torch

from roseood.data import load_images
from roseood.data.tensors import as_image_tensor
from roseood.errors import CheckpointError, RoseError
from roseood.models import load_model, save_model
from roseood.models.checkpoint import model_fingerprint
from roseood.models.diffusion import DiffusionModel
from roseood.models.vae import VAE
from roseood.models.zoo import (
    CARD,
    ZOO_NAMES,
    model_card,
    write_checksums,
    zoo_data,
    zoo_dir,
    zoo_named,
    zoo_path,
)
from tests.conftest import needs_shared_data


def _cards():
    """zoo/tools/cards.py, the model cards' writer (a script, not part of the package)."""
    path = Path(__file__).resolve().parents[2] / "zoo" / "tools" / "cards.py"
    spec = importlib.util.spec_from_file_location("zoo_cards", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=needs_shared_data) if n.startswith("vae-") else n for n in ZOO_NAMES]
)
def test_every_zoo_model_matches_its_checksums_loads_by_name_and_runs(name):
    folder = zoo_path(name)  # every file against zoo/SHA256SUMS
    model = load_model(name)
    assert folder.name == name
    channels = 1 if zoo_data(name) == "fashion_mnist" else 3
    size = 16 if name.startswith("sd-") else 32  # the text-conditioned one is CPU-sized
    assert model.input_shape == (channels, size, size)
    x = torch.rand(1, channels, size, size, generator=torch.Generator().manual_seed(0))
    loss = model.nll(x)
    assert loss.shape == (1,) and torch.isfinite(loss).all()
    if name.startswith("vae-"):
        assert isinstance(model, VAE) and (model.ngf, model.nz) == (32, 200)
    else:
        assert isinstance(model, DiffusionModel)
        assert model.denoising["k"] == 8 and model.ema_decay == 0.999
        # each kind read as what it is: its objective, conditioning, denoiser and space
        kind = name.split("-")[0]
        assert (model.objective.name == "flow") == (kind == "fm")
        assert model.condition.spec == {"cddpm": "marginal", "dit": "null", "sd": "prompt:"}.get(
            kind, "marginal"
        )
        assert model.condition.classes == (10 if kind in ("cddpm", "dit") else None)
        assert (type(model.unet).__name__ == "DiTTransformer2DModel") == (kind == "dit")
        assert (model.autoencoder is not None) == (kind in ("ldm", "sd"))
        if kind == "sd":  # its sneaker LoRA, beside the base it was trained on
            tuned = load_model(f"{name}/sneaker-lora")  # by the zoo name and the folder inside
            assert isinstance(tuned, DiffusionModel) and tuned.adapter is not None
            assert (tuned.adapter.rank, tuned.adapter.layers) == (4, 32)
        # a trained model's loss per dimension on a uniform-noise image stays within a few times the
        # variance of its target (ε, or the velocity ε − x)
        assert 0 < loss.item() / (8 * math.prod(model.space_shape)) < 5
    # its card is the one zoo/tools/cards.py writes from the folder as it is (a stale card fails here)
    count = sum(p.numel() for p in getattr(model, "unet", model).parameters())
    assert (folder / CARD).read_text() == _cards().card(name, count), "run python zoo/tools/cards.py"
    if name.startswith("vae-"):
        # a trained CIFAR-10 VAE's ELBO on one of its test images (the shared data): between a good
        # model's few bits/dim and the 8 of a uniform code
        test = as_image_tensor(load_images("cifar10", n=1, seed=0, channels=3, size=32).images)
        bpd = model.bits_per_dim(model.nll(test)).item()
        assert 3 < bpd < 8


def test_a_folder_inside_a_zoo_model_is_named_through_it_and_nothing_outside_it(tmp_path, monkeypatch):
    """``sd-fmnist-s0/sneaker-lora`` names the LoRA in the zoo's folder; a path that is not inside it (or
    not there) is refused in one line naming what the folder holds; a local path of that name wins."""
    assert zoo_named("sd-fmnist-s0/sneaker-lora") == ("sd-fmnist-s0", "sneaker-lora")
    assert zoo_named("sd-fmnist-s0") == ("sd-fmnist-s0", "") and zoo_named("my-sd/sneaker-lora") is None
    for inner in ("nope", "../ddpm-fmnist-s0"):
        with pytest.raises(CheckpointError, match=r"has no '.*' inside its folder \(it holds .*sneaker-lora"):
            load_model(f"sd-fmnist-s0/{inner}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sd-fmnist-s0" / "sneaker-lora").mkdir(parents=True)
    assert zoo_named("sd-fmnist-s0/sneaker-lora") is None


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


def test_a_checksum_list_of_random_bytes_is_one_line(copy):
    (copy.parent / "SHA256SUMS").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(CheckpointError, match="not a checksum list"):
        zoo_path(copy.name)


def test_a_model_absent_from_the_zoo_says_where_it_ships(copy):
    with pytest.raises(CheckpointError, match=r"pip install \./zoo"):
        zoo_path(ZOO_NAMES[-1])
    with pytest.raises(RoseError, match="unknown zoo model"):
        zoo_path("ddpm-svhn-s0")


def test_a_vae_folder_loads_its_checkpoint_by_name(tmp_path, monkeypatch):
    """A family shipped as a roseood checkpoint (the VAEs) loads by name from ``NAME/model.pt``, checked."""
    torch.manual_seed(0)
    model = VAE(in_channels=3, ngf=4, nz=4)
    save_model(model, tmp_path / "vae-cifar10-s1" / "model.pt")
    write_checksums(tmp_path)
    monkeypatch.setenv("ROSEOOD_ZOO", str(tmp_path))
    loaded = load_model("vae-cifar10-s1")
    assert isinstance(loaded, VAE) and model_fingerprint(loaded) == model_fingerprint(model)
    (tmp_path / "vae-cifar10-s1" / "model.pt").write_bytes(b"damaged")
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        load_model("vae-cifar10-s1")


def test_a_local_path_named_like_a_zoo_model_is_loaded_and_said(tmp_path, monkeypatch, capsys):
    """What the user has at the path they named wins over the zoo model of that name, in one line."""
    name = ZOO_NAMES[0]
    shutil.copytree(zoo_dir() / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    load_model(name)
    assert f"{name}: the local folder, not the zoo model of that name" in capsys.readouterr().err


def test_rose_zoo_lists_the_models_and_shows_a_card_without_its_metadata(capsys, monkeypatch, tmp_path):
    from roseood.cli import main

    assert main(["zoo"]) == 0
    listing = capsys.readouterr().out
    assert "missing" not in listing
    assert str(zoo_dir()) in listing and all(name in listing for name in ZOO_NAMES)
    row = next(line.split() for line in listing.splitlines() if line.split()[:1] == ["sd-fmnist-s0"])
    card_size = next(line for line in model_card("sd-fmnist-s0").splitlines() if " MB." in line)
    assert f"{row[2]} MB." in card_size and row[3] == "MB"  # the size its card states
    assert row[4:6] == ["text-conditioned", "latent"]  # its kind
    assert main(["zoo", "vae-cifar10-s1"]) == 0
    shown = capsys.readouterr().out
    assert shown == model_card("vae-cifar10-s1") + "\n"
    assert shown.startswith("# vae-cifar10-s1\n") and "license:" not in shown and "decoded JPEG" in shown
    assert main(["zoo", "vae-cifar10-s9"]) == 2
    assert "unknown zoo model 'vae-cifar10-s9'" in capsys.readouterr().err
    assert main(["zoo", "sd-fmnist-s0/sneaker-lora"]) == 0  # as --model names it: its model's card
    assert capsys.readouterr().out == model_card("sd-fmnist-s0") + "\n"
    assert main(["zoo", "sd-fmnist-s0/nothing"]) == 2
    assert "sd-fmnist-s0 has no 'nothing' inside its folder" in capsys.readouterr().err
    monkeypatch.setenv("ROSEOOD_ZOO", str(tmp_path))  # a zoo not installed: each model missing, and how
    assert main(["zoo"]) == 0
    absent = capsys.readouterr().out
    assert absent.count(" missing ") == len(ZOO_NAMES)
    assert "missing models: the zoo is a distribution of its own: pip install ./zoo" in absent


def test_an_unreadable_card_is_one_line(copy):
    (copy / CARD).write_bytes(b"\xff\xfe not text")
    with pytest.raises(CheckpointError, match=r"its card .* cannot be read"):
        model_card(copy.name)


@pytest.mark.parametrize("target", ["outside", "dangling"])
def test_a_symbolic_link_in_a_zoo_folder_is_refused_even_with_the_right_bytes(copy, tmp_path_factory, target):
    config = copy / "unet" / "config.json"
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "config.json"
    if target == "outside":
        elsewhere.write_bytes(config.read_bytes())  # the same bytes: the checksum alone would pass
    config.unlink()
    config.symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match=r"unet/config\.json is a symbolic link"):
        zoo_path(copy.name)


def test_a_zoo_folder_that_is_itself_a_symbolic_link_is_refused_even_to_an_identical_copy(
    copy, tmp_path_factory
):
    """Like a linked file inside it (issue 73): the bytes would come from outside the zoo, though the
    copy they come from matches the checksums."""
    elsewhere = tmp_path_factory.mktemp("elsewhere") / copy.name
    shutil.move(copy, elsewhere)
    copy.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(
        CheckpointError, match=rf"^zoo model {copy.name}: \S+ is a symbolic link, not a plain folder$"
    ):
        zoo_path(copy.name)
    with pytest.raises(CheckpointError, match="is a symbolic link, not a plain folder"):
        load_model(copy.name)
