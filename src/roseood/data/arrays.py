"""Image arrays in files: an ``.npz`` archive of ``images`` (and optional ``labels``) or a single-array
``.npy`` file, read without unpickling anything and checked to be uint8 images; a file that is neither
is refused in one line that says so (numpy alone would call it pickled data)."""

from __future__ import annotations

import functools
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

from roseood.data.preprocess import U8
from roseood.errors import DataError

Labels = npt.NDArray[np.int64]
ARRAY_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")  # a zip (.npz, or empty), a .npy


def read_array(path: Path) -> tuple[U8, Labels]:
    """Read and validate ``images`` (and optional ``labels``) from an ``.npz`` archive, or the images of a
    single-array ``.npy`` file.

    Decompressing a large archive takes seconds and benchmarks load the same files many times, so the
    last 16 files are kept in memory (keyed by path, size and mtime); callers get copies.
    """
    stat = path.stat()
    images, labels = _read_array_cached(path.resolve(), stat.st_size, stat.st_mtime_ns)
    return images.copy(), labels.copy()


@functools.lru_cache(maxsize=16)
def _read_array_cached(path: Path, size: int, mtime_ns: int) -> tuple[U8, Labels]:
    try:
        with path.open("rb") as f:
            head = f.read(6)
        archive = np.load(path, allow_pickle=False) if head.startswith(ARRAY_SIGNATURES) else None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read {path} as an .npz archive or .npy array: {e}") from e
    if archive is None:  # numpy would call it pickled data, and suggest unpickling it
        raise DataError(
            f"{path} is not a readable .npz archive or .npy array: it starts with neither the zip nor the "
            "NumPy signature (damaged, or another kind of file); give an .npz of 'images', a .npy array of "
            "uint8 images, a folder of image files or a dataset name"
        )
    if isinstance(archive, np.ndarray):
        return check_images(archive, path), np.full(len(archive), -1, dtype=np.int64)
    with archive:
        if "images" not in archive.files:
            found = ", ".join(archive.files) or "nothing"
            raise DataError(f"{path} has no 'images' array (it holds: {found})")
        try:
            images = archive["images"]
            labels = archive["labels"] if "labels" in archive.files else None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise DataError(f"{path} is corrupt: {e}") from e
    images = check_images(images, path)
    if labels is None:
        return images, np.full(len(images), -1, dtype=np.int64)
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(
            f"{path}: 'labels' must be {len(images)} integers, got {labels.dtype} of shape {labels.shape}"
        )
    return images, labels.astype(np.int64)


def check_images(images: np.ndarray, path: Path) -> U8:
    """uint8 images as channel-last (N, H, W) or (N, H, W, 3); (N, 1|3, H, W) is taken as channel-first."""
    if images.dtype != np.uint8:
        raise DataError(f"{path}: images must be uint8 (0–255), got {images.dtype}")
    if images.ndim == 4 and images.shape[1] in (1, 3) and images.shape[-1] not in (1, 3):
        images = images.transpose(0, 2, 3, 1)
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if not (images.ndim == 3 or (images.ndim == 4 and images.shape[-1] == 3)):
        raise DataError(
            f"{path}: images must have shape (N, H, W), (N, H, W, 1|3) or (N, 1|3, H, W), got {images.shape}"
        )
    if images.shape[0] == 0 or 0 in images.shape[1:3]:
        raise DataError(f"{path}: empty image set (images have shape {images.shape})")
    return np.ascontiguousarray(images)
