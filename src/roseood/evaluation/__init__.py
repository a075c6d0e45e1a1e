"""Evaluate detectors side by side and report: the public API behind ``rose evaluate``.

``evaluate(model, EvalSpec(...))`` fits every method on in-distribution images and scores the
in-distribution test set and each OOD set; the ``EvaluationResult`` gives ``metrics()``, JSON, raw
scores, and ``write_report`` turns it into a Markdown report with ROC curves and histograms;
``write_evaluation_page`` (and ``write_score_page`` for one scored set) into an HTML page with the most
and least OOD images of every set;
``evaluate(..., tpr=0.95)`` also calibrates each detector, and ``write_decisions`` writes every test image's
score and decision.
``ood_metrics`` / ``fpr_at_tpr`` compute AUROC, AUPRC and FPR80/95 for any two score arrays, and
``metric_intervals`` their bootstrap intervals. ``AcrossModels`` holds one result per model (e.g.
per training seed) and every metric's spread across them; ``write_across_report`` reports it.
``FisherPool`` hands ROSE detectors with equal Fisher settings one fit of their Fishers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roseood.evaluation.cache import ResultCache
from roseood.evaluation.evaluate import FittedDetector, evaluate, fit_calibrated, fit_detector
from roseood.evaluation.fishers import FisherPool
from roseood.evaluation.metrics import METRICS, fpr_at_tpr, metric_intervals, ood_metrics, roc_points
from roseood.evaluation.result import AcrossModels, EvaluationResult
from roseood.evaluation.scoring import decision_rows, score_chunks, write_decisions, write_scores
from roseood.evaluation.splits import EvalSpec, FitImages, load_fit_images

if TYPE_CHECKING:
    from roseood.evaluation.html_report import write_evaluation_page, write_score_page
    from roseood.evaluation.report import write_across_report, write_index, write_report


def __getattr__(name: str) -> Any:
    """Reports load matplotlib: import them on first use only."""
    if name in ("write_report", "write_index", "write_across_report"):
        from roseood.evaluation import report

        return getattr(report, name)
    if name in ("write_evaluation_page", "write_score_page"):
        from roseood.evaluation import html_report

        return getattr(html_report, name)
    raise AttributeError(f"module 'roseood.evaluation' has no attribute {name!r}")


__all__ = [
    "METRICS",
    "AcrossModels",
    "EvalSpec",
    "EvaluationResult",
    "FisherPool",
    "FitImages",
    "FittedDetector",
    "ResultCache",
    "decision_rows",
    "evaluate",
    "fit_calibrated",
    "fit_detector",
    "fpr_at_tpr",
    "load_fit_images",
    "metric_intervals",
    "ood_metrics",
    "roc_points",
    "score_chunks",
    "write_across_report",
    "write_decisions",
    "write_evaluation_page",
    "write_index",
    "write_report",
    "write_score_page",
    "write_scores",
]
