"""OOD metrics with the paper's conventions, computed with scikit-learn.

Scores are "higher = more out-of-distribution". Following the paper (Tables 4–5), in-distribution
images are the *positive* class: AUROC and AUPRC rank in-distribution above OOD (AUROC is the same
either way round), and FPR@k is the fraction of OOD images accepted as in-distribution when the
threshold keeps k of the in-distribution images (the paper's FPR80 for k = 80 %).

``metric_intervals`` adds percentile-bootstrap intervals (scipy) that resample the in-distribution and OOD
test scores independently: they show how much a number owes to the draw of test images, not to the
Fisher images or to the model's training seed.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import bootstrap
from sklearn.metrics import auc, average_precision_score, roc_curve

from roseood.errors import DataError
from roseood.validation import check_float, check_int, check_seed

METRICS = ("auroc", "auprc", "fpr80", "fpr95")
INTERVAL_MIN_SCORES = 2  # scipy's bootstrap needs at least this many scores on each side


def _labels_and_confidence(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores_in, scores_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    if scores_in.size == 0 or scores_out.size == 0:
        raise DataError("metrics need at least one in-distribution and one OOD score")
    both = np.concatenate([scores_in, scores_out])
    if not np.isfinite(both).all():
        raise DataError("scores contain NaN or infinite values")
    labels = np.concatenate([np.ones(scores_in.size), np.zeros(scores_out.size)])
    return labels, -both  # in-distribution positive, confidence = −OOD score


def _fpr_at(fprs: np.ndarray, tprs: np.ndarray, tpr: float) -> float:
    return float(fprs[np.searchsorted(tprs, tpr, side="left")])


def fpr_at_tpr(scores_in: np.ndarray, scores_out: np.ndarray, tpr: float) -> float:
    """Fraction of OOD images accepted when the threshold accepts at least ``tpr`` of in-distribution."""
    fprs, tprs = roc_points(scores_in, scores_out)
    return _fpr_at(fprs, tprs, tpr)


def _metric_values(scores_in: np.ndarray, scores_out: np.ndarray) -> np.ndarray:
    """The ``METRICS`` in order from one ROC curve (AUROC as scikit-learn's ``roc_auc_score`` has it)."""
    labels, conf = _labels_and_confidence(scores_in, scores_out)
    fprs, tprs, _ = roc_curve(labels, conf)
    ap = average_precision_score(labels, conf)
    return np.array([auc(fprs, tprs), ap, _fpr_at(fprs, tprs, 0.80), _fpr_at(fprs, tprs, 0.95)])


def ood_metrics(scores_in: np.ndarray, scores_out: np.ndarray) -> dict[str, float]:
    """AUROC, AUPRC (in-distribution positive), FPR at 80 % and 95 % TPR."""
    return dict(zip(METRICS, map(float, _metric_values(scores_in, scores_out)), strict=True))


def metric_intervals(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile-bootstrap interval (``level``, ``resamples``) of every metric; the in-distribution and
    OOD scores are resampled independently, each to its own size. Seeded, so a run repeats exactly."""
    check_int(resamples, "resamples")
    check_float(level, "level", low=0.0, high=0.9999, low_open=True)
    check_seed(seed)
    _labels_and_confidence(scores_in, scores_out)  # the same clear errors as ood_metrics
    if min(np.size(scores_in), np.size(scores_out)) < INTERVAL_MIN_SCORES:
        raise DataError("a bootstrap interval needs at least two in-distribution and two OOD scores")
    ci = bootstrap(
        (np.asarray(scores_in, float), np.asarray(scores_out, float)),
        _metric_values,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        paired=False,
        vectorized=False,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return {m: (float(lo), float(hi)) for m, lo, hi in zip(METRICS, ci.low, ci.high, strict=True)}


def roc_points(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of the ROC curve with in-distribution as positive, for plotting."""
    labels, conf = _labels_and_confidence(scores_in, scores_out)
    fprs, tprs, _ = roc_curve(labels, conf)
    return fprs, tprs
