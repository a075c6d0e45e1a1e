"""An evaluation over tiny .npz sets: a dim in-distribution set, a bright and a mid-grey OOD set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from roseood.evaluation.splits import OVERALL, EvalSpec


def _npz(path: Path, n: int, seed: int, bright: int) -> str:
    rng = np.random.default_rng(seed)
    images = np.clip(rng.normal(bright, 30, (n, 28, 28)), 0, 255).astype(np.uint8)
    np.savez_compressed(path, images=images)
    return str(path)


@pytest.fixture
def spec(tmp_path: Path) -> EvalSpec:
    return EvalSpec(
        in_data=_npz(tmp_path / "in.npz", 20, 0, 60),
        fit_data=_npz(tmp_path / "fit.npz", 40, 1, 60),
        ood=[_npz(tmp_path / "a.npz", 16, 2, 200), _npz(tmp_path / "b.npz", 12, 3, 120), OVERALL],
        methods=["nll", "rose-diag"],
        fit_samples=30,
        stats_samples=10,
        test_samples=20,
        overall_per_set=10,
        batch_size=8,
    )
