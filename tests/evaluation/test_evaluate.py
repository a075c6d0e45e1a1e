"""The evaluation API's options: layer-wise scores, Fisher-size sweeps with fresh draws, cache keys found
without building a detector, missing sets as warnings, images validated once per score, bootstrap
intervals."""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from roseood.detectors import ROSE, method_params
from roseood.detectors import inputs as detector_inputs
from roseood.errors import DataError, RoseError
from roseood.evaluation.cache import ResultCache
from roseood.evaluation.evaluate import evaluate, sweep
from roseood.evaluation.result import EvaluationResult
from roseood.evaluation.splits import EvalSpec, fit_source, load_fit_images, load_sets
from roseood.models import VAE
from tests.conftest import needs_shared_data

# the module (``roseood.evaluation.evaluate`` the attribute is the function of that name)
evaluate_module = importlib.import_module("roseood.evaluation.evaluate")


def test_layer_metrics_give_one_auroc_per_layer_ties_counted() -> None:
    """Layer 0 separates in (low) from OOD (high) scores: AUROC 1.0; layer 1 is constant: 0.5."""
    result = EvaluationResult(in_name="in", settings={})
    result.scores["rose"] = {
        "in": np.array([[0.0, 1.0], [1.0, 1.0]]),
        "ood": np.array([[2.0, 1.0], [3.0, 1.0]]),
    }
    assert result.layer_metrics("rose") == {"ood": [1.0, 0.5]}


def test_layerwise_evaluation_scores_every_layer(tiny_vae: VAE, spec: EvalSpec, tmp_path: Path) -> None:
    spec = replace(spec, methods=["rose-diag"], layerwise=True)
    cache = ResultCache(tmp_path / "cache")
    result = evaluate(tiny_vae, spec, progress=False, cache=cache)
    layers = len(tiny_vae.rose_layers(None))
    for name, scores in result.scores["rose-diag"].items():
        assert scores.ndim == 2 and scores.shape[1] == layers, name
    again = evaluate(tiny_vae, spec, progress=False, cache=cache)  # cached (N, layers) arrays come back whole
    np.testing.assert_array_equal(
        again.scores["rose-diag"][spec.in_data], result.scores["rose-diag"][spec.in_data]
    )
    assert len(result.layer_metrics("rose-diag")[spec.ood[0]]) == layers
    with pytest.raises(RoseError, match="ROSE methods only"):
        evaluate(tiny_vae, replace(spec, methods=["nll"]), progress=False)


def test_fit_draws_vary_the_fisher_images_and_keep_the_statistics(tiny_vae: VAE, spec: EvalSpec) -> None:
    draws = [load_fit_images(replace(spec, fit_samples=6, fit_draw=d), tiny_vae).whole.images for d in (0, 1)]
    assert all(len(d) == 6 + spec.stats_samples for d in draws)
    np.testing.assert_array_equal(draws[0][6:], draws[1][6:])  # the same statistics images
    assert not np.array_equal(draws[0][:6], draws[1][:6])
    pool = {x.tobytes() for x in load_fit_images(replace(spec, fit_samples=30), tiny_vae).whole.images}
    assert {x.tobytes() for x in draws[0]} <= pool and len({x.tobytes() for x in draws[0]}) == 16
    assert evaluate_module.fisher_count(replace(spec, fit_samples=6, fit_draw=0), 16) == 6


@needs_shared_data
def test_an_in_set_of_some_classes_is_fitted_on_the_same_classes_of_its_training_split(tiny_vae: VAE) -> None:
    """``--in fashion_mnist@7`` (one class in, the one-class protocol): the fit images come from
    ``fashion_mnist:train@7``, not the whole training split."""
    spec = EvalSpec("fashion_mnist@7", [], ["nll"], fit_samples=8, stats_samples=4)
    assert fit_source(spec) == "fashion_mnist:train@7"
    fit = load_fit_images(spec, tiny_vae)
    assert fit.whole.name == "fashion_mnist:train@7" and set(fit.whole.labels.tolist()) == {7}


