"""Lossless image compressors for Input Complexity: the compressed length L(x) of a uint8 image in bits.

PNG uses zlib level 9 (the authors: OpenCV ``IMWRITE_PNG_COMPRESSION`` 9); JPEG 2000 is OpenJPEG's
reversible (lossless) 5/3 wavelet in a JP2 container (the authors: OpenCV's ``.jp2`` defaults). Both go
through Pillow, so the byte counts can differ slightly from OpenCV's encoders (different headers and
encoder settings), which shifts every score by nearly a constant.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from roseood.errors import DataError, RoseError

CODECS = ("png", "jp2")


def to_uint8(x: Tensor) -> np.ndarray:
    """Float images in [0, 1] → uint8 (N, C, H, W) by rounding (the authors truncate x·255, which can turn a
    stored 128 into 127 through float error)."""
    return torch.round(x.detach().float().cpu().clamp(0.0, 1.0) * 255.0).to(torch.uint8).numpy()


def _pil_image(image: np.ndarray) -> Image.Image:
    """One uint8 (C, H, W) array as a Pillow image: grayscale for 1 channel, RGB for 3."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[0] not in (1, 3):
        raise DataError(f"compression needs uint8 images of shape (1 or 3, H, W), got {image.shape}")
    if image.shape[0] == 1:
        return Image.fromarray(np.ascontiguousarray(image[0]), mode="L")
    return Image.fromarray(np.ascontiguousarray(image.transpose(1, 2, 0)), mode="RGB")


def encode(image: np.ndarray, codec: str) -> bytes:
    """Losslessly encode one uint8 (C, H, W) image with ``codec`` ("png" or "jp2")."""
    pil = _pil_image(image)
    buf = io.BytesIO()
    if codec == "png":
        pil.save(buf, format="PNG", compress_level=9)
    elif codec == "jp2":
        pil.save(buf, format="JPEG2000", irreversible=False)
    else:
        raise RoseError(f"unknown compressor {codec!r}; choose from {', '.join(CODECS)}")
    return buf.getvalue()


def compressed_bits(images: np.ndarray, codec: str) -> np.ndarray:
    """L(x): the encoded size of every uint8 (N, C, H, W) image in bits, as float64 (N,)."""
    if images.ndim != 4:
        raise DataError(f"expected images of shape (N, C, H, W), got shape {images.shape}")
    return np.array([8.0 * len(encode(img, codec)) for img in images], dtype=np.float64)
