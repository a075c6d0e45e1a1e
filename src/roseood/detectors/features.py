"""What ROSE's aggregation may judge beside the per-layer scores (``ROSE(features=...)``), an option beyond
the paper for near-OOD inputs: the model's own statistics of each image and the image's complexity.

- ``layers``: the per-layer scores ``gᵀ F⁻¹ g`` (always; the paper's vector).
- ``stats``: how the model fits the image in its own terms (``roseood.contracts.ImageStatistics``: a VAE's
  reconstruction and KL terms, a DDPM's ε-MSE at each of its timesteps), or else the loss ROSE
  differentiates (−log p(x) for flows and autoregressive models).
- ``complexity``: the image's PNG-compressed length in bits per dimension (Serrà et al. 2020's L(x)/D),
  which separates simple images from complex ones whatever the model.

Each column is positive, so the density aggregations (``gaussian``, ``gmm``) model their logarithms together
with the layer scores', as DoSE (Morningstar et al. 2021) models a vector of a model's statistics.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from roseood.contracts import ImageStatistics, RowsModel
from roseood.detectors.compression import compressed_bits, to_uint8
from roseood.errors import DataError

COMPLEXITY_COLUMN = "png_bits_per_dim"  # the name of the column ``complexity`` adds


def extra_columns(
    model: object,
    x: Tensor,
    loss: Tensor,
    features: str,
    batches: Callable[[Tensor], list[Tensor]],
    rows: Tensor | None = None,
) -> tuple[np.ndarray, list[str]]:
    """The columns ``features`` adds to the layer scores of images ``x`` (N, E) and their names;
    ``loss`` is the per-image loss ROSE differentiated (the statistic of a model without its own),
    ``batches`` splits ``x`` into the batches the model may take at once; ``rows``: the loss of each
    image's rows (N, rows) when ROSE scored them one by one, from which a ``RowsModel`` reads its
    statistics instead of running again."""
    names, columns = [], []
    if "stats" in features.split(","):
        if isinstance(model, ImageStatistics):
            if rows is not None and isinstance(model, RowsModel):
                parts = [model.row_statistics(rows)]
            else:
                parts = [model.image_statistics(b) for b in batches(x)]
            for name in parts[0]:
                names.append(name)
                columns.append(torch.cat([p[name].detach().double().cpu() for p in parts]).numpy())
        else:
            names.append("loss")
            columns.append(loss.double().cpu().numpy())
    if "complexity" in features.split(","):
        names.append(COMPLEXITY_COLUMN)
        columns.append(compressed_bits(to_uint8(x), "png") / x[0].numel())
    return (np.stack(columns, 1) if columns else np.empty((len(x), 0))), names


def check_positive(values: np.ndarray, names: list[str]) -> None:
    """Refuse, in one line, statistics a density cannot take the log of (≤ 0 or not finite)."""
    bad = [n for n, col in zip(names, values.T, strict=True) if not (np.isfinite(col) & (col > 0)).all()]
    if bad:
        raise DataError(
            f"the statistic {bad[0]} is not positive and finite on every held-out image, so its log cannot "
            "be modelled; use features='layers' for this model"
        )