@pytest.mark.parametrize(
    ("field", "source", "match"),
    [
        ("in_data", "fashion_mnist:validation", "has no split 'validation'"),
        ("ood", ["mnist", "noise@3"], "generated: they have no classes to select"),
        ("in_data", "fashion_mnist@9-1", "runs backwards"),
        ("ood", ["mnist", "fashion_mnist"], "'fashion_mnist' is the in-distribution set itself"),  # hid it
        ("ood", ["mnist", "noise", "mnist"], "'mnist' is named twice"),  # scored twice, shown once
        ("ood", ["overall"], "'overall' mixes the other OOD sets: name one beside it"),
        ("test_samples", 1, "at least 2 test images a set, got 1"),  # AUROC 1.000 from 1 + 1 images
    ],
)
def test_a_bad_split_or_class_selection_is_refused_when_the_request_is_made(field, source, match) -> None:
    """Before any image is read or model run: the names are checked when the ``EvalSpec`` is built (an
    OOD set named as the in-distribution one replaced its test scores: the tables came out empty)."""
    kwargs = {"in_data": "fashion_mnist", "ood": ["mnist"], "methods": ["nll"], field: source}
    with pytest.raises(DataError, match=match):
        EvalSpec(**kwargs)


def test_an_ood_set_of_one_image_is_said_to_rest_on_it_alone(tiny_vae: VAE, spec: EvalSpec, capsys) -> None:
    """A folder or file of one image gives metrics without an interval: one warning line says so."""
    one = Path(spec.ood[0]).with_name("one.npz")
    np.savez(one, images=np.full((1, 28, 28), 90, np.uint8))
    sets = load_sets(replace(spec, ood=[str(one), spec.ood[1]]), tiny_vae)
    assert len(sets.ood[str(one)]) == 1
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: {one}: 1 image: its metrics rest on it alone, with no interval"]


def test_a_fit_set_of_one_image_is_refused_in_one_line(tiny_vae: VAE, spec: EvalSpec) -> None:
    """Nothing would be held out for the statistics and the threshold (it ended in 'empty image set')."""
    one = Path(spec.ood[0]).with_name("one_fit.npz")
    np.savez(one, images=np.full((1, 28, 28), 60, np.uint8))
    with pytest.raises(DataError, match=r"one_fit\.npz has 1 image: too few to fit on some and hold out"):
        load_fit_images(replace(spec, fit_data=str(one)), tiny_vae)
    with pytest.raises(DataError, match=r"one_fit\.npz has 1 image: too few to split into fit and test"):
        load_sets(replace(spec, in_data=str(one), fit_data=None), tiny_vae)  # one set, split three ways


def test_fewer_fit_images_than_asked_is_one_warning_line(tiny_vae: VAE, spec: EvalSpec, capsys) -> None:
    """A fit set (40 images) smaller than ``fit_samples`` + ``stats_samples`` fits on what it has, and
    one line says how many of each were asked and used, not only the counts of the final line; a set
    that gives what was asked says nothing."""
    short = replace(spec, fit_samples=64, stats_samples=16)
    fit = load_fit_images(short, tiny_vae)
    assert len(fit.whole) == 40 and len(fit.fisher) == evaluate_module.fisher_count(short, 40) == 24
    np.testing.assert_array_equal(np.concatenate([fit.fisher, fit.held_out]), fit.whole.images)
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and warned[0].endswith(
        "fit.npz: 64 fit and 16 statistics images asked, 24 and 16 used (it has 40 images, not 80)"
    )
    load_fit_images(replace(spec, fit_samples=4, stats_samples=36), tiny_vae)  # statistics capped at half
    assert "4 fit and 36 statistics images asked, 20 and 20 used (the statistics take at most half)" in (
        capsys.readouterr().err
    )
    load_fit_images(spec, tiny_vae)  # 30 + 10 of 40: as asked
    assert "warning" not in capsys.readouterr().err


def test_sweep_runs_every_value_and_repeat(tiny_vae: VAE, spec: EvalSpec) -> None:
    spec = replace(spec, methods=["rose-diag"], ood=spec.ood[:1], test_samples=8)
    runs = sweep(tiny_vae, spec, "fit_samples", [4, 8], repeats=2, progress=False)
    assert list(runs) == [4, 8] and all(len(r) == 2 for r in runs.values())
    first, second = (r.scores["rose-diag"][spec.in_data] for r in runs[4])
    assert not np.array_equal(first, second)  # another Fisher draw, another detector
    assert "4 for fitting" in runs[4][0].settings["fit_data"]


