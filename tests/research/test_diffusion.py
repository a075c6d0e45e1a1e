"""`python -m research diffusion` under the smoke profile: every method on every seed's model, cells as mean ±
t-interval over the seeds, NFEs and images/s reported."""

from __future__ import annotations

import json

import numpy as np
import pytest
from research.diffusion import METHODS, OOD, judged, mean_interval

from research import EXPERIMENTS
from roseood.bench import run_experiment
from roseood.models import zoo
from tests.conftest import FULL, needs_shared_data
from tests.research.smoke import smoke_workspace

pytestmark = pytest.mark.research  # not in the default run: see pyproject.toml's markers


def test_mean_interval_is_the_student_t_half_width():
    mean, half = mean_interval([0.8, 0.9, 1.0])
    assert mean == pytest.approx(0.9)
    assert half == pytest.approx(4.302653 * 0.1 / np.sqrt(3), rel=1e-5)  # t(0.975, 2) · s / √n
    assert np.isnan(mean_interval([0.5])[1])


def test_judged_sets_replace_a_set_by_its_matched_twin() -> None:
    assert judged(["celeba", "celeba+jpeg75", "mnist", "noise"]) == ["celeba+jpeg75", "mnist", "noise"]
    assert judged(["celeba", "mnist"]) == ["celeba", "mnist"]


@needs_shared_data
@pytest.mark.slow
def test_diffusion_bench_smoke(tmp_path):
    ws = smoke_workspace(tmp_path, datasets=("fashion_mnist",))
    report = run_experiment("diffusion", ws, EXPERIMENTS)
    text = report.read_text()
    assert "NFEs/image" in text and "images/s" in text and " ± " in text
    assert "| test images per set (VAE / Glow) | 12 |" in text  # this experiment's value, not the profile's
    results = json.loads((report.parent / "results.json").read_text())["results"]
    assert {"fashion_mnist/seed0", "fashion_mnist/seed1"} <= set(results)
    summary = results["fashion_mnist/summary"]
    for method in METHODS:
        assert set(summary[method]) == set(OOD["fashion_mnist"])
        assert all(0.0 <= mean <= 1.0 for mean, _ in summary[method].values())


def test_the_zoo_decision_rule_needs_every_model():
    from research.diffusion_zoo import summary, verdicts

    cells = {
        "a": {"x": [[0.9, 0.8], [0.7], [0.6]], "y": [[0.5], [0.9], [0.9]]},
        "b": {"x": [[0.8], [0.6], [0.5]], "y": [[0.6], [0.8], [0.8]]},
    }
    assert verdicts(cells, ["x", "y"], [("a", "b"), ("b", "a")]) == [
        ["a vs b", "a", "undecided"],
        ["b vs a", "a", "undecided"],
    ]
    assert summary(cells["a"]["x"]).startswith(
        "0.717 ± "
    ) and "0.850 / 0.700 / 0.600; draw sd 0.071" in summary(cells["a"]["x"])


@needs_shared_data
@pytest.mark.slow
def test_diffusion_zoo_bench_smoke(tmp_path, tiny_zoo, monkeypatch):
    """The zoo experiment end to end on a zoo of tiny stand-ins (same names, checksummed): every method on
    every model, the drawn methods once per draw, and the decision rule's table."""
    from research.diffusion_zoo import DRAWN

    seeds = (0, 1, 2) if FULL else (0,)  # reduced form (CI): one model (the rule: the test above)
    monkeypatch.setattr(zoo, "ZOO_SEEDS", seeds)
    ws = smoke_workspace(tmp_path / "bench", datasets=("fashion_mnist",))
    report = run_experiment("diffusion-zoo", ws, EXPERIMENTS)
    text = report.read_text()
    assert "Decision rule, zoo DDPMs on fashion_mnist" in text and "draw sd" in text
    results = json.loads((report.parent / "results.json").read_text())["results"]
    assert {f"fashion_mnist/ddpm-fmnist-s{s}/draw{d}" for s in seeds for d in range(2)} <= set(results)
    summary = results["fashion_mnist/summary"]
    for method in METHODS:
        draws = 2 if method in DRAWN else 1
        assert all(
            len(models) == len(seeds) and all(len(v) == draws for v in models)
            for models in summary[method].values()
        )


