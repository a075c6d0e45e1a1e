"""What a diffusion run prints is what it is: training reports DDPM's ε-MSE under that name (not bits
per dimension), and loading a diffusers folder leaves diffusers' notices out and its logger as it was."""

from __future__ import annotations

import pytest
import torch

from roseood.models import load_diffusers
from roseood.models.diffusion import DiffusionModel, diffusers_module, export_diffusers
from roseood.models.train import TrainConfig, train
from tests.models.test_diffusion import tiny


def test_diffusion_training_reports_its_eps_mse(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tiny()
    x = torch.rand(8, 1, 8, 8)
    cfg = TrainConfig(epochs=1, batch_size=4, hflip=False)
    _, history = train(model, x, cfg, tmp_path / "d.pt", progress=True)
    assert set(history[0]) == {"epoch", "loss", "eps_mse"}
    # ε-MSE per dimension: the per-image loss (summed over the 64 pixels) over 64
    assert history[0]["eps_mse"] == pytest.approx(history[0]["loss"] / 64)
    assert "eps_mse" in capsys.readouterr().err


def test_loading_a_diffusers_folder_silences_diffusers_notices(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export_diffusers(tiny(), tmp_path / "folder")
    d, seen = diffusers_module(), []
    logging = d.utils.logging
    real = d.DDPMScheduler.from_config.__func__  # diffusers code that runs while the model is built

    def spy(cls, *args, **kwargs):
        seen.append(logging.get_verbosity())
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(d.DDPMScheduler, "from_config", classmethod(spy))
    before = logging.get_verbosity()
    assert isinstance(load_diffusers(tmp_path / "folder"), DiffusionModel)
    assert seen == [logging.ERROR] and logging.get_verbosity() == before
