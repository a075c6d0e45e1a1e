"""Every detector's scores on two real models equal those recorded before the package's redesign, within
tolerances measured between CPUs (``tests.regression.scores.TOLERANCE``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.regression.scores import EXPECTED, TOLERANCE, distances, moved_keys, recorded, table, vae_methods

pytestmark = pytest.mark.float_sensitive


@recorded
def test_scores_equal_the_recorded_ones():
    """The shipped demo VAE's keys (the authors' seed-1 VAE's: test_scores_authors.py)."""
    assert not (moved := moved_keys("demo")), moved


def test_every_method_is_recorded_on_both_models():
    assert set(np.load(EXPECTED).files) == {f"{m}/{k}" for m in ("demo", "seed1") for k in vae_methods()}


def test_every_method_has_a_tolerance():
    assert {key.split("/", 1)[1] for key in np.load(EXPECTED).files} == set(TOLERANCE)


def test_a_moved_key_is_reported_with_its_distances():
    tol, diag_tol = TOLERANCE["nll"], TOLERANCE["rose-diag"]
    expected = {"demo/nll": np.array([100.0, -200.0]), "demo/rose-diag": np.array([0.0, 2.0])}
    got = {"demo/nll": expected["demo/nll"] + [0.0, 400 * tol], "demo/rose-diag": np.array([diag_tol, 2.0])}
    rows = distances(got, expected)
    assert rows[0] == ("demo/nll", f"{400 * tol:.3g}", f"{2 * tol:.3g}", f"{2 * tol:.3g}", f"{tol:g}", "")
    assert rows[1][2] == "inf" and rows[1][-1] == "ok"  # off a score of 0, but by half the tolerance of 2
    assert table(rows).splitlines()[1].split() == list(rows[0][:-1])
    got["demo/rose-diag"][0] = np.nan
    assert distances(got, expected)[1][-1] == ""
