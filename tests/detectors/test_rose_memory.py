"""ROSE under a memory budget (batches shrink, scores stay) and a file-size budget (large Fishers fall back to
diagonal ones, recorded per layer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.curvature.fisher import FISHERS
from roseood.detectors import ROSE, Detector
from roseood.errors import RoseError
from roseood.models import DiffusionModel
from tests.test_cli import workdir as cli_workdir

cli_data = pytest.fixture(cli_workdir.__wrapped__, name="cli_data")  # the CLI tests' data and VAE

pytestmark = pytest.mark.filterwarnings("ignore::roseood.errors.DegenerateFitWarning")


@pytest.fixture(autouse=True)
def steady_process(monkeypatch):
    """The process's resident memory as a constant, so that a budget set from one plan fits the next."""
    monkeypatch.setattr("roseood.detectors.rose.stream.in_use", lambda device: 100 * 2**20)


def unet() -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()


def fitted(model, images, **kw) -> ROSE:
    return ROSE(model, batch_size=64, **kw).fit(images[:12], held_out=images[12:])


@pytest.mark.parametrize("fisher", ["diag", "ekfac"])
def test_a_tight_budget_shrinks_batches_and_keeps_the_scores(fisher, tiny_vae, images, capsys):
    free = fitted(tiny_vae, images, fisher=fisher)
    probe = ROSE(tiny_vae, fisher=fisher, memory="64G")
    _, per_image = probe.stream.probe(images)
    plan = probe.stream.plan(images, dict.fromkeys(probe.layers, fisher), batch_size=probe.batch_size)
    tight = plan.fixed + 3 * per_image  # three images per batch, whatever the machine
    det = fitted(tiny_vae, images, fisher=fisher, memory=tight, progress=True)
    assert "3 images per batch" in capsys.readouterr().err
    # the fitted Fishers' memory is counted once: more room
    after = det.stream.plan(images, det.fishers_.kinds, batch_size=det.batch_size, fishers=det.fishers_)
    assert after.fits and 3 <= after.images < 64
    np.testing.assert_allclose(det.score(images), free.score(images), rtol=1e-5, atol=1e-6)


def test_the_batch_plan_is_stated_once_while_it_holds(tiny_vae, images, capsys):
    """Fitting, the statistics and each scored set plan their batches again; the line is said once while
    the images per batch stay the same (the process's memory in use moves its peak a little)."""
    det = fitted(tiny_vae, images, progress=True)
    det.score(images[:5])
    det.score(images[5:])
    assert capsys.readouterr().err.count("images per batch") == 1


@pytest.mark.parametrize("fisher", ["diag", "kfac", "ekfac"])
def test_a_fitted_fishers_memory_is_counted_once(fisher, tiny_vae, images):
    """What a fitted Fisher holds is already in the process's memory: the plan adds only the rest of its
    ``work_bytes``, and what it holds never exceeds them."""
    det = fitted(tiny_vae, images, fisher=fisher, memory="64G")
    shapes = det.stream.probe(images)[0]
    work = {n: FISHERS.get(k).work_bytes(shapes[n]) for n, k in det.fishers_.kinds.items()}
    held = {n: f.held_bytes() for n, f in det.fishers_.items()}
    assert all(0 < held[n] <= work[n] for n in work)
    fresh = ROSE(tiny_vae, fisher=fisher, memory="64G")  # no Fisher yet: the whole work_bytes
    kinds, size = det.fishers_.kinds, det.batch_size
    before = fresh.stream.plan(images, kinds, batch_size=size)
    after = det.stream.plan(images, kinds, batch_size=size, fishers=det.fishers_)
    assert before.fixed - after.fixed == sum(held.values())


def test_held_bytes_counts_a_shared_storage_once(tiny_vae, images):
    fisher = fitted(tiny_vae, images, fisher="ekfac").fishers_["encoder.conv1"]
    alone = fisher.held_bytes()
    fisher.alias = {"bases": (fisher.u_in, fisher.u_in[:2])}  # the same storage under another name
    assert fisher.held_bytes() == alone


