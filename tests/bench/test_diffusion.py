"""`rose bench diffusion` under the smoke profile: every method on every seed's model, cells as mean ±
t-interval over the seeds, NFEs and images/s reported."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roseood.bench import run_experiment
from roseood.bench.experiments.diffusion import METHODS, OOD, mean_interval
from tests.bench.smoke import smoke_workspace
from tests.conftest import needs_shared_data


def test_mean_interval_is_the_student_t_half_width():
    mean, half = mean_interval([0.8, 0.9, 1.0])
    assert mean == pytest.approx(0.9)
    assert half == pytest.approx(4.302653 * 0.1 / np.sqrt(3), rel=1e-5)  # t(0.975, 2) · s / √n
    assert np.isnan(mean_interval([0.5])[1])


@needs_shared_data
@pytest.mark.slow
def test_diffusion_bench_smoke(tmp_path):
    ws = smoke_workspace(tmp_path, datasets=("fashion_mnist",))
    report = run_experiment("diffusion", ws)
    text = report.read_text()
    assert "NFEs/image" in text and "images/s" in text and " ± " in text
    assert "| test images per set (VAE / Glow) | 12 |" in text  # this experiment's value, not the profile's
    results = json.loads((report.parent / "results.json").read_text())["results"]
    assert {"fashion_mnist/seed0", "fashion_mnist/seed1"} <= set(results)
    summary = results["fashion_mnist/summary"]
    for method in METHODS:
        assert set(summary[method]) == set(OOD["fashion_mnist"])
        assert all(0.0 <= mean <= 1.0 for mean, _ in summary[method].values())
