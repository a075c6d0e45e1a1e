"""Metric conventions on hand-made cases (in-distribution positive, higher score = more OOD), and the
bootstrap intervals: they hold the estimate, cover the true AUROC, narrow with more images, repeat by seed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import bootstrap, norm

from roseood.errors import DataError, RoseError
from roseood.evaluation.metrics import (
    METRICS,
    _metric_values,
    _resampled_values,
    fpr_at_tpr,
    metric_intervals,
    ood_metrics,
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 30),
    st.integers(1, 8),
    st.sampled_from([3, 12, 1000]),  # 3 levels: mostly ties; 1000: almost none
    st.integers(0, 2**32 - 1),
)
def test_resampled_metrics_equal_scikit_learns_on_every_row(n_in, n_out, rows, levels, seed):
    """The bootstrap's all-at-once metrics against scikit-learn's, one row at a time, ties included
    (scikit-learn's ROC curve has one point per distinct score and drops points where it runs straight,
    which moves FPR@k)."""
    rng = np.random.default_rng(seed)
    scores_in = rng.integers(0, levels, (rows, n_in)).astype(float)
    scores_out = rng.integers(0, levels, (rows, n_out)) + rng.integers(0, 2) * levels / 3
    got = _resampled_values(scores_in, scores_out)
    want = np.stack([_metric_values(a, b) for a, b in zip(scores_in, scores_out, strict=True)], 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)  # sums of a few dozen fractions


def test_intervals_are_scipys_bootstrap_of_scikit_learns_metrics():
    """The same resamples as scipy's bootstrap calling scikit-learn's metrics once per resample (what
    ``metric_intervals`` did before, 100× slower on small sets): the same intervals."""
    rng = np.random.default_rng(5)
    scores_in, scores_out = np.round(rng.normal(0, 1, 300), 1), np.round(rng.normal(0.7, 1, 200), 1)
    ci = bootstrap(
        (scores_in, scores_out),
        _metric_values,
        n_resamples=300,
        method="percentile",
        paired=False,
        vectorized=False,
        rng=np.random.default_rng(2),
    ).confidence_interval
    got = metric_intervals(scores_in, scores_out, resamples=300, seed=2)
    for m, lo, hi in zip(METRICS, ci.low, ci.high, strict=True):
        assert got[m] == pytest.approx((lo, hi), abs=1e-12), m


def test_perfect_and_inverted_separation():
    good = ood_metrics(np.array([0.0, 1.0, 2.0]), np.array([5.0, 6.0]))
    assert good == {"auroc": 1.0, "auprc": 1.0, "fpr80": 0.0, "fpr95": 0.0}
    bad = ood_metrics(np.array([5.0, 6.0]), np.array([0.0, 1.0, 2.0]))
    assert bad["auroc"] == 0.0 and bad["fpr80"] == 1.0


def test_auroc_counts_pairs():
    # in = {1, 3}, out = {2, 4}: pairs (in < out) are (1,2), (1,4), (3,4) → 3 of 4
    assert ood_metrics(np.array([1.0, 3.0]), np.array([2.0, 4.0]))["auroc"] == pytest.approx(0.75)


def test_fpr80_threshold_keeps_80_percent_of_in_distribution():
    scores_in = np.arange(10.0)  # accept the 8 lowest: threshold at 7
    scores_out = np.array([6.5, 7.5, 100.0, 100.0])  # only 6.5 is accepted → 1/4
    assert fpr_at_tpr(scores_in, scores_out, 0.8) == pytest.approx(0.25)
    assert fpr_at_tpr(scores_in, scores_out, 0.95) == pytest.approx(0.5)


def test_auprc_uses_in_distribution_as_positive():
    # one OOD image ranked as the most in-distribution: the first retrieved item is a false positive
    m = ood_metrics(np.array([1.0, 2.0, 3.0]), np.array([0.0]))
    assert m["auprc"] == pytest.approx(np.mean([1 / 2, 2 / 3, 3 / 4]))  # precision at each in-dist hit


def test_bad_inputs():
    with pytest.raises(DataError, match="at least one"):
        ood_metrics(np.array([]), np.array([1.0]))
    with pytest.raises(DataError, match="NaN"):
        ood_metrics(np.array([np.nan]), np.array([1.0]))


def _shifted(n: int, seed: int, shift: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """In-distribution N(0, 1) and OOD N(shift, 1) scores: the true AUROC is Φ(shift / √2)."""
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, n), rng.normal(shift, 1.0, n)


def test_intervals_hold_the_estimate_and_repeat_by_seed():
    scores_in, scores_out = _shifted(150, 0)
    point = ood_metrics(scores_in, scores_out)
    ci = metric_intervals(scores_in, scores_out, resamples=200, seed=3)
    assert set(ci) == set(METRICS)
    for m in METRICS:
        assert 0.0 <= ci[m][0] <= point[m] <= ci[m][1] <= 1.0, m
        assert ci[m][1] > ci[m][0], m  # overlapping scores: resampling moves every metric
    assert metric_intervals(scores_in, scores_out, resamples=200, seed=3) == ci
    assert metric_intervals(scores_in, scores_out, resamples=200, seed=4) != ci
    perfect = metric_intervals(np.arange(5.0), np.arange(10.0, 15.0), resamples=50)
    assert perfect["auroc"] == (1.0, 1.0) and perfect["fpr95"] == (0.0, 0.0)


def test_auroc_intervals_cover_the_true_value_and_narrow_with_more_images():
    true_auroc = float(norm.cdf(1.0 / np.sqrt(2.0)))
    draws = [metric_intervals(*_shifted(60, seed), resamples=150, seed=seed)["auroc"] for seed in range(20)]
    covered = sum(lo <= true_auroc <= hi for lo, hi in draws)
    assert covered >= 16  # 95 % intervals: 19 of 20 expected; a broken resampler covers far fewer
    small = metric_intervals(*_shifted(100, 0), resamples=100)["auroc"]
    large = metric_intervals(*_shifted(1600, 0), resamples=100)["auroc"]
    width_ratio = (small[1] - small[0]) / (large[1] - large[0])
    assert 2.5 < width_ratio < 6.5  # √16 = 4: the width falls as 1/√n


def test_interval_arguments_are_checked():
    scores_in, scores_out = _shifted(10, 0)
    with pytest.raises(RoseError, match="resamples"):
        metric_intervals(scores_in, scores_out, resamples=0)
    with pytest.raises(RoseError, match="level"):
        metric_intervals(scores_in, scores_out, level=1.0)
    with pytest.raises(DataError, match="NaN"):
        metric_intervals(np.array([np.nan]), scores_out)
    with pytest.raises(DataError, match="two in-distribution and two OOD"):
        metric_intervals(scores_in, scores_out[:1])