def test_diffusion_budget_counts_images_of_k_rows(capsys):
    model = unet()
    # In this tiny UNet every GroupNorm group is one channel, which cancels the time embedding's per-channel
    # shift exactly: those layers' true gradients are 0 and what autograd returns is rounding noise.
    layers = [n for n in model.rose_layers("all") if "time_emb_proj" not in n]
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    free = fitted(model, x, fisher="diag", layers=layers)
    probe = ROSE(model, fisher="diag", layers=layers, memory="64G")
    _, per_image = probe.stream.probe(x)
    plan = probe.stream.plan(x, dict.fromkeys(probe.layers, "diag"), batch_size=probe.batch_size)
    tight = plan.fixed + per_image
    det = fitted(model, x, fisher="diag", layers=layers, memory=tight, progress=True)
    assert "1 image (3 rows) per batch" in capsys.readouterr().err
    # batches of 3 rows instead of 48 convolve in another order: float32 rounding, within 1e-4
    np.testing.assert_allclose(det.score(x), free.score(x), rtol=1e-4, atol=1e-6)


def test_an_impossible_budget_is_refused_before_any_batch(tiny_vae, images, monkeypatch):
    det = ROSE(tiny_vae, fisher="ekfac", memory="1M")
    calls = []
    real = det.stream.run
    monkeypatch.setattr(det.stream, "run", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    expected = r"ROSE-ekfac needs ≈ .* for one image per batch .* budget is 1\.0 MiB"
    with pytest.raises(RoseError, match=expected):
        det.fit(images[:12], held_out=images[12:])
    assert calls == [1]  # the one-image probe, no batch
    assert det.fishers_ is None  # nothing fitted


def test_memory_is_how_it_runs_not_what_it_computes(tiny_vae):
    assert "memory" not in ROSE(tiny_vae, memory="2G").get_params()
    with pytest.raises(RoseError, match="memory must be"):
        ROSE(tiny_vae, memory="lots")


def test_max_size_turns_the_largest_eigenbases_diagonal_and_the_file_says_so(tiny_vae, images, tmp_path):
    exact = fitted(tiny_vae, images, fisher="ekfac")
    assert set(exact.fishers_.kinds.values()) == {"ekfac"}  # a small model: under 128 MiB, unchanged
    shapes = exact.stream.probe(images)[0]
    from roseood.curvature import FISHERS

    diag = sum(FISHERS.get("diag").file_bytes(s) for s in shapes.values())
    det = fitted(tiny_vae, images, fisher="ekfac", max_size=diag + 2000)
    kinds = det.fishers_.kinds
    assert "diag" in kinds.values() and "ekfac" in kinds.values()
    size = sum(FISHERS.get(k).file_bytes(shapes[n]) for n, k in kinds.items())
    assert size <= diag + 2000
    # the layer with the largest eigenbases went first
    largest = max(shapes, key=lambda n: shapes[n].d_in ** 2 + shapes[n].d_out ** 2)
    assert kinds[largest] == "diag"
    det.save(tmp_path / "rose.pt")
    loaded = Detector.load(tmp_path / "rose.pt", tiny_vae)
    assert isinstance(loaded, ROSE) and loaded.fishers_.kinds == kinds
    assert {type(f).name for f in loaded.fishers_.values()} == set(kinds.values())
    np.testing.assert_allclose(loaded.score(images), det.score(images), rtol=1e-5, atol=1e-5)


def test_max_size_below_a_diagonal_fisher_is_refused(tiny_vae, images):
    with pytest.raises(RoseError, match="even a diagonal Fisher of these layers takes"):
        fitted(tiny_vae, images, fisher="ekfac", max_size=100)


def test_the_memory_probe_moves_no_random_number_generator(tiny_vae, images):
    det = ROSE(tiny_vae, fisher="diag", stochastic=True)
    torch.manual_seed(3)
    det.stream.probe(images)
    after = torch.rand(3)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(3), after)


def test_cli_memory_and_max_size(cli_data, capsys):
    from roseood import memory
    from roseood.cli import main

    fit = ["fit", "--model", "model.pt", "--method", "rose-ekfac", "--fit-samples", "20"]
    fit += ["--stats-samples", "8"]
    assert main([*fit, "--out", "d.pt", "--memory", "1M"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("error: ROSE-ekfac needs ≈") and "budget is 1.0 MiB" in last
    assert main([*fit, "--out", "d.pt", "--memory", "lots"]) == 2
    assert "memory must be a size" in capsys.readouterr().err
    assert main([*fit, "--out", "d.pt", "--memory", "16G", "--max-size", "20K"]) == 0
    assert "budget 16 GiB" in capsys.readouterr().err
    assert memory.budget(torch.device("cpu"), None) != 16 * 2**30  # the command's budget ends with it
    det = torch.load(cli_data / "d.pt", weights_only=True)
    assert det["params"]["max_size"] == "20K" and "diag" in det["state"]["kinds"].values()
