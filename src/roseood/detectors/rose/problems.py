"""What makes a ROSE fit or its scores unusable. Non-finite layer scores are refused in one line: a layer
whose gᵀF⁻¹g is NaN or infinite (a singular or damaged Fisher, overflowing gradients) makes every
z-normalised score NaN, which would otherwise be returned, or written as if its image could not be read.
Degenerate but usable fits (exploding, constant or tied scores, too few images) are warnings."""

from __future__ import annotations

import warnings

import numpy as np

from roseood.detectors.aggregation import Aggregation, density_problem, layer_problems, zscore_problem
from roseood.errors import DegenerateFitWarning, RoseError

CAUSE = "a singular or damaged Fisher, or overflowing gradients"


def bad_columns(raw: np.ndarray, columns: list[str]) -> list[str]:
    """The columns of raw layer scores (N, columns) with a NaN or infinite value."""
    return [name for name, col in zip(columns, raw.T, strict=True) if not np.isfinite(col).all()]


def named(bad: list[str], columns: list[str]) -> str:
    """The bad layer-score columns in words: every one, or the first three and how many more."""
    if len(bad) == len(columns) > 1:
        return f"all {len(bad)} layers"
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return f"{'layer' if len(bad) == 1 else 'layers'} {', '.join(bad[:3])}{more}"


def check_statistics(raw: np.ndarray, columns: list[str], what: str) -> None:
    """Refuse statistics images whose raw layer scores are not all finite: no normalisation or density
    can be fitted on them, and every score of the detector would be NaN."""
    bad = bad_columns(raw, columns)
    if bad:
        raise RoseError(
            f"{what}: non-finite scores on the statistics images from {named(bad, columns)} ({CAUSE}), so "
            "every score would be NaN; increase the damping, drop them from --layers or refit the Fishers"
        )


def check_scores(scores: np.ndarray, raw: np.ndarray, columns: list[str], what: str) -> None:
    """Refuse scores (N,) that are not all finite, naming the columns of ``raw`` that gave them."""
    n = int((~np.isfinite(scores)).sum())
    if n:
        bad = bad_columns(raw, columns)
        source = named(bad, columns) if bad else "the aggregation"
        raise RoseError(
            f"{what}: {n} of {len(scores)} images get non-finite scores from {source} ({CAUSE}); increase "
            "the damping or drop them from --layers"
        )


def fit_problems(
    values: np.ndarray, columns: list[str], extras: list[str], aggregation: Aggregation
) -> list[str]:
    """The degenerate-fit warnings of the statistics images' columns (N, columns) before ``aggregation``
    is fitted on them: exploding, constant or tied layer scores, too few images for a density or z-score."""
    found = layer_problems(values, columns, extras) + density_problem(values, aggregation)
    return found + zscore_problem(values, aggregation)


def warned(messages: list[str], what: str) -> list[str]:
    """``messages`` (degenerate-fit problems of ``what``, e.g. ROSE-ekfac), each raised as a one-line
    ``DegenerateFitWarning`` (at the frame ROSE's warnings named before fit_statistics and fit_columns
    came between), and returned for the detector's ``fit_warnings_``."""
    for message in messages:
        warnings.warn(f"{what}: {message}", DegenerateFitWarning, stacklevel=7)
    return messages
