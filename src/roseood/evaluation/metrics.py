"""OOD metrics with the paper's conventions, computed with scikit-learn.

Scores are "higher = more out-of-distribution". Following the paper (Tables 4–5), in-distribution
images are the *positive* class: AUROC and AUPRC rank in-distribution above OOD (AUROC is the same
either way round), and FPR@k is the fraction of OOD images accepted as in-distribution when the
threshold keeps k of the in-distribution images (the paper's FPR80 for k = 80 %).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from roseood.errors import DataError

METRICS = ("auroc", "auprc", "fpr80", "fpr95")


def _labels_and_confidence(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores_in, scores_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    if scores_in.size == 0 or scores_out.size == 0:
        raise DataError("metrics need at least one in-distribution and one OOD score")
    both = np.concatenate([scores_in, scores_out])
    if not np.isfinite(both).all():
        raise DataError("scores contain NaN or infinite values")
    labels = np.concatenate([np.ones(scores_in.size), np.zeros(scores_out.size)])
    return labels, -both  # in-distribution positive, confidence = −OOD score


def fpr_at_tpr(scores_in: np.ndarray, scores_out: np.ndarray, tpr: float) -> float:
    """Fraction of OOD images accepted when the threshold accepts at least ``tpr`` of in-distribution."""
    labels, conf = _labels_and_confidence(scores_in, scores_out)
    fprs, tprs, _ = roc_curve(labels, conf)
    return float(fprs[np.searchsorted(tprs, tpr, side="left")])


def ood_metrics(scores_in: np.ndarray, scores_out: np.ndarray) -> dict[str, float]:
    """AUROC, AUPRC (in-distribution positive), FPR at 80 % and 95 % TPR."""
    labels, conf = _labels_and_confidence(scores_in, scores_out)
    return {
        "auroc": float(roc_auc_score(labels, conf)),
        "auprc": float(average_precision_score(labels, conf)),
        "fpr80": fpr_at_tpr(scores_in, scores_out, 0.80),
        "fpr95": fpr_at_tpr(scores_in, scores_out, 0.95),
    }


def roc_points(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of the ROC curve with in-distribution as positive, for plotting."""
    labels, conf = _labels_and_confidence(scores_in, scores_out)
    fprs, tprs, _ = roc_curve(labels, conf)
    return fprs, tprs
