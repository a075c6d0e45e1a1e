"""Image preprocessing that reproduces the authors' torchvision pipeline on uint8 arrays.

Order: ``Resize(size)`` (shorter side to ``size``, Pillow bilinear, antialiased when shrinking) →
``CenterCrop(size)`` → channel conversion (``Grayscale`` luma or channel repeat) → brightness.
Arrays are channel-last ``(N, H, W)`` or ``(N, H, W, 3)`` until the final ``(N, C, size, size)``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from PIL import Image

from roseood.errors import DataError

U8 = npt.NDArray[np.uint8]


def resize_crop(image: Image.Image, size: int) -> Image.Image:
    """Torchvision ``Resize(size)`` then ``CenterCrop(size)`` on one PIL image.

    The shorter side becomes ``size`` and the longer one ``int(size * long / short)`` (torchvision's
    integer rule); the crop offset is ``int(round((h - size) / 2.0))`` as in ``CenterCrop``.
    """
    w, h = image.size
    if min(w, h) != size:
        if w <= h:
            new_w, new_h = size, int(size * h / w)
        else:
            new_w, new_h = int(size * w / h), size
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
        w, h = new_w, new_h
    if (w, h) != (size, size):
        top = round((h - size) / 2.0)
        left = round((w - size) / 2.0)
        image = image.crop((left, top, left + size, top + size))
    return image


def resize_images(images: U8, size: int) -> U8:
    """Apply :func:`resize_crop` to every image of a ``(N, H, W)`` or ``(N, H, W, 3)`` uint8 array.

    Returns the input unchanged when it already is ``size``×``size`` (Pillow would copy it as is).
    """
    if images.shape[1:3] == (size, size):
        return images
    out = np.empty((images.shape[0], size, size, *images.shape[3:]), dtype=np.uint8)
    for i, img in enumerate(images):
        out[i] = np.asarray(resize_crop(Image.fromarray(img), size))
    return out


def to_channels(images: U8, channels: int) -> U8:
    """Convert channel-last uint8 images to ``channels`` (1 or 3), returned as ``(N, H, W, channels)``.

    RGB → gray uses Pillow's ``convert("L")`` integer luma (ITU-R 601-2, 0.299 R + 0.587 G + 0.114 B
    in 16-bit fixed point with rounding), bit-exact with torchvision's ``Grayscale`` on PIL images;
    gray → RGB repeats the channel.
    """
    if images.ndim == 3:
        images = images[..., None]
    if images.shape[-1] == channels:
        return images
    if channels == 3:
        return np.repeat(images, 3, axis=-1)
    rgb = images.astype(np.uint32)
    luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    return luma.astype(np.uint8)[..., None]


def adjust_brightness(images: U8, factor: float) -> U8:
    """Scale pixel values by ``factor``: ``clip(round(x * factor), 0, 255)``; ``factor == 1`` is a no-op."""
    if factor == 1.0:
        return images
    return np.clip(np.rint(images * factor), 0, 255).astype(np.uint8)


def check_options(channels: int, size: int, brightness: float) -> None:
    """Raise ``DataError`` for preprocessing options that cannot be honoured."""
    if channels not in (1, 3):
        raise DataError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DataError(f"size must be a positive integer, got {size!r}")
    if not math.isfinite(brightness) or brightness <= 0:
        raise DataError(f"brightness must be a finite number > 0, got {brightness}")


def preprocess(images: U8, *, channels: int, size: int, brightness: float) -> U8:
    """Full pipeline on channel-last uint8 images; returns ``(N, channels, size, size)`` uint8."""
    out = adjust_brightness(to_channels(resize_images(images, size), channels), brightness)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