@needs_shared_data
@pytest.mark.slow
def test_a_zoo_run_stopped_part_way_leaves_a_partial_report(tmp_path, tiny_zoo, monkeypatch):
    """After each (draw, model) run the report holds what has finished, marked partial: stopped in its
    second run, the first model's numbers are there."""
    from research import diffusion_zoo

    calls = []
    real = diffusion_zoo.evaluate_methods

    def stopped(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(diffusion_zoo, "evaluate_methods", stopped)
    monkeypatch.setattr(diffusion_zoo, "METHODS", ("rose-ekfac", "rose-diag", "denoising"))  # quick
    ws = smoke_workspace(tmp_path / "bench", datasets=("fashion_mnist",))
    with pytest.raises(KeyboardInterrupt):
        run_experiment("diffusion-zoo", ws, EXPERIMENTS)
    report = next((tmp_path / "bench").rglob("report.md")).read_text()
    assert "Partial: 1 of 6 (draw, model) runs on fashion_mnist finished" in report
    assert "AUROC, zoo DDPMs on fashion_mnist" in report and "(0." in report  # the first model's values


@needs_shared_data
@pytest.mark.slow
def test_a_defaults_run_stopped_part_way_leaves_a_partial_report(tmp_path, tiny_zoo, monkeypatch):
    """The settings that reuse the default fit run first on every model; stopped in its second run, the
    report holds the first model's default, marked partial."""
    from research import diffusion_defaults

    calls = []
    real = diffusion_defaults.setting_scores

    def stopped(ws, model, data, seed, change, image_draw=0):
        calls.append(dict(change))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(ws, model, data, seed, change)

    monkeypatch.setattr(diffusion_defaults, "setting_scores", stopped)
    ws = smoke_workspace(tmp_path / "bench", datasets=("fashion_mnist",))
    with pytest.raises(KeyboardInterrupt):
        run_experiment("diffusion-defaults", ws, EXPERIMENTS)
    assert calls == [{}, {}]  # the default on s0, then on s1: the free settings go first
    report = next((tmp_path / "bench").rglob("report.md")).read_text()
    assert "Partial: 1 of" in report and "(setting, model) runs on fashion_mnist finished" in report
    assert "| default |" in report and "the default |" in report


@needs_shared_data
@pytest.mark.slow
def test_diffusion_defaults_bench_smoke(tmp_path, tiny_zoo, monkeypatch):
    """Every setting on the tiny zoo models, one change at a time from the default, with the rule's
    verdicts; the layer-set rows reuse the fit on all layers (one fit per K, range, Fisher and draw) and
    run on every model; a setting that needs a fit stops at the first model where it is not above the
    default. Reduced form (CI): the first model (stopping model by model: the two tests above)."""
    from research.diffusion_defaults import needs_fit, settings

    from roseood.models import load_model

    seeds = (0, 1, 2) if FULL else (0,)
    monkeypatch.setattr(zoo, "ZOO_SEEDS", seeds)
    ws = smoke_workspace(tmp_path / "bench", datasets=("fashion_mnist",))
    report = run_experiment("diffusion-defaults", ws, EXPERIMENTS)
    text = report.read_text()
    assert "ROSE settings on the zoo's fashion_mnist DDPMs" in text and "the default |" in text
    results = json.loads((report.parent / "results.json").read_text())["results"]
    names = settings(load_model(tiny_zoo / "ddpm-fmnist-s0"))
    assert all(0.0 <= v <= 1.0 for per in results.values() for v in per.values())

    def mean(seed: int, label: str) -> float:
        return float(np.mean(list(results[f"fashion_mnist/ddpm-fmnist-s{seed}/{label}"].values())))

    for label, change in names.items():
        ran = [s for s in seeds if f"fashion_mnist/ddpm-fmnist-s{s}/{label}" in results]
        if not needs_fit(change):
            assert ran == list(seeds), label
            continue
        assert ran and ran == list(seeds[: len(ran)]), label  # model by model, from the first
        assert all(mean(s, label) > mean(s, "default") for s in ran[:-1]), label
        if len(ran) < len(seeds):  # stopped: not above the default on its last model
            assert mean(ran[-1], label) <= mean(ran[-1], "default"), label
            assert f"not above it on s{ran[-1]}; not run on the other" in text


def test_a_setting_below_the_default_on_one_model_is_refused_there():
    from research.diffusion_defaults import below, refused

    found = {"default": {0: {"a": 0.9}, 1: {"a": 0.8}}, "K = 4": {0: {"a": 0.95}, 1: {"a": 0.8}}}
    found["up"] = {0: {"a": 0.95}}
    assert below(found, "K = 4") == [1] and refused(found, "K = 4")  # a tie is not above
    assert not refused(found, "up") and not refused(found, "default")


@needs_shared_data
def test_a_setting_above_the_default_everywhere_is_confirmed_on_fresh_images(tmp_path, tiny_zoo, monkeypatch):
    """A setting above the default on every model runs again beside the default on fresh test and OOD
    images, model by model, and replaces the default only if it is above there too; settings the first
    draw refused get no confirmation. Faked scores: a setting's AUROC is fixed by its label and draw."""
    from research import diffusion_defaults
    from roseood.models import load_model

    changes = list(diffusion_defaults.settings(load_model(tiny_zoo / "ddpm-fmnist-s0")).values())
    good = next(c for c in changes if set(c) == {"t_max"})  # the lower half: above on both draws
    lucky = next(c for c in changes if set(c) == {"t_min"})  # the upper half: above on the first only
    runs = []

    def faked(ws, model, data, seed, change, image_draw=0):
        runs.append((dict(change), image_draw, seed))
        lift = 1.0 if change == good or (change == lucky and not image_draw) else -1.0 if change else 0.0
        rng = np.random.default_rng(seed)
        inside = rng.normal(size=50)
        return {data: inside} | {s: inside + 0.5 + 0.25 * lift for s in diffusion_defaults.OOD[data]}

    monkeypatch.setattr(diffusion_defaults, "setting_scores", faked)
    monkeypatch.setattr(zoo, "ZOO_SEEDS", (0, 1))
    ws = smoke_workspace(tmp_path / "bench", datasets=("fashion_mnist",))
    text = run_experiment("diffusion-defaults", ws, EXPERIMENTS).read_text()
    fresh = [(change, seed) for change, draw, seed in runs if draw]
    assert fresh == [({}, 0), (good, 0), ({}, 1), (good, 1), (lucky, 0)]  # the default once per model
    assert "replaces it (confirmed on fresh images)" in text
    assert "default stays (above it on every model, but not on fresh images on s0)" in text
    assert "Confirmation on fresh test and OOD images, fashion_mnist" in text
    assert sum(1 for change, draw, _ in runs if change == {"k": 1} and not draw) == 1  # refused on s0


def test_the_timestep_settings_halve_the_models_own_range_and_try_the_whole_one():
    from research.diffusion_defaults import settings

    from roseood.models.diffusion import DiffusionModel

    def ranges(lo: float, hi: float) -> dict[str, dict[str, float]]:
        model = DiffusionModel(in_channels=1, image_size=8, widths=(4,), denoising={"t_min": lo, "t_max": hi})
        return {k: v for k, v in settings(model).items() if k.startswith("t ∈")}

    assert ranges(0.0, 0.5) == {
        "t ∈ [0, 0.25)": {"t_max": 0.25},
        "t ∈ [0.25, 0.5)": {"t_min": 0.25},
        "t ∈ [0, 1)": {"t_min": 0.0, "t_max": 1.0},
    }
    assert ranges(0.0, 1.0) == {"t ∈ [0, 0.5)": {"t_max": 0.5}, "t ∈ [0.5, 1)": {"t_min": 0.5}}


def test_every_bench_rescoring_follows_the_runs_progress_setting():
    """``LayerScores`` fits a ROSE that can run for an hour per setting on the zoo; every experiment hands
    it the workspace's progress setting (its default is silent), so ``python -m research`` shows that work."""
    import ast
    from pathlib import Path

    import research

    calls = []
    for path in Path(research.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LayerScores":
                calls.append((path.name, node))
    assert len(calls) >= 3  # ablation, diffusion-defaults, near-ood
    silent = [
        name
        for name, call in calls
        if len(call.args) < 8 and "progress" not in {k.arg for k in call.keywords}
    ]
    assert not silent, f"LayerScores without the run's progress setting in {silent}"
