"""``--device`` on an accelerator (CUDA, Apple MPS): skipped where the machine has none.

A tiny VAE trained on the CPU scores the same on the accelerator (float32 kernels differ in summation
order only: 1e-4 relative), and every command runs there with ``--device`` auto and named.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from roseood import distributed
from roseood.cli import main
from roseood.detectors import ROSE
from roseood.models import VAE

ACCELERATORS = [
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
    ),
    pytest.param(
        "mps", marks=pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no Apple MPS here")
    ),
]
pytestmark = pytest.mark.gpu


@pytest.fixture
def trained_vae() -> VAE:
    torch.manual_seed(0)
    model = VAE(in_channels=1, ngf=4, nz=4, image_size=32)
    model.train()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        model.neg_elbo(torch.rand(16, 1, 32, 32))
    return model.eval()


@pytest.mark.parametrize("device", ACCELERATORS)
def test_auto_picks_the_accelerator(device: str) -> None:
    assert distributed.device("auto") == ("cuda" if torch.cuda.is_available() else "mps")


@pytest.mark.parametrize("device", ACCELERATORS)
@pytest.mark.parametrize("fisher", ["diag", "kfac", "ekfac"])
def test_scores_on_the_accelerator_equal_the_cpu_ones(trained_vae: VAE, device: str, fisher: str) -> None:
    x = torch.rand(40, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    cpu = ROSE(trained_vae, fisher=fisher).fit(x[:24], held_out=x[24:32]).score(x[32:])
    gpu = ROSE(trained_vae.to(device), fisher=fisher).fit(x[:24], held_out=x[24:32]).score(x[32:])
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ACCELERATORS)
def test_every_command_runs_on_the_accelerator(tmp_path: Path, device: str) -> None:
    data = tmp_path / "d.npz"
    np.savez(data, images=np.random.default_rng(0).integers(0, 256, (24, 28, 28), dtype=np.uint8))
    common = ["--device", device, "-q"]
    model, det = str(tmp_path / "m.pt"), str(tmp_path / "d.pt")
    train = ["train", "vae", "--data", str(data), "--out", model, "--epochs", "1", "--ngf", "4", "--nz", "4"]
    assert main([*train, *common]) == 0
    fit = ["fit", "--model", model, "--in", str(data), "--fit-data", str(data), "--fit-samples", "16"]
    assert main([*fit, "--stats-samples", "8", "--method", "rose-ekfac", "--out", det, *common]) == 0
    score = [
        "score",
        "--model",
        model,
        "--detector",
        det,
        "--data",
        str(data),
        "--out",
        str(tmp_path / "s.csv"),
    ]
    assert main([*score, "--device", "auto", "-q"]) == 0
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 25