def test_a_one_draw_sweep_fits_on_the_asked_fisher_count(tiny_vae: VAE, spec: EvalSpec) -> None:
    """One draw is draw 0 of several: 4 Fisher images drawn beside the 10 statistics images, not the
    usual split of the 14 asked (which would fit on 7), and the same scores as a two-draw sweep's first."""
    spec = replace(spec, methods=["rose-diag"], ood=spec.ood[:1], test_samples=8)
    one = sweep(tiny_vae, spec, "fit_samples", [4], repeats=1, progress=False)[4]
    assert len(one) == 1 and "(14 images: 4 for fitting" in one[0].settings["fit_data"]
    first = sweep(tiny_vae, spec, "fit_samples", [4], repeats=2, progress=False)[4][0]
    scores = (r.scores["rose-diag"][spec.in_data] for r in (one[0], first))
    np.testing.assert_array_equal(*scores)


def test_cache_keys_need_no_detector(tiny_vae: VAE, spec: EvalSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    assert method_params("rose-ekfac") == method_params("rose-ekfac", fisher="ekfac", damping=1e-8)
    assert method_params("rose-ekfac") != method_params("rose-ekfac", layers="all")
    assert method_params("nll")["k"] == 1 and "model" not in method_params("nll")
    with pytest.raises(RoseError, match="rose-diag"):
        method_params("rose-diag", nonsense=1)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cache key must not build a detector")

    monkeypatch.setattr(evaluate_module, "make_detector", refuse)
    params = evaluate_module.detector_params("rose-diag", spec)
    assert params["fisher"] == "diag" and params["batch_size"] == spec.batch_size


def test_an_absent_named_set_is_a_warning(tiny_vae: VAE, spec: EvalSpec, tmp_path: Path) -> None:
    spec = replace(spec, ood=[spec.ood[0], "lsun"], methods=["nll"], data_dir=tmp_path)
    with pytest.warns(UserWarning, match="lsun: no data"):
        result = evaluate(tiny_vae, spec, progress=False)
    assert "lsun" in result.missing and spec.ood[0] in result.scores["nll"]


def test_rose_validates_images_once_per_score(
    tiny_vae: VAE, images: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    det = ROSE(tiny_vae, fisher="diag").fit(
        np.random.default_rng(0).integers(0, 255, (12, 1, 32, 32), np.uint8)
    )
    calls = []
    original = detector_inputs.check_model_input
    monkeypatch.setattr(detector_inputs, "check_model_input", lambda *a: calls.append(1) or original(*a))
    det.score(np.zeros((3, 1, 32, 32), np.uint8))
    assert len(calls) == 1


def test_bootstrap_gives_every_metric_an_interval(tiny_vae: VAE, spec: EvalSpec) -> None:
    result = evaluate(tiny_vae, replace(spec, methods=["nll"], bootstrap=40), progress=False)
    metrics = result.metrics()["nll"]
    assert set(result.intervals()["nll"]) == set(metrics) == set(result.ood_sets)
    for ood_set, per_metric in metrics.items():
        for metric, value in per_metric.items():
            low, high = result.interval("nll", ood_set, metric) or (np.nan, np.nan)
            assert low <= value <= high, (ood_set, metric)
    assert "40 resamples" in result.settings["intervals"]
    assert result.to_json()["intervals"] == result.intervals()
    plain = evaluate(tiny_vae, replace(spec, methods=["nll"]), progress=False)
    assert plain.interval("nll", spec.ood[0], "auroc") is None and "intervals" not in plain.to_json()
    with pytest.raises(RoseError, match="layer-wise"):
        replace(spec, methods=["rose-diag"], layerwise=True, bootstrap=10)


def test_settings_record_every_detectors_options(tiny_vae: VAE, spec: EvalSpec) -> None:
    kwargs = {"rose-diag": {"layers": "all", "adjust": "both", "aggregate": "max-z"}}
    spec = replace(spec, methods=["rose-diag", "nll"], detector_kwargs=kwargs)
    detectors = evaluate(tiny_vae, spec, progress=False).settings["detectors"]
    assert detectors["rose-diag"] == method_params(
        "rose-diag", batch_size=spec.batch_size, **kwargs["rose-diag"]
    )
    assert detectors["rose-diag"]["adjust"] == "both" and detectors["nll"]["k"] == 1


@pytest.mark.parametrize(
    ("method", "options", "counts", "message"),
    [
        ("rose-bands-stats", {}, (40, 16), r"^gmm:k=auto needs at least 20 statistics images .*, got 16$"),
        ("rose-ekfac", {"aggregate": "gmm:k=9"}, (40, 12), r"^gmm:k=9 needs at least 18 statistics images"),
        ("diffpath", {}, (2, 1), r"^diffpath's density needs at least 4 in-distribution images, got 3$"),
    ],
)
def test_counts_an_aggregation_cannot_fit_on_are_refused_before_any_image_or_forward_pass(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    options: dict[str, str],
    counts: tuple[int, int],
    message: str,
) -> None:
    """``rose fit`` of the DDPM default with 16 statistics images fitted the Fishers for minutes before
    the band density refused them: the counts asked for are checked first, no image read, no model run."""
    from roseood.evaluation.evaluate import fit_calibrated
    from roseood.models.diffusion import DiffusionModel

    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()
    ran: list[str] = []
    monkeypatch.setattr(model.unet, "forward", lambda *a, **k: ran.append("unet"))
    monkeypatch.setattr(evaluate_module, "load_fit_images", lambda *a: ran.append("images"))
    spec = EvalSpec("fashion_mnist", [], [method], fit_samples=counts[0], stats_samples=counts[1])
    spec = replace(spec, detector_kwargs={method: options})
    with pytest.raises(RoseError, match=message):
        fit_calibrated(method, model, spec, progress=False)
    assert ran == []


@pytest.mark.parametrize(
    ("kind", "method", "options", "message"),
    [
        ("flow", "diffpath", {}, r"needs a model of DDPM's forward process .* trained by flow matching"),
        ("vae", "rose-bands-stats", {}, r"^rows='bands' scores each row of a loss that runs every image"),
        ("ddpm", "rose-ekfac", {"layers": "middle"}, r"middle"),
        ("ddpm", "rose-bands-stats", {"stochastic": True}, r"needs the fixed pairs of the loss"),
    ],
)
def test_a_method_or_setting_the_model_cannot_take_is_refused_before_any_image_or_forward_pass(
    monkeypatch: pytest.MonkeyPatch, tiny_vae: VAE, kind: str, method: str, options: dict, message: str
) -> None:
    """What the model's kind refuses (a DDPM-path baseline on flow matching, per-pair rows on a model
    with one row per image, a layer set it has not, a stochastic loss with per-pair rows) is said before
    the fit images are read or the network runs, as the counts are."""
    from roseood.evaluation.evaluate import fit_calibrated
    from roseood.models.diffusion import DiffusionModel

    flow = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0}
    ran: list[str] = []
    if kind == "vae":
        model = tiny_vae
        monkeypatch.setattr(model, "forward", lambda *a, **k: ran.append("model"))
    else:
        scheduler = {"scheduler": flow} if kind == "flow" else {}
        model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}, **scheduler)
        monkeypatch.setattr(model.unet, "forward", lambda *a, **k: ran.append("unet"))
    monkeypatch.setattr(evaluate_module, "load_fit_images", lambda *a: ran.append("images"))
    spec = EvalSpec("fashion_mnist", [], [method], fit_samples=40, stats_samples=40)
    spec = replace(spec, detector_kwargs={method: options})
    with pytest.raises(RoseError, match=message):
        fit_calibrated(method, model, spec, progress=False)
    assert ran == []


@pytest.mark.parametrize("planned", [300.0, None])
def test_each_methods_line_counts_down_from_the_forecast_where_there_is_one(
    tiny_vae: VAE,
    spec: EvalSpec,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    planned,
) -> None:
    """Methods that share Fisher passes cost unlike (the first fits them all), so after each method but the
    last the line says what the forecast leaves; with no forecast, the rate so far."""
    monkeypatch.setattr(evaluate_module, "forecast_evaluation", lambda *_: planned)
    evaluate(tiny_vae, replace(spec, methods=["nll", "rose-diag"]), progress=True)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "methods in" in ln]
    assert len(lines) == 2 and not lines[1].split("methods in")[1].count(",")
    assert ("left by the forecast" in lines[0]) == (planned is not None)
    assert ("if the rest take as long" in lines[0]) == (planned is None)
