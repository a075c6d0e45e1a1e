"""``load_images``: one entry point for named benchmark sets, ``.npz`` files and image folders."""

from __future__ import annotations

import functools
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

from roseood.data.download import DOWNLOADS, download_dataset
from roseood.data.preprocess import U8, adjust_brightness, check_options, preprocess, resize_crop
from roseood.data.registry import DATASETS, DatasetSpec, resolve_data_dir
from roseood.errors import DataError
from roseood.validation import check_int, check_seed

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
DEFAULT_GENERATED_N = 10000

Labels = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ImageSet:
    """Preprocessed images ready for a model, with where they came from.

    ``images`` is uint8 ``(N, C, size, size)``; ``labels`` is int64 ``(N,)``, ``-1`` where unknown;
    ``files`` the path of each image relative to its folder, for images loaded from a folder.
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    source: str
    files: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.images.shape[0])


def load_images(
    source: str | os.PathLike[str],
    *,
    split: str = "test",
    data_dir: str | Path | None = None,
    n: int | None = None,
    seed: int = 0,
    channels: int = 1,
    size: int = 32,
    brightness: float = 1.0,
    download: bool = True,
) -> ImageSet:
    """Load a named set (``"mnist"``, ``"cifar10:train"``, ``"noise"``), an ``.npz`` file or an image folder.

    Images are resized/centre-cropped to ``size``, converted to ``channels`` and scaled by ``brightness``
    exactly as the paper's torchvision pipeline does (see :mod:`roseood.data.preprocess`). With ``n``,
    a subset of ``n`` images is drawn with ``default_rng(seed).choice(N, n, replace=False)`` and sorted,
    so the same ``(n, seed)`` always gives the same images in file order; ``n >= N`` takes all of them.
    Named sets are read from ``{data_dir}/{name}_{split}.npz`` and downloaded when missing if possible.
    A known name wins over a same-named path: pass ``./mnist`` or a ``Path`` to mean the folder.
    """
    check_options(channels, size, brightness)
    check_seed(seed, error=DataError)
    if n is not None:
        check_int(n, "n", error=DataError)
    key, has_split, suffix = str(source).partition(":")
    spec = DATASETS.get(key.strip().lower().replace("-", "_"))
    if spec is not None and not isinstance(source, os.PathLike):
        split = suffix.strip() if has_split else split
        if split not in spec.splits:
            available = ", ".join(spec.splits)
            raise DataError(f"dataset {spec.name} has no split {split!r}; available: {available}")
        name = spec.name if split == "test" else f"{spec.name}:{split}"
        if spec.generated:
            return _generate(spec.name, n, seed, channels, size, brightness)
        path = _named_file(spec, split, resolve_data_dir(data_dir), download)
        images, labels = _read_npz(path)
        return _finish(name, str(path), images, labels, n, seed, channels, size, brightness)
    path = Path(source).expanduser()
    if path.is_dir():
        return _load_folder(path, n, seed, channels, size, brightness)
    if path.is_file():
        images, labels = _read_npz(path)
        return _finish(str(source), str(path), images, labels, n, seed, channels, size, brightness)
    raise DataError(
        f"{str(source)!r} is neither a known dataset ({', '.join(DATASETS)}) "
        "nor an existing .npz file or image folder"
    )


def _subsample(total: int, n: int | None, seed: int) -> npt.NDArray[np.intp] | None:
    """Sorted indices of a seeded subset of size ``n``, or ``None`` when all ``total`` items are kept."""
    if n is None or n >= total:
        return None
    return np.sort(np.random.default_rng(seed).choice(total, n, replace=False))


def _generate(name: str, n: int | None, seed: int, channels: int, size: int, brightness: float) -> ImageSet:
    """``noise``: i.i.d. uniform pixels; ``constant``: one uniform value per image and channel."""
    count = DEFAULT_GENERATED_N if n is None else n
    rng = np.random.default_rng(seed)
    if name == "noise":
        images = rng.integers(0, 256, (count, channels, size, size), dtype=np.uint8)
    else:
        values = rng.integers(0, 256, (count, channels, 1, 1), dtype=np.uint8)
        images = np.ascontiguousarray(np.broadcast_to(values, (count, channels, size, size)))
    labels = np.full(count, -1, dtype=np.int64)
    return ImageSet(name, adjust_brightness(images, brightness), labels, f"generated (seed {seed})")


def _named_file(spec: DatasetSpec, split: str, data_dir: Path, download: bool) -> Path:
    """Path of ``{name}_{split}.npz``, downloading it first when it is missing and that is possible."""
    path = data_dir / spec.filename(split)
    if path.is_file():
        return path
    if spec.name not in DOWNLOADS:
        raise DataError(
            f"{path.name} not found in {data_dir}; {spec.name} cannot be downloaded automatically, so put "
            f"an .npz with uint8 'images' (N, H, W[, 3]) and optional 'labels' there "
            f"(or point data_dir / $ROSEOOD_DATA at the folder that has it)"
        )
    if not download:
        raise DataError(
            f"{path.name} not found in {data_dir}; put it there or pass download=True to fetch {spec.name}"
        )
    return download_dataset(spec.name, split, data_dir)


def _read_npz(path: Path) -> tuple[U8, Labels]:
    """Read and validate ``images`` (and optional ``labels``) from an ``.npz`` archive.

    Decompressing a large archive takes seconds and benchmarks load the same files many times, so the
    last 16 archives are kept in memory (keyed by path, size and mtime); callers get copies.
    """
    stat = path.stat()
    images, labels = _read_npz_cached(path.resolve(), stat.st_size, stat.st_mtime_ns)
    return images.copy(), labels.copy()


@functools.lru_cache(maxsize=16)
def _read_npz_cached(path: Path, size: int, mtime_ns: int) -> tuple[U8, Labels]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read {path} as an .npz archive: {e}") from e
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{path} is a single .npy array, expected an .npz archive with an 'images' array")
    with archive:
        if "images" not in archive.files:
            found = ", ".join(archive.files) or "nothing"
            raise DataError(f"{path} has no 'images' array (it holds: {found})")
        try:
            images = archive["images"]
            labels = archive["labels"] if "labels" in archive.files else None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise DataError(f"{path} is corrupt: {e}") from e
    if images.dtype != np.uint8:
        raise DataError(f"{path}: 'images' must be uint8 (0–255), got {images.dtype}")
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if not (images.ndim == 3 or (images.ndim == 4 and images.shape[-1] == 3)):
        raise DataError(f"{path}: 'images' must have shape (N, H, W) or (N, H, W, 3), got {images.shape}")
    if images.shape[0] == 0 or 0 in images.shape[1:3]:
        raise DataError(f"{path}: empty image set ('images' has shape {images.shape})")
    if labels is None:
        return images, np.full(len(images), -1, dtype=np.int64)
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(
            f"{path}: 'labels' must be {len(images)} integers, got {labels.dtype} of shape {labels.shape}"
        )
    return images, labels.astype(np.int64)


def _finish(
    name: str,
    source: str,
    images: U8,
    labels: Labels,
    n: int | None,
    seed: int,
    channels: int,
    size: int,
    brightness: float,
) -> ImageSet:
    """Subsample (before resizing, for speed), then preprocess."""
    keep = _subsample(len(images), n, seed)
    if keep is not None:
        images, labels = images[keep], labels[keep]
    return ImageSet(
        name, preprocess(images, channels=channels, size=size, brightness=brightness), labels, source
    )


def _folder_files(folder: Path, n: int | None, seed: int) -> list[Path]:
    """Image files under ``folder`` (recursively, by relative path; no hidden files), subsampled."""
    files = sorted(
        (p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")),
        key=lambda p: p.relative_to(folder).as_posix(),
    )
    files = [p for p in files if p.is_file()]
    if not files:
        raise DataError(f"no image files ({', '.join(sorted(IMAGE_SUFFIXES))}) found in folder {folder}")
    keep = _subsample(len(files), n, seed)
    return files if keep is None else [files[i] for i in keep]


def _read_files(files: list[Path], channels: int, size: int, brightness: float) -> U8:
    """Each file opened as RGB (as torchvision's ``ImageFolder`` does), resized/cropped on its own since
    sizes may differ, then preprocessed."""
    images = np.empty((len(files), size, size, 3), dtype=np.uint8)
    for i, file in enumerate(files):
        try:
            with Image.open(file) as img:
                images[i] = np.asarray(resize_crop(img.convert("RGB"), size))
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
            raise DataError(f"cannot read image file {file}: {e}") from e
    return preprocess(images, channels=channels, size=size, brightness=brightness)


def _load_folder(
    folder: Path, n: int | None, seed: int, channels: int, size: int, brightness: float
) -> ImageSet:
    """Every image file under ``folder``; labels are unknown (-1)."""
    files = _folder_files(folder, n, seed)
    labels = np.full(len(files), -1, dtype=np.int64)
    return ImageSet(
        str(folder),
        _read_files(files, channels, size, brightness),
        labels,
        str(folder),
        _relative(files, folder),
    )


def _relative(files: list[Path], folder: Path) -> tuple[str, ...]:
    """Each file's path relative to the folder it was found in (what reports and score CSVs print)."""
    return tuple(p.relative_to(folder).as_posix() for p in files)


@dataclass(frozen=True, eq=False)
class ImageStream:
    """An image source read by index range, ``read(lo, hi)`` → uint8 (n, C, size, size): an image folder
    is read file by file on demand (bounded memory for any number of files), other sources are loaded."""

    name: str
    source: str
    labels: np.ndarray
    read: Callable[[int, int], np.ndarray]
    files: tuple[str, ...] | None = None  # for an image folder, each file's relative path

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def open_images(
    source: str | os.PathLike[str],
    *,
    split: str = "test",
    data_dir: str | Path | None = None,
    n: int | None = None,
    seed: int = 0,
    channels: int = 1,
    size: int = 32,
    brightness: float = 1.0,
) -> ImageStream:
    """Like ``load_images`` (same arguments), but an image folder's files are only read when asked for."""
    path = Path(source).expanduser()
    named = str(source).partition(":")[0].strip().lower().replace("-", "_") in DATASETS
    if not path.is_dir() or (named and not isinstance(source, os.PathLike)):
        s = load_images(
            source,
            split=split,
            data_dir=data_dir,
            n=n,
            seed=seed,
            channels=channels,
            size=size,
            brightness=brightness,
        )
        return ImageStream(s.name, s.source, s.labels, lambda lo, hi: s.images[lo:hi], s.files)
    check_options(channels, size, brightness)
    files = _folder_files(path, n, seed)
    labels = np.full(len(files), -1, dtype=np.int64)
    return ImageStream(
        str(path),
        str(path),
        labels,
        lambda lo, hi: _read_files(files[lo:hi], channels, size, brightness),
        _relative(files, path),
    )


def take(images: ImageSet, n: int, seed: int) -> ImageSet:
    """A seeded random subset of ``n`` images (all of them when ``n >= len``), in the set's order."""
    keep = _subsample(len(images), n, seed)
    if keep is None:
        return images
    files = tuple(images.files[i] for i in keep) if images.files is not None else None
    return ImageSet(images.name, images.images[keep], images.labels[keep], f"{n} of {images.source}", files)
