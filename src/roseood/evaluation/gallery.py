"""The images a report shows: the most and least OOD images of a set, picked from its scores.

``extremes`` ranks the scores alone and reads back only the ``2 k`` images it keeps, so a set of any
size (a folder streamed chunk by chunk) costs memory for its scores and ``2 k`` images, not for itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roseood.catalogue import GALLERY
from roseood.serialization import atomic_write


@dataclass(frozen=True, eq=False)
class Example:
    """One image of a set with its position, file name (``#index`` without one) and score."""

    index: int
    name: str
    score: float
    image: np.ndarray  # uint8 (C, H, W), as the model saw it


@dataclass(frozen=True, eq=False)
class Extremes:
    """The ``k`` highest-scoring images of a set (most OOD first) and the ``k`` lowest (least first)."""

    most: tuple[Example, ...]
    least: tuple[Example, ...]


def extremes(
    scores: np.ndarray, read: Callable[[int], np.ndarray], files: Sequence[str] | None, k: int = GALLERY
) -> Extremes:
    """The ``k`` most and least OOD images by ``scores`` (one per image; NaN scores are left out, ties
    keep the set's order); ``read(i)`` returns image ``i`` as uint8 (C, H, W), ``files`` their names."""
    scores = np.asarray(scores, float)
    valid = np.flatnonzero(~np.isnan(scores))
    most = valid[np.argsort(-scores[valid], kind="stable")][:k]
    least = valid[np.argsort(scores[valid], kind="stable")][:k]

    def example(i: int) -> Example:
        name = files[i] if files is not None else f"#{i}"
        return Example(i, name, float(scores[i]), np.asarray(read(i)))

    return Extremes(tuple(example(int(i)) for i in most), tuple(example(int(i)) for i in least))


def tile(images: np.ndarray, columns: int = 8, pad: int = 2) -> np.ndarray:
    """uint8 images (N, C, H, W) tiled into one (rows, columns) image (H', W', C), ``pad`` black pixels
    between and around them."""
    n, c, h, w = images.shape
    rows = -(-n // columns)
    grid = np.zeros((rows * (h + pad) + pad, columns * (w + pad) + pad, c), np.uint8)
    for i, img in enumerate(images):
        r, col = divmod(i, columns)
        y, x = pad + r * (h + pad), pad + col * (w + pad)
        grid[y : y + h, x : x + w] = img.transpose(1, 2, 0)
    return grid


def save_grid(images: np.ndarray, path: str | Path, columns: int = 8, pad: int = 2) -> Path:
    """Tile uint8 images (N, C, H, W) into one PNG (written atomically), ``columns`` wide with ``pad``
    black pixels between."""
    from PIL import Image

    grid = tile(images, columns, pad)
    picture = Image.fromarray(grid[..., 0] if grid.shape[2] == 1 else grid)
    return atomic_write(path, lambda f: picture.save(f, format="PNG"))
