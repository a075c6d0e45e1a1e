"""Validation at the boundary: turn user inputs (images, float tensors, token ids) into what models expect."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from roseood.errors import DataError
from roseood.progress import progress


def _as_tensor(data: Tensor | np.ndarray, what: str) -> Tensor:
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(np.ascontiguousarray(data))
    if not isinstance(data, Tensor):
        raise DataError(f"expected {what} as an array or tensor, got {type(data).__name__}")
    if data.ndim == 0 or data.shape[0] == 0:
        raise DataError(f"empty {what}: at least one sample is needed")
    return data


def as_image_tensor(
    images: Tensor | np.ndarray, channels: int | None = None, size: int | tuple[int, int] | None = None
) -> Tensor:
    """Check ``images`` and return them as float32 (N, C, H, W) in [0, 1].

    Accepts uint8 arrays/tensors (0–255) or float ones (0–1); ``size`` is H = W or (H, W). Raises
    ``DataError`` with a one-line reason for empty sets, wrong rank, channel count or size, NaN/inf, or
    values out of range.
    """
    if not isinstance(images, Tensor | np.ndarray):
        raise DataError(f"expected an image array or tensor, got {type(images).__name__}")
    if images.ndim != 4:
        raise DataError(f"expected images of shape (N, C, H, W), got shape {tuple(images.shape)}")
    images = _as_tensor(images, "image set")
    if 0 in images.shape[1:]:
        raise DataError(f"images need at least one channel and pixel, got shape {tuple(images.shape)}")
    if channels is not None and images.shape[1] != channels:
        raise DataError(f"model expects {channels}-channel images, got {images.shape[1]} channels")
    hw = (size, size) if isinstance(size, int) else size
    if hw is not None and tuple(images.shape[2:]) != tuple(hw):
        raise DataError(f"model expects {hw[0]}×{hw[1]} images, got {images.shape[2]}×{images.shape[3]}")
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


def as_model_input(
    data: Tensor | np.ndarray, kind: str = "image", shape: Sequence[int] | None = None
) -> Tensor:
    """Check a batch of inputs against a model's declared input ``kind`` and one sample's ``shape``.

    "image": uint8 or [0, 1] float (N, C, H, W) → float32 in [0, 1]; "tensor": finite floats → float32;
    "tokens": integers ≥ 0 → int64. Raises ``DataError`` with a one-line reason.
    """
    if kind == "image":
        if shape is not None and len(shape) != 3:
            raise DataError(f"an image model's input shape is (C, H, W), got {tuple(shape)}")
        return as_image_tensor(data, shape[0], (shape[1], shape[2])) if shape else as_image_tensor(data)
    x = _as_tensor(data, "input set")
    if shape is not None and tuple(x.shape[1:]) != tuple(shape):
        raise DataError(
            f"model expects inputs of shape (N, {', '.join(map(str, shape))}), got {tuple(x.shape)}"
        )
    if kind == "tensor":
        if not x.is_floating_point():
            raise DataError(f"model expects float tensors, got dtype {x.dtype}")
        if not torch.isfinite(x).all():
            raise DataError("inputs contain NaN or infinite values")
        return x.float()
    if kind == "tokens":
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise DataError(f"model expects integer token ids, got dtype {x.dtype}")
        if x.min() < 0:
            raise DataError(f"token ids must be ≥ 0, got minimum {int(x.min())}")
        return x.long()
    raise DataError(f"unknown input kind {kind!r}; use image, tensor or tokens")


def check_model_input(data: Tensor | np.ndarray, model: object) -> Tensor:
    """``as_model_input`` driven by the model's declared ``input_kind`` and ``input_shape``."""
    return as_model_input(data, getattr(model, "input_kind", "image"), getattr(model, "input_shape", None))


def iter_batches(x: Tensor, batch_size: int, desc: str | None = None) -> Iterator[Tensor]:
    """Yield consecutive batches of ``x``; reports progress (``roseood.progress``) when ``desc`` is given."""
    starts = range(0, x.shape[0], batch_size)
    for i in progress(starts, desc, enabled=desc is not None, leave=False, unit="batch"):
        yield x[i : i + batch_size]
