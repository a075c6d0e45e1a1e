"""`python -m research near-ood` under the smoke profile: each variant's row, computed from the shared
Fisher's cached columns, is what `rose evaluate` gives for that method on the same images, and the rule's
verdicts read."""

from __future__ import annotations

import json

import pytest
import torch
from research.near_ood import BANDS, DEFAULT, VARIANTS, near_ood_models

from research import EXPERIMENTS
from roseood.bench import run_experiment
from tests.conftest import needs_shared_data
from tests.research.smoke import smoke_workspace

pytestmark = pytest.mark.research  # not in the default run: see pyproject.toml's markers


@needs_shared_data
@pytest.mark.slow
def test_near_ood_rows_are_the_methods_own_scores(tmp_path):
    ws = smoke_workspace(tmp_path, models=("vae",), datasets=("fashion_mnist",))
    report = run_experiment("near-ood", ws, EXPERIMENTS)
    results = json.loads((report.parent / "results.json").read_text())["results"]
    [(_, label, model, seed)] = near_ood_models(ws, "fashion_mnist")
    rows = results[f"fashion_mnist/{label}"]["auroc"]
    assert set(rows) == set(VARIANTS)
    ws.experiment = "near-ood"
    spec = ws.spec(model, "fashion_mnist", ["mnist", "noise"], list(VARIANTS), seed=seed)
    ours = ws.evaluate(model, spec).metrics()
    for method in VARIANTS:
        for ood in ("mnist", "noise"):
            assert rows[method][ood] == pytest.approx(ours[method][ood]["auroc"], abs=1e-9), (method, ood)
    text = report.read_text()
    assert "| rose-ekfac |" in text and "the default |" in text and "Cost per scored image" in text
    costs = results[f"fashion_mnist/{label}"]["costs"]
    assert costs["rose_s_per_image"] > 0 and costs["stats_s_per_image"] > 0
    assert DEFAULT == "rose-ekfac"


@needs_shared_data
@pytest.mark.slow
def test_the_band_rows_on_ddpms_are_the_methods_own_scores(tmp_path, tiny_zoo, monkeypatch):
    """On the zoo's DDPMs (a tiny stand-in for the first) the band variants join the table, read from the
    shared Fisher's scores of every row, and equal what `rose evaluate` gives for rose-bands and
    rose-bands-stats."""
    from roseood.models import zoo

    monkeypatch.setattr(zoo, "ZOO_SEEDS", (0,))  # one model: the CI's time
    ws = smoke_workspace(tmp_path / "bench", models=("ddpm",), datasets=("fashion_mnist",))
    report = run_experiment("near-ood", ws, EXPERIMENTS)
    results = json.loads((report.parent / "results.json").read_text())["results"]
    (_, label, model, seed), *_ = near_ood_models(ws, "fashion_mnist")
    rows = results[f"fashion_mnist/{label}"]["auroc"]
    assert set(rows) == set(VARIANTS) | set(BANDS)
    ws.experiment = "near-ood"
    counts = {k: v for k, v in ws.profile.experiment_overrides["diffusion-zoo"].items() if "samples" in k}
    spec = ws.spec(model, "fashion_mnist", ["mnist", "noise"], [DEFAULT, *BANDS], seed=seed, **counts)
    ours = ws.evaluate(model, spec).metrics()
    for method in BANDS:
        for ood in ("mnist", "noise"):
            assert rows[method][ood] == pytest.approx(ours[method][ood]["auroc"], abs=1e-9), (method, ood)
    text = report.read_text()
    assert "| rose-bands-stats |" in text and "the band scores (every row's gradient) instead" in text
    assert "ddpm/rose-bands" in results["verdicts"]


def test_the_cifar10_vaes_are_the_zoos_three(tmp_path, monkeypatch):
    """On CIFAR-10 the VAE family is the zoo's three VAEs (tiny stand-ins here), each with its own data
    seed, as the DDPMs are."""
    import torch
    from research.diffusion import DATA_SEED

    from roseood.models import save_model
    from roseood.models.vae import VAE
    from roseood.models.zoo import write_checksums

    for s in range(3):
        torch.manual_seed(s)
        save_model(VAE(in_channels=3, ngf=4, nz=4), tmp_path / "zoo" / f"vae-cifar10-s{s}" / "model.pt")
    write_checksums(tmp_path / "zoo")
    monkeypatch.setenv("ROSEOOD_ZOO", str(tmp_path / "zoo"))
    ws = smoke_workspace(tmp_path / "bench", models=("vae",), datasets=("cifar10",))
    found = [(family, label, seed) for family, label, _, seed in near_ood_models(ws, "cifar10")]
    assert found == [("vae", f"vae-cifar10-s{s}", DATA_SEED + s) for s in range(3)]


@needs_shared_data
def test_the_benchs_own_models_are_one_per_training_seed(tmp_path):
    """The Glows the bench trains for near-ood are one per training seed of the profile, each trained
    from its own seed and judged on data seed 2021 + that seed, as the zoo's models are."""
    from dataclasses import replace

    from research.diffusion import DATA_SEED

    ws = smoke_workspace(tmp_path, models=("glow",), datasets=("fashion_mnist",))
    ws.profile = replace(ws.profile, near_ood_seeds=(0, 1))
    found = near_ood_models(ws, "fashion_mnist")
    assert [(family, label[-3:], seed) for family, label, _, seed in found] == [
        ("glow", "-s0", DATA_SEED),
        ("glow", "-s1", DATA_SEED + 1),
    ]
    first, second = (dict(model.named_parameters()) for _, _, model, _ in found)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # two trainings, not one model twice
