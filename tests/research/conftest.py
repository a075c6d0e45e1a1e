"""Zoos of tiny stand-ins for the zoo's Fashion-MNIST models, which the research experiments' tests run on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FULL


@pytest.fixture(scope="session")
def tiny_zoo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zoo of tiny stand-ins for the Fashion-MNIST DDPMs (same names, checksummed), exported once per
    worker: the tests read it (a changed file would fail its checksum), six of them."""
    import torch

    from roseood.models.diffusion import DiffusionModel, export_diffusers
    from roseood.models.zoo import write_checksums

    zoo = tmp_path_factory.mktemp("zoo")
    for seed in range(3):
        torch.manual_seed(seed)
        model = DiffusionModel(in_channels=1, image_size=32, widths=(8, 16), denoising={"k": 2})
        export_diffusers(model, zoo / f"ddpm-fmnist-s{seed}")
    write_checksums(zoo)
    return zoo


@pytest.fixture
def tiny_zoo(tiny_zoo_folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tiny_zoo_folder`` as ROSEOOD_ZOO."""
    monkeypatch.setenv("ROSEOOD_ZOO", str(tiny_zoo_folder))
    return tiny_zoo_folder


@pytest.fixture
def tiny_kinds_zoo(tmp_path, monkeypatch):
    """A zoo of tiny stand-ins for the Fashion-MNIST kinds (flow matching, class-conditional UNet, DiT,
    latent) beside a DDPM of the same seed (same names, checksummed), as ROSEOOD_ZOO."""
    import torch

    from roseood.models import zoo
    from roseood.models.diffusion import DiffusionModel, export_diffusers
    from roseood.models.diffusion.latent import vq_config

    small = {"in_channels": 1, "image_size": 32, "widths": (8, 16), "denoising": {"k": 2}}
    flow = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0}
    kinds = {
        "ddpm": small,
        "fm": small | {"scheduler": flow},
        "cddpm": small | {"classes": 3},
        "dit": small | {"dit": {"layers": 1, "heads": 2, "head_dim": 4, "patch": 4}, "classes": 3},
        "ldm": small | {"autoencoder": vq_config(1, 32, (8, 8), 2, 16)},
    }
    if not FULL:  # reduced form (CI): a kind that takes every method, and two that refuse some
        kinds = {k: kinds[k] for k in ("ddpm", "fm", "cddpm")}
    for kind, config in kinds.items():
        torch.manual_seed(0)
        export_diffusers(DiffusionModel(**config), tmp_path / "zoo" / f"{kind}-fmnist-s0")
    monkeypatch.setattr(zoo, "ZOO_FAMILIES", {k: ("fmnist",) for k in kinds})
    monkeypatch.setattr(zoo, "ZOO_FEWER_SEEDS", dict.fromkeys(kinds, (0,)))
    zoo.write_checksums(tmp_path / "zoo")
    monkeypatch.setenv("ROSEOOD_ZOO", str(tmp_path / "zoo"))
    return tmp_path / "zoo"
