"""Validation at the boundary: turn user images into the float tensors every model expects."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from roseood.errors import DataError
from roseood.progress import progress


def as_image_tensor(
    images: Tensor | np.ndarray, channels: int | None = None, size: int | None = None
) -> Tensor:
    """Check ``images`` and return them as float32 (N, C, H, W) in [0, 1].

    Accepts uint8 arrays/tensors (0–255) or float ones (0–1). Raises ``DataError`` with a one-line
    reason for empty sets, wrong rank, channel count or size, NaN/inf, or values out of range.
    """
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(np.ascontiguousarray(images))
    if not isinstance(images, Tensor):
        raise DataError(f"expected an image array or tensor, got {type(images).__name__}")
    if images.ndim != 4:
        raise DataError(f"expected images of shape (N, C, H, W), got shape {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise DataError("empty image set: at least one image is needed")
    if 0 in images.shape[1:]:
        raise DataError(f"images need at least one channel and pixel, got shape {tuple(images.shape)}")
    if channels is not None and images.shape[1] != channels:
        raise DataError(f"model expects {channels}-channel images, got {images.shape[1]} channels")
    if size is not None and tuple(images.shape[2:]) != (size, size):
        raise DataError(f"model expects {size}×{size} images, got {images.shape[2]}×{images.shape[3]}")
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    if not images.is_floating_point():
        raise DataError(f"images must be uint8 (0–255) or float (0–1), got dtype {images.dtype}")
    x = images.float()
    if not torch.isfinite(x).all():
        raise DataError("images contain NaN or infinite values")
    if x.min() < 0.0 or x.max() > 1.0:
        raise DataError(f"float images must lie in [0, 1], got range [{x.min():.3g}, {x.max():.3g}]")
    return x


def iter_batches(x: Tensor, batch_size: int, desc: str | None = None) -> Iterator[Tensor]:
    """Yield consecutive batches of ``x``; reports progress (``roseood.progress``) when ``desc`` is given."""
    starts = range(0, x.shape[0], batch_size)
    for i in progress(starts, desc, enabled=desc is not None, leave=False, unit="batch"):
        yield x[i : i + batch_size]
