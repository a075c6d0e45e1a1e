"""ROSE's statistics: how the raw layer scores of held-out in-distribution images (with the loss they are
gradients of and the extra feature columns) become one score per image, fitted and applied on columns
already computed, with every check and degenerate-fit warning of ``ROSE.fit``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from roseood.detectors.adjustment import LikelihoodTrend, adjusted, column_names
from roseood.detectors.aggregation import Aggregation, tie_problem
from roseood.detectors.features import check_positive
from roseood.detectors.rose.arguments import ScoreArguments
from roseood.detectors.rose.problems import check_scores, check_statistics, fit_problems, warned


@dataclass
class FittedStatistics:
    """What ``fit_statistics`` learns: the layer scores' z-normalisation (``mean``, ``std``), the fitted
    aggregation, the degenerate-fit warnings, and the held-out images' own scores (for a threshold)."""

    mean: Tensor
    std: Tensor
    aggregation: Aggregation
    warnings: list[str]
    held_out_scores: np.ndarray


def fit_statistics(
    raw: np.ndarray,
    loss: np.ndarray,
    extra: np.ndarray,
    extra_names: list[str],
    columns: list[str],
    arguments: ScoreArguments,
    trend: LikelihoodTrend,
    what: str,
) -> FittedStatistics:
    """Fit the statistics of ``arguments`` on held-out images' raw layer scores (N, ``columns``), their
    loss (N,) and extra columns (N, E) named ``extra_names``; ``trend`` is fitted in place where the
    scores are adjusted. Non-finite scores are refused and degenerate fits warned of as ``what``."""
    check_statistics(raw, columns, what)
    check_positive(extra, extra_names)
    if arguments.adjust != "none":
        trend.fit(raw, loss)
    values = np.concatenate([adjusted(raw, loss, trend, arguments.adjust), extra], 1)
    names = column_names(columns, arguments.adjust) + extra_names
    aggregation = arguments.aggregation()
    found = warned(fit_problems(values, names, extra_names, aggregation), what)
    aggregation.fit(values)
    found += warned(tie_problem(values, names, aggregation), what)
    stats = torch.from_numpy(raw)
    return FittedStatistics(
        stats.mean(0), stats.std(0).clamp_min(1e-12), aggregation, found, aggregation(values)
    )


def statistics_scores(
    raw: np.ndarray,
    loss: np.ndarray,
    extra: np.ndarray | None,
    aggregation: Aggregation,
    trend: LikelihoodTrend,
    adjust: str,
    columns: list[str],
    what: str,
) -> np.ndarray:
    """One score per image (N,) of raw layer scores, loss and extra columns under fitted statistics;
    non-finite scores are refused in one line naming the ``columns`` that gave them."""
    values = adjusted(raw, loss, trend, adjust)
    if extra is not None and extra.shape[1]:
        values = np.concatenate([values, extra], 1)
    scores = aggregation(values)
    check_scores(scores, raw, columns, what)
    return scores
