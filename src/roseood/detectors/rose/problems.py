"""What makes a ROSE fit or its scores unusable. Non-finite layer scores are refused in one line: a layer
whose gᵀF⁻¹g is NaN or infinite (a singular or damaged Fisher, overflowing gradients) makes every
z-normalised score NaN, which would otherwise be returned, or written as if its image could not be read.
Degenerate but usable fits (exploding, constant or tied scores, too few images) are warnings."""

from __future__ import annotations

import warnings
from collections.abc import Collection

import numpy as np

from roseood.detectors.aggregation import Aggregation, density_problem, tie_share, zscore_problem
from roseood.errors import DegenerateFitWarning, RoseError

CAUSE = "a singular or damaged Fisher, or overflowing gradients"
TIE_SHARE = 0.10  # more than this share of statistics images with one identical layer score: degenerate
DYNAMIC_RANGE = 1e8  # a layer whose scores span more than this factor: z-scores are meaningless
MIN_RELATIVE_STD = 1e-6  # a layer whose std / |mean| is below this: its z-scores are rounding noise


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


def layer_problems(raw: np.ndarray, layers: list[str], extras: Collection[str] = ()) -> list[str]:
    """What makes statistics-image layer scores (N, L) unusable, one message per finding naming the
    layer and a fix: non-finite, exploding (dynamic range), near-constant or tied scores. ``extras``:
    the columns that are no layer (the model's statistics, the images' complexity), whose fix is a
    method without them; their ties are not reported (a compressed size counts whole bytes)."""
    found = []
    for j, layer in enumerate(layers):
        col = raw[:, j]
        name, drop = (
            (f"column {layer}", "use a method without it (rose-gmm reads the layer scores alone)")
            if layer in extras
            else (f"layer {layer}", "drop it from --layers")
        )
        bad = int((~np.isfinite(col)).sum())
        if bad:
            found.append(
                f"{name}: {bad} of {len(col)} statistics images have non-finite layer scores "
                f"(singular Fisher or overflowing gradients); increase the damping or {drop}"
            )
            continue
        positive = col[col > 0]
        if len(positive) and positive.max() / positive.min() > DYNAMIC_RANGE:
            found.append(
                f"{name}: scores span {positive.min():.3g} to {positive.max():.3g} (dynamic range "
                f"> {DYNAMIC_RANGE:.0e}); z-scores are dominated by a few images: use --aggregate log-z"
            )
        if col.std() <= MIN_RELATIVE_STD * max(abs(col.mean()), 1e-300):
            found.append(
                f"{name}: scores barely vary on the statistics images (std {col.std():.3g}, mean "
                f"{col.mean():.3g}); its z-scores are noise: {drop}"
            )
        share = tie_share(col) if layer not in extras else 0.0  # PNG sizes are whole bytes: ties are data
        if share > TIE_SHARE:
            found.append(
                f"{name}: {share:.0%} of the statistics images have tied scores (e.g. exactly 0): "
                f"{drop} or use --aggregate log-z"
            )
    return found
