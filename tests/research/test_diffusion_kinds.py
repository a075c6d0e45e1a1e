"""`python -m research diffusion-kinds` under the smoke profile, on tiny stand-ins of the zoo's kinds."""

from __future__ import annotations

import json

import pytest
from research.diffusion import OOD

from research import EXPERIMENTS
from roseood.bench import run_experiment
from tests.conftest import FULL, needs_shared_data
from tests.research.smoke import smoke_workspace

pytestmark = pytest.mark.research  # not in the default run: see pyproject.toml's markers


@needs_shared_data
@pytest.mark.slow
def test_diffusion_kinds_bench_smoke(tmp_path, tiny_kinds_zoo, monkeypatch):
    """The kinds experiment end to end on tiny stand-ins: one table per kind, every method a kind takes
    with its AUROC, and each method it refuses named with the model's own one-line reason. Reduced form
    (CI): three kinds, and of the baselines that follow DDPM's path DiffPath alone (each detector's own
    refusals are tested in tests/models)."""
    from research import diffusion_kinds

    path_methods = {"diffpath", "diffpath-1d", "msma", "reconstruction"}
    if not FULL:
        path_methods = {"diffpath"}
        methods = ["rose-ekfac", "denoising", "diffpath", "rose-bands-stats"]
        monkeypatch.setattr(diffusion_kinds, "KIND_METHODS", methods)
    ws = smoke_workspace(tmp_path / "bench", datasets=("fashion_mnist",))
    report = run_experiment("diffusion-kinds", ws, EXPERIMENTS)
    text = report.read_text()
    kinds = ("ddpm", "fm", "cddpm", "dit", "ldm") if FULL else ("ddpm", "fm", "cddpm")
    for kind in kinds:
        assert f"AUROC, {kind} on fashion_mnist" in text
    assert "- diffpath: the diffpath method needs a model of DDPM's forward process" in text  # fm
    assert "- diffpath: the diffpath method needs one class label per image" in text  # cddpm: the marginal
    if FULL:
        assert "- diffpath-1d: the diffpath-1d method needs a model of DDPM's forward process" in text
        assert "- msma: the msma method needs one class label per image" in text
    summary = json.loads((report.parent / "results.json").read_text())["results"]["fashion_mnist/summary"]
    assert set(summary["fm"]["refused"]) == path_methods
    assert set(summary["cddpm"]["refused"]) == path_methods
    assert set(summary) == set(kinds)
    assert all(summary[k]["refused"] == {} for k in ("ddpm", "dit", "ldm") if k in kinds)
    for kind, found in summary.items():
        assert found["models"] == [f"{kind}-fmnist-s0"]
        assert "rose-bands-stats" in found["values"], kind  # the DDPM default, on every kind
        for method, sets in found["values"].items():
            assert set(sets) == set(OOD["fashion_mnist"]), (kind, method)
            assert all(len(v) == 1 and 0.0 <= v[0] <= 1.0 for v in sets.values()), (kind, method)


def test_each_method_is_judged_once_and_every_default_among_them():
    """The varieties share one method (compact EKFAC): listed three times, a kind's table had it thrice."""
    from research import diffusion_kinds
    from roseood.catalogue import TRAIN_OPTIONS

    methods, opts = diffusion_kinds.KIND_METHODS, TRAIN_OPTIONS["diffusion"]
    assert len(methods) == len(set(methods))
    assert {opts.method, *opts.varieties.values()} <= set(methods)
