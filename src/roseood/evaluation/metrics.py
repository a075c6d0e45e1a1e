"""OOD metrics with the paper's conventions, computed with scikit-learn.

Scores are "higher = more out-of-distribution". Following the paper (Tables 4–5), in-distribution
images are the *positive* class: AUROC and AUPRC rank in-distribution above OOD (AUROC is the same
either way round), and FPR@k is the fraction of OOD images accepted as in-distribution when the
threshold keeps k of the in-distribution images (the paper's FPR80 for k = 80 %).

``metric_intervals`` adds percentile-bootstrap intervals (scipy) that resample the in-distribution and OOD
test scores independently: they show how much a number owes to the draw of test images, not to the
Fisher images or to the model's training seed. The resamples' metrics are computed all at once
(``_resampled_values``, equal to scikit-learn's on each: ``tests/evaluation/test_metrics.py``): called
once per resample, scikit-learn took 5 s per (method, set) pair, most of a small ``rose evaluate``.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import bootstrap, rankdata
from sklearn.metrics import auc, average_precision_score, roc_curve

from roseood.errors import DataError
from roseood.validation import check_float, check_int, check_seed

METRICS = ("auroc", "auprc", "fpr80", "fpr95")
INTERVAL_MIN_SCORES = 2  # scipy's bootstrap needs at least this many scores on each side
# the most scores the resamples hold at once (~10 arrays of this many: 0.3 GB); past it they are drawn in
# batches, which draws other resamples than one batch would (the same seed, another interval)
BATCH_SCORES = 1 << 22


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


def _resampled_values(scores_in: np.ndarray, scores_out: np.ndarray, axis: int = -1) -> np.ndarray:
    """``_metric_values`` of every row (resample) of ``scores_in`` (B, n) and ``scores_out`` (B, m) at once,
    shape (4, B), with scikit-learn's conventions for tied scores: the ROC curve has one point per distinct
    score, so AUROC is the Mann-Whitney statistic with ties counted half, and AP weighs each positive by the
    precision at the end of its tie group."""
    pos, neg = np.moveaxis(scores_in, axis, -1), np.moveaxis(scores_out, axis, -1)
    n_pos, n_neg = pos.shape[-1], neg.shape[-1]
    conf = -np.concatenate([pos, neg], axis=-1)  # in-distribution positive, confidence = −OOD score
    labels = np.concatenate([np.ones(pos.shape), np.zeros(neg.shape)], axis=-1)
    ranks = rankdata(conf, axis=-1)  # ascending, ties averaged
    auroc = (ranks[..., :n_pos].sum(-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    order = np.argsort(-conf, axis=-1, kind="stable")  # most confident first
    ordered, hits = np.take_along_axis(conf, order, -1), np.take_along_axis(labels, order, -1)
    tp = np.cumsum(hits, -1)
    count = np.arange(1, n_pos + n_neg + 1)
    ends = np.ones(ordered.shape, bool)  # the last image of each tie group: the ROC curve's points
    ends[..., :-1] = ordered[..., :-1] != ordered[..., 1:]
    # the end of each image's tie group: the first end at or after it
    index = np.where(ends, count - 1, count.size)
    group_end = np.flip(np.minimum.accumulate(np.flip(index, -1), -1), -1)
    tp_end = np.take_along_axis(tp, group_end, -1)
    precision = tp_end / count[group_end]
    ap = (hits * precision).sum(-1) / n_pos
    fp = count - tp
    tpr, fpr = tp / n_pos, fp / n_neg
    # scikit-learn's roc_curve drops a point whose step in and step out are the same (drop_intermediate),
    # which moves FPR@k where such a point first reaches k; the first and last points stay
    last = np.maximum.accumulate(np.where(ends, count - 1, -1), -1)  # the last end at or before each
    before = np.concatenate([np.full((*last.shape[:-1], 1), -1), last[..., :-1]], -1)
    after = np.concatenate([group_end[..., 1:], np.full((*last.shape[:-1], 1), count.size - 1)], -1)
    at = np.maximum(before, 0)
    step_in_tp, step_in_fp = tp - np.take_along_axis(tp, at, -1), fp - np.take_along_axis(fp, at, -1)
    step_out_tp = np.take_along_axis(tp, after, -1) - tp
    step_out_fp = np.take_along_axis(fp, after, -1) - fp
    turns = (step_in_tp != step_out_tp) | (step_in_fp != step_out_fp)
    kept = ends & ((before < 0) | (count == count.size) | turns)
    fprs = []
    for k in (0.80, 0.95):  # the first point of the curve whose TPR reaches k
        first = np.argmax(kept & (tpr >= k), axis=-1)[..., None]
        fprs.append(np.take_along_axis(fpr, first, -1)[..., 0])
    return np.stack([auroc, ap, *fprs])


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
    n = np.size(scores_in) + np.size(scores_out)
    ci = bootstrap(
        (np.asarray(scores_in, float), np.asarray(scores_out, float)),
        _resampled_values,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        paired=False,
        vectorized=True,
        batch=None if resamples * n <= BATCH_SCORES else max(1, BATCH_SCORES // n),
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return {m: (float(lo), float(hi)) for m, lo, hi in zip(METRICS, ci.low, ci.high, strict=True)}


def roc_points(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of the ROC curve with in-distribution as positive, for plotting."""
    labels, conf = _labels_and_confidence(scores_in, scores_out)
    fprs, tprs, _ = roc_curve(labels, conf)
    return fprs, tprs
