"""AcrossModels: one evaluation per model and every metric's spread across them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from roseood.errors import RoseError
from roseood.evaluation import AcrossModels, EvaluationResult


def _result(shift: float, seed: int, methods: tuple[str, ...] = ("nll", "rose")) -> EvaluationResult:
    rng = np.random.default_rng(seed)
    scores = {
        m: {"in": rng.normal(0, 1, 200), "far": rng.normal(shift + i, 1, 150)} for i, m in enumerate(methods)
    }
    return EvaluationResult(in_name="in", settings={"model": f"m{seed}", "seed": 2021}, scores=scores)


def test_spread_summarises_each_models_metrics():
    results = {f"seed{s}": _result(0.5 + 0.2 * s, s) for s in range(4)}
    spread = AcrossModels(results).spread()
    for method in ("nll", "rose"):
        for metric in ("auroc", "auprc", "fpr80", "fpr95"):
            values = np.array([r.metrics()[method]["far"][metric] for r in results.values()])
            cell = spread[method]["far"][metric]
            assert cell["n"] == 4
            assert cell["mean"] == pytest.approx(values.mean())
            assert cell["sd"] == pytest.approx(values.std(ddof=1))
            assert (cell["min"], cell["max"]) == (values.min(), values.max())
            assert cell["mean_low"] < cell["mean"] < cell["mean_high"]
    # the four shifts differ, so the models' AUROCs do too, and more shift is better
    auroc = [r.metrics()["nll"]["far"]["auroc"] for r in results.values()]
    assert auroc == sorted(auroc) and spread["nll"]["far"]["auroc"]["sd"] > 0.01


def test_the_interval_of_the_mean_narrows_with_more_models_and_vanishes_without_spread():
    few = AcrossModels({str(s): _result(0.5 + 0.1 * (s % 3), s) for s in range(3)}).spread()
    many = AcrossModels({str(s): _result(0.5 + 0.1 * (s % 3), s) for s in range(12)}).spread()

    def width(spread: dict) -> float:
        return spread["nll"]["far"]["auroc"]["mean_high"] - spread["nll"]["far"]["auroc"]["mean_low"]

    assert width(many) < width(few) / 2
    same = AcrossModels({"a": _result(1.0, 7), "b": _result(1.0, 7)}).spread()["rose"]["far"]["auroc"]
    assert same["sd"] == 0 and same["mean_low"] == same["mean"] == same["mean_high"]


def test_across_models_refuses_one_model_and_unlike_evaluations():
    with pytest.raises(RoseError, match="at least two models"):
        AcrossModels({"only": _result(1.0, 0)})
    with pytest.raises(RoseError, match="'b' was evaluated with other methods"):
        AcrossModels({"a": _result(1.0, 0), "b": _result(1.0, 1, methods=("nll",))})


def test_json_holds_the_spread_and_every_model(tmp_path):
    across = AcrossModels({"a": _result(0.5, 0), "b": _result(0.9, 1)})
    across.write_json(tmp_path / "out.json")
    data = json.loads((tmp_path / "out.json").read_text())
    assert set(data["models"]) == {"a", "b"} and data["models"]["b"]["settings"]["model"] == "m1"
    cell = data["across_models"]["rose"]["far"]["auroc"]
    half = stats.t.ppf(0.975, 1) * cell["sd"] / np.sqrt(2)
    assert cell["mean_high"] == pytest.approx(cell["mean"] + half)


def test_shared_settings_are_those_every_model_has_alike():
    a, b = _result(0.5, 0), _result(0.9, 1)
    a.settings |= {"model_config": {"width": 48}, "fit_warnings": {"rose": ["ties"]}}
    b.settings |= {"model_config": {"width": 48}, "fit_warnings": {"rose": []}}
    assert AcrossModels({"a": a, "b": b}).shared_settings() == {"seed": 2021, "model_config": {"width": 48}}
