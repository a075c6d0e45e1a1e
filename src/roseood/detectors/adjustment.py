"""Likelihood-adjusted ROSE layer scores, an option beyond the paper (``ROSE(adjust=...)``).

On in-distribution images a layer's ROSE score grows with the image's loss (−log p(x)): a complex image
needs a larger move. So an OOD set on which the likelihood fails, e.g. MNIST under a Fashion-MNIST model
(simpler images, a higher likelihood), gets smaller layer scores than its strangeness deserves. The
adjustment fits a line per layer on the held-out in-distribution images, ``log s_l ≈ a_l + b_l·loss``, and
divides each score by its trend: how much more must the model move than for an in-distribution image of
the same likelihood? Alone (``nll``) it also shrinks the scores of OOD sets with a *higher* loss, where
the likelihood works; ``both`` keeps the raw scores beside the adjusted ones, so either can flag an image.
"""

from __future__ import annotations

import numpy as np
import torch

from roseood.detectors.aggregation import log_scores
from roseood.errors import CheckpointError, DataError, RoseError
from roseood.integrity import tensor

_MAX_LOG = float(np.log(np.finfo(np.float64).max))  # larger log-ratios saturate instead of overflowing


class LikelihoodTrend:
    """Per layer, the in-distribution trend of the log layer score in the loss (least squares)."""

    def __init__(self) -> None:
        # (4, L): the loss's mean and scale (repeated per layer), then each layer's intercept and slope
        self.coef_: np.ndarray | None = None

    def fit(self, raw: np.ndarray, loss: np.ndarray) -> None:
        """Fit ``log raw[:, l] ≈ a_l + b_l·(loss − mean)/scale`` on held-out in-distribution images (those
        whose loss and scores are finite: the degenerate-fit warnings name the others)."""
        finite = np.isfinite(loss) & np.isfinite(raw).all(1)
        if finite.sum() < 2:
            raise DataError(
                f"the likelihood adjustment needs finite losses and layer scores on at least 2 statistics "
                f"images; {finite.sum()} of {len(loss)} have them"
            )
        raw, loss = raw[finite], loss[finite]
        mean, scale = float(loss.mean()), float(loss.std())
        scale = scale if scale > 0 else 1.0  # a constant loss: no slope to fit, the trend is the mean
        design = np.stack([np.ones_like(loss), (loss - mean) / scale], 1)
        intercept, slope = np.linalg.lstsq(design, log_scores(raw), rcond=None)[0]
        self.coef_ = np.stack([np.full_like(slope, mean), np.full_like(slope, scale), intercept, slope])

    def ratio(self, raw: np.ndarray, loss: np.ndarray) -> np.ndarray:
        """Layer scores divided by their trend at each image's loss, (N, L), positive."""
        if self.coef_ is None:
            raise RoseError("the likelihood trend is not fitted")
        mean, scale, intercept, slope = self.coef_
        trend = intercept + ((loss[:, None] - mean) / scale) * slope
        return np.exp(np.minimum(log_scores(raw) - trend, _MAX_LOG))

    def state(self) -> dict[str, torch.Tensor]:
        return {} if self.coef_ is None else {"coef": torch.from_numpy(self.coef_)}

    def load_state(self, state: dict[str, torch.Tensor], layers: int) -> None:
        coef = state.get("coef")
        if not isinstance(coef, torch.Tensor) or tuple(coef.shape) != (4, layers):
            raise CheckpointError("this ROSE detector's file lacks a fitted likelihood trend for its layers")
        self.coef_ = tensor(coef, "trend.coef").double().numpy()


def adjusted(raw: np.ndarray, loss: np.ndarray, trend: LikelihoodTrend, adjust: str) -> np.ndarray:
    """The columns the aggregation sees: raw layer scores, their ratios to the trend, or both."""
    if adjust == "none":
        return raw
    ratio = trend.ratio(raw, loss)
    return ratio if adjust == "nll" else np.concatenate([raw, ratio], 1)


def column_names(layers: list[str], adjust: str) -> list[str]:
    """Names of ``adjusted``'s columns, for warnings: ``layer`` and ``layer/nll``."""
    ratios = [f"{n}/nll" for n in layers]
    return {"none": layers, "nll": ratios, "both": layers + ratios}[adjust]
