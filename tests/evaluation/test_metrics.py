"""Metric conventions on hand-made cases (in-distribution positive, higher score = more OOD)."""

from __future__ import annotations

import numpy as np
import pytest

from roseood.errors import DataError
from roseood.evaluation.metrics import fpr_at_tpr, ood_metrics


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
