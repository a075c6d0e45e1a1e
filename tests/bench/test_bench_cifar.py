"""The CIFAR-10 extras (brightness, Tables 10 and 11, Figure 4), the Fisher-size sweep (Figure 5) and
the layer-wise classifiers (Figure 6) run end to end under the smoke profile and check their numbers
(Figures 4 and 5 in the full run only: ``tests/bench/smoke.py``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.bench.smoke import FULL_ONLY, Smoke
from tests.bench.smoke import test_experiment_report as test_experiment_report  # run on this GROUP
from tests.bench.smoke import test_table_aurocs_match_saved_scores as test_table_aurocs_match_saved_scores
from tests.conftest import needs_shared_data

GROUP = 1


@needs_shared_data
@FULL_ONLY
def test_the_sweep_holds_its_numbers(smoke_run: Smoke) -> None:
    ws, reports = smoke_run
    p = ws.profile
    fig5 = json.loads((reports["figure5"].parent / "results.json").read_text())["results"]["auroc"]
    assert list(fig5) == [str(n) for n in p.fisher_sizes]
    for per_set in fig5.values():
        assert "overall" in per_set
        assert all(len(v) == p.fisher_repeats and all(0 <= x <= 1 for x in v) for v in per_set.values())


@needs_shared_data
def test_layerwise_and_brightness_figures_hold_their_numbers(smoke_run: Smoke) -> None:
    _, reports = smoke_run
    fig6 = json.loads((reports["figure6"].parent / "results.json").read_text())["results"]
    for arch, entry in fig6.items():
        assert entry["auroc"], arch
        assert all(len(v) == len(entry["layers"]) for v in entry["auroc"].values()), arch
    bright = json.loads((reports["brightness"].parent / "results.json").read_text())
    expected: list[float] = []  # mean and std over the brightness levels, per set with data and method
    for per in bright["results"]["auroc"].values():
        if any(x is not None for values in per.values() for x in values):
            for values in per.values():
                v = np.array([np.nan if x is None else x for x in values])
                expected += [float(np.nanmean(v)), float(np.nanstd(v))]
    assert [r["ours"] for r in bright["comparison"]] == pytest.approx(expected)


@needs_shared_data
@FULL_ONLY
def test_figure4_compares_the_overall_auroc_it_plots(smoke_run: Smoke) -> None:
    _, reports = smoke_run
    payload = json.loads((reports["figure4"].parent / "results.json").read_text())
    points = payload["results"]["points"]
    assert set(points) == {"rose-ekfac", "rose-diag", "nll", "lr", "lratio", "ic-png", "ic-jp2"}
    assert all(speed > 0 for speed, _ in points.values())
    (row,) = payload["comparison"]
    assert row["labels"] == ["overall", "rose-ekfac"] and row["ours"] == points["rose-ekfac"][1]
