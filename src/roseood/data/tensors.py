"""Validation at the boundary: turn user inputs (images, float tensors, token ids) into what models expect."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence, Sized
from typing import Any, TypeAlias

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset

from roseood.contracts import ModelInputs
from roseood.errors import DataError
from roseood.progress import progress

# What ``fit`` and ``score`` take: inputs in memory, or a torch Dataset / DataLoader of them
ImageData: TypeAlias = Tensor | np.ndarray | DataLoader[Any] | Dataset[Any]
# the keys a dict item or batch may hold its images under (Hugging Face datasets: "image", "pixel_values")
IMAGE_KEYS = ("image", "images", "pixel_values", "img", "input", "inputs", "x")


def _as_tensor(data: Tensor | np.ndarray, what: str) -> Tensor:
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(np.ascontiguousarray(data))
    if not isinstance(data, Tensor):
        raise DataError(f"expected {what} as an array or tensor, got {type(data).__name__}")
    if data.ndim == 0 or data.shape[0] == 0:
        raise DataError(f"empty {what}: at least one sample is needed")
    return data


def _convert_hint(channels: int | None, hw: tuple[int, int] | None) -> str:
    """How a user's own images reach a model's channels and size ``hw``: the loader converts them (and
    says so); it makes square images, so a model of another shape gets no hint."""
    if hw is not None and hw[0] != hw[1]:
        return ""
    side = hw[0] if hw is not None else None
    wanted = ", ".join(f"{k}={v}" for k, v in (("channels", channels), ("size", side)) if v is not None)
    return f" (roseood.load_images(FOLDER_OR_NPZ, {wanted}) reads images converted to it)"


def _rank_hint(shape: Sequence[int], channels: int | None) -> str:
    """What an array of the wrong rank most likely lacks, where the model's ``channels`` tell: the batch
    axis of one image, or the channel axis of grayscale images."""
    if len(shape) == 3 and channels is not None and shape[0] == channels:
        return f": one {tuple(shape)} image? add the batch axis: x[None]"
    if len(shape) == 3 and channels == 1:
        return ": grayscale (N, H, W) images? add the channel axis: x[:, None]"
    if len(shape) == 2 and channels == 1:
        return ": one grayscale (H, W) image? x[None, None]"
    return ""


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
        hint = _rank_hint(images.shape, channels)
        raise DataError(f"expected images of shape (N, C, H, W), got shape {tuple(images.shape)}{hint}")
    images = _as_tensor(images, "image set")
    if 0 in images.shape[1:]:
        raise DataError(f"images need at least one channel and pixel, got shape {tuple(images.shape)}")
    hw = (size, size) if isinstance(size, int) else size
    if channels is not None and images.shape[1] != channels:
        if images.shape[-1] == channels:
            raise DataError(
                f"images of shape {tuple(images.shape)} look channel-last (N, H, W, C); the model takes "
                "(N, C, H, W): x.permute(0, 3, 1, 2)"
            )
        got = f"got {images.shape[1]} channels"
        raise DataError(f"model expects {channels}-channel images, {got}{_convert_hint(channels, hw)}")
    if hw is not None and tuple(images.shape[2:]) != tuple(hw):
        got = f"got {images.shape[2]}×{images.shape[3]}"
        raise DataError(f"model expects {hw[0]}×{hw[1]} images, {got}{_convert_hint(channels, hw)}")
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
    if isinstance(model, ModelInputs):
        return as_model_input(data, model.input_kind, model.input_shape)
    return as_model_input(data, "image", None)


def iter_batches(x: Tensor, batch_size: int, desc: str | None = None) -> Generator[Tensor, None, None]:
    """Yield consecutive batches of ``x``; reports progress (``roseood.progress``) when ``desc`` is given."""
    starts = range(0, x.shape[0], batch_size)
    for i in progress(starts, desc, enabled=desc is not None, leave=False, unit="batch"):
        yield x[i : i + batch_size]


def loader_batches(data: DataLoader[Any] | Dataset[Any], batch_size: int) -> Iterator[Tensor]:
    """The input batches of a ``DataLoader`` (as it batches them) or a ``Dataset`` (in order, ``batch_size``
    items at a time): each batch a tensor, the first element of an (image, label) tuple, or a dict's
    image (``IMAGE_KEYS``)."""
    loader = data if isinstance(data, DataLoader) else DataLoader(data, batch_size=batch_size, shuffle=False)
    items = iter(loader)
    while True:
        try:
            batch = next(items)
        except StopIteration:
            return
        except TypeError as exc:  # default_collate of items it cannot stack (PIL images, strings)
            if loader is data:
                raise
            raise DataError(
                f"cannot batch the dataset's items ({str(exc).splitlines()[0]}); give it a transform that "
                "returns tensors (e.g. torchvision's PILToTensor)"
            ) from None
        yield _batch_inputs(batch)


def _batch_inputs(batch: object) -> Tensor:
    """The inputs of one batch: itself (tensor, array), an (inputs, label, ...) sequence's first element, or
    a dict's entry under one of ``IMAGE_KEYS``."""
    if isinstance(batch, list | tuple) and batch:
        batch = batch[0]
    elif isinstance(batch, Mapping):
        key = next((k for k in IMAGE_KEYS if k in batch), None)
        if key is None:
            raise DataError(
                f"a batch is a dict with keys {sorted(map(str, batch))}; expected the images under one of: "
                + ", ".join(IMAGE_KEYS)
            )
        batch = batch[key]
    if isinstance(batch, np.ndarray):
        batch = torch.from_numpy(np.ascontiguousarray(batch))
    if not isinstance(batch, Tensor):
        raise DataError(
            f"a batch holds {type(batch).__name__}; expected tensors or arrays, (image, label) tuples or "
            "dicts with an image"
        )
    return batch


def collect(data: DataLoader[Any] | Dataset[Any], batch_size: int) -> Tensor:
    """Every input of a ``DataLoader`` or ``Dataset`` in one tensor of its own dtype (uint8 images stay
    uint8), filled batch by batch into one allocation when the number of items is known."""
    total = None if isinstance(getattr(data, "dataset", data), IterableDataset) else _items(data)
    out: Tensor | None = None
    parts: list[Tensor] = []
    filled = 0
    for batch in loader_batches(data, batch_size):
        if out is None and not parts and total is not None and batch.ndim:
            out = torch.empty((total, *batch.shape[1:]), dtype=batch.dtype)
        first = out if out is not None else (parts[0] if parts else batch)
        if batch.ndim == 0 or batch.shape[1:] != first.shape[1:] or batch.dtype != first.dtype:
            raise DataError(
                f"batches differ: {tuple(first.shape[1:])} {first.dtype} inputs, then a batch of shape "
                f"{tuple(batch.shape)} and dtype {batch.dtype}"
            )
        if out is not None and filled + len(batch) <= out.shape[0]:
            out[filled : filled + len(batch)] = batch
        else:  # more items than announced: keep the rest apart
            if out is not None:
                parts, out = [out[:filled]], None
            parts.append(batch)
        filled += len(batch)
    if out is not None:
        return out[:filled]
    if not parts:
        raise DataError("empty input set: the dataset gave no items")
    return torch.cat(parts)


def _items(data: DataLoader[Any] | Dataset[Any]) -> int | None:
    """How many items a DataLoader's sampler or a Dataset announces (None: unknown)."""
    try:
        counted = data.sampler if isinstance(data, DataLoader) else data
        return len(counted) if isinstance(counted, Sized) else None
    except TypeError:
        return None
