"""One image loader, ``open_images`` (``load_images``: read all at once), for named benchmark sets,
``.npz``/``.npy`` files and image folders. Every source says what it is (sizes, gray or colour) before a
pixel is converted: channels and size left None are taken from the data, and ``conversion`` is one line
saying what preprocessing changes (None: none), which callers state on stderr and in reports."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Unpack

import numpy as np
import numpy.typing as npt
from PIL import Image

from roseood.data.arrays import Labels, read_array
from roseood.data.decoding import decode, float_scale, inspect, step_rank
from roseood.data.download import DOWNLOADS, download_dataset
from roseood.data.jpeg import JpegHistory, split_suffix
from roseood.data.preprocess import (
    U8,
    Preprocessing,
    PreprocessingOptions,
    Wanted,
    adjust_brightness,
    resize_crop,
)
from roseood.data.registry import DATASETS, NamedSplit, locate, parse_classes, split_classes
from roseood.errors import DataError
from roseood.progress import state
from roseood.serialization import printable
from roseood.validation import check_int, check_seed

READ_ERRORS = ("raise", "skip")  # open_images(errors=): what a folder's unreadable file does
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
DEFAULT_GENERATED_N = 10000


class _Stated:
    """What ``ImageSet`` and ``ImageStream`` share: saying what their preprocessing changes."""

    name: str
    source: str
    conversion: str | None
    preprocessing: Preprocessing | None

    @property
    def title(self) -> str:
        """Its name, and its source where that says more (``mnist (…/mnist_test.npz)``, a folder once)."""
        return self.name if self.source == self.name else f"{self.name} ({self.source})"

    def state_preprocessing(self, always: bool = False) -> None:
        """Say on stderr, in one line, what preprocessing changes; when it changes nothing, say nothing
        (``always``: say that the images are used as they are)."""
        if self.conversion:
            state(f"{self.name}: {self.conversion}{self._target()}")
        elif always:
            state(f"{self.name}: images used as they are{self._target()}")

    def _target(self) -> str:
        return f" ({self.preprocessing.describe()})" if self.preprocessing is not None else ""


@dataclass(frozen=True, eq=False)
class ImageSet(_Stated):
    """Preprocessed images ready for a model, with where they came from.

    ``images`` is uint8 ``(N, C, size, size)``; ``labels`` is int64 ``(N,)``, ``-1`` where unknown (for a
    folder of class folders, the index of the image's class folder in ``classes``); ``files`` the path
    of each image relative to its folder, for images loaded from a folder; ``preprocessing`` what was
    applied and ``conversion`` what it changed, in one line (None: nothing).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    source: str
    files: tuple[str, ...] | None = None
    conversion: str | None = None
    preprocessing: Preprocessing | None = None
    classes: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.images.shape[0])


@dataclass(frozen=True, eq=False)
class ImageStream(_Stated):
    """An image source read by index range, ``read(lo, hi)`` → uint8 (n, C, size, size): an image folder
    is read file by file on demand (bounded memory for any number of files), arrays are preprocessed
    chunk by chunk. The other fields are those of ``ImageSet``."""

    name: str
    source: str
    labels: np.ndarray
    read: Callable[[int, int], np.ndarray]
    files: tuple[str, ...] | None = None
    conversion: str | None = None
    preprocessing: Preprocessing | None = None
    classes: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])


class ImageOptions(PreprocessingOptions, total=False):
    """The keyword arguments of ``open_images`` and ``load_images`` (see ``open_images``)."""

    split: str
    data_dir: str | Path | None
    n: int | None
    seed: int
    brightness: float
    download: bool
    errors: str
    jpeg: JpegHistory | None


def load_images(source: str | os.PathLike[str], **options: Unpack[ImageOptions]) -> ImageSet:
    """``open_images`` (same arguments) with every image read and preprocessed at once."""
    s = open_images(source, **options)
    return ImageSet(
        s.name, s.read(0, len(s)), s.labels, s.source, s.files, s.conversion, s.preprocessing, s.classes
    )


def open_images(
    source: str | os.PathLike[str],
    *,
    split: str = "test",
    data_dir: str | Path | None = None,
    n: int | None = None,
    seed: int = 0,
    channels: int | None = 1,
    size: int | None = 32,
    brightness: float = 1.0,
    resize: str = "crop",
    download: bool = True,
    errors: str = "raise",
    jpeg: JpegHistory | None = None,
) -> ImageStream:
    """Open a named set (``"mnist"``, ``"cifar10:train"``, ``"noise"``), an ``.npz``/``.npy`` file or an image
    folder (PNG, JPEG, WebP, TIFF, BMP, GIF; recursive; class subfolders become labels).

    Images are resized/centre-cropped to ``size`` (``resize="stretch"``: stretched), converted to
    ``channels`` and scaled by ``brightness`` exactly as the paper's torchvision pipeline does (see
    :mod:`roseood.data.preprocess`); ``channels``/``size`` None take them from the data (colour if any
    image is, the most common size). With ``n``, a subset of ``n`` images is drawn with
    ``default_rng(seed).choice(N, n, replace=False)`` and sorted, so the same ``(n, seed)`` always gives
    the same images in file order; ``n >= N`` takes all of them. Named sets are read from
    ``{data_dir}/{name}_{split}.npz`` and downloaded when missing if possible. A known name wins over a
    same-named path: pass ``./mnist`` or a ``Path`` to mean the folder. Images are read and preprocessed
    only when ``read(lo, hi)`` asks for them (a folder file by file: bounded memory for any number).
    ``errors="skip"``: a folder's files that cannot be read are kept in their places but left out of the
    size and colour statistics, and reading them raises their ``DataError`` then, so that a consumer
    such as ``Detector.score_stream(on_error=...)`` goes on past them (``"raise"``: refused at once).
    ``jpeg``: each image goes through that JPEG round-trip at the final size and channels, to share the
    compression history of a set it is judged against (``roseood.data.jpeg``); a source ending in
    ``+jpeg75`` (``+jpeg90-444``) asks for it too, unless the whole name is an existing path. A source
    ending in ``@7`` (``@0-6+8-9``, before any ``+jpeg``) keeps the images of those labels, before ``n``
    draws from them (a folder's labels: its class subfolders in sorted order, from 0).
    """
    want = Wanted(channels, size, resize, brightness)  # refuses options it cannot honour
    if errors not in READ_ERRORS:
        raise DataError(f"errors must be one of {', '.join(READ_ERRORS)}, got {errors!r}")
    check_seed(seed, error=DataError)
    if n is not None:
        check_int(n, "n", error=DataError)
    if not (isinstance(source, os.PathLike) or _exists(source)):
        source, named_jpeg = split_suffix(source)
        if named_jpeg is not None and jpeg not in (None, named_jpeg):
            raise DataError(f"{source}: two JPEG round-trips asked for ({named_jpeg.tag()} and {jpeg.tag()})")
        jpeg = jpeg or named_jpeg
    want = replace(want, jpeg=jpeg)
    stream = _open(source, split, data_dir, n, seed, want, download, errors)
    return stream if jpeg is None else replace(stream, name=stream.name + jpeg.tag())


def _exists(source: str) -> bool:
    """Whether ``source`` names an existing path (a name the OS refuses names none)."""
    try:
        return Path(source).expanduser().exists()
    except (OSError, ValueError, RuntimeError):
        return False


def _open(
    source: str | os.PathLike[str],
    split: str,
    data_dir: str | Path | None,
    n: int | None,
    seed: int,
    want: Wanted,
    download: bool,
    errors: str,
) -> ImageStream:
    """``open_images`` once its options are checked: a named set (its split and classes as ``locate``
    reads them), else a folder or file, with the classes a ``@`` suffix keeps (None: all)."""
    named = None if isinstance(source, os.PathLike) else locate(str(source), split, data_dir)
    if named is not None:
        if named.path is None:
            return _generate(named.spec.name, n, seed, want)
        path = _named_file(named, download)
        return _array_stream(named.name, str(path), *read_array(path), n, seed, want, named.kept)
    literal = isinstance(source, os.PathLike) or _exists(str(source))  # as for the +jpeg suffix
    text, selection = (str(source), "") if literal else split_classes(str(source))
    path, kept = Path(text).expanduser(), parse_classes(selection) if selection else None
    if path.is_dir():
        stream = _folder_stream(path, n, seed, want, skip=errors == "skip", kept=kept)
        return replace(stream, name=stream.name + selection)
    if path.is_file():
        shown = printable(str(source))
        return _array_stream(shown, printable(str(path)), *read_array(path), n, seed, want, kept)
    hint = "; a class selection is @N or @A-B, joined by + (fashion_mnist@7)" if "@" in str(source) else ""
    raise DataError(
        f"{str(source)!r} is neither a known dataset ({', '.join(DATASETS)}) "
        f"nor an existing .npz/.npy file or image folder{hint}"
    )


def _of_classes(
    labels: Labels, kept: frozenset[int] | None, name: str, names: tuple[str, ...] = ()
) -> npt.NDArray[np.intp] | None:
    """Indices of the images whose label ``kept`` holds (None: all kept); a kept class without images is
    refused, naming the classes there are (with a folder's class ``names``)."""
    if kept is None:
        return None
    present = sorted(set(labels[labels >= 0].tolist()))
    if not present:
        raise DataError(f"{name}: its images have no class labels to select by")
    missing = sorted(kept - set(present))
    if missing:
        listed = ", ".join(f"{c} ({names[c]})" if names else str(c) for c in present[:12])
        more = f" and {len(present) - 12} more" if len(present) > 12 else ""
        raise DataError(f"{name}: no images of class {missing[0]}; its classes: {listed}{more}")
    return np.flatnonzero(np.isin(labels, sorted(kept)))


def _subsample(total: int, n: int | None, seed: int) -> npt.NDArray[np.intp] | None:
    """Sorted indices of a seeded subset of size ``n``, or ``None`` when all ``total`` items are kept."""
    if n is None or n >= total:
        return None
    return np.sort(np.random.default_rng(seed).choice(total, n, replace=False))


def _generate(name: str, n: int | None, seed: int, want: Wanted) -> ImageStream:
    """``noise``: i.i.d. uniform pixels; ``constant``: one uniform value per image and channel."""
    if want.channels is None or want.size is None:
        raise DataError(f"{name} images are generated: name their channels and size")
    if want.jpeg is not None:
        raise DataError(f"{name} images are generated, not stored: they have no compression history to match")
    count = DEFAULT_GENERATED_N if n is None else n
    rng = np.random.default_rng(seed)
    shape = (count, want.channels, want.size, want.size)
    if name == "noise":
        images = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        values = rng.integers(0, 256, (*shape[:2], 1, 1), dtype=np.uint8)
        images = np.ascontiguousarray(np.broadcast_to(values, shape))
    images = adjust_brightness(images, want.brightness)
    labels = np.full(count, -1, dtype=np.int64)
    prep = Preprocessing(want.channels, want.size, want.resize)
    return ImageStream(
        name, f"generated (seed {seed})", labels, lambda lo, hi: images[lo:hi], preprocessing=prep
    )


def _named_file(named: NamedSplit, download: bool) -> Path:
    """The named split's ``.npz`` file, downloaded first when it is missing and that is possible."""
    path, name = named.path, named.spec.name
    assert path is not None  # a set with a file
    if path.is_file():
        return path
    if name not in DOWNLOADS:
        raise DataError(
            f"{path.name} not found in {path.parent}; {name} cannot be downloaded automatically, so put "
            f"an .npz with uint8 'images' (N, H, W[, 3]) and optional 'labels' there "
            f"(or point data_dir / $ROSEOOD_DATA at the folder that has it)"
        )
    if not download:
        raise DataError(
            f"{path.name} not found in {path.parent}; put it there or pass download=True to fetch {name}"
        )
    return download_dataset(name, named.split, path.parent)


def _array_stream(
    name: str,
    source: str,
    images: U8,
    labels: Labels,
    n: int | None,
    seed: int,
    want: Wanted,
    kept: frozenset[int] | None = None,
) -> ImageStream:
    """Keep the ``kept`` classes, subsample (before resizing, for speed); preprocess each chunk when it is
    read."""
    chosen = _of_classes(labels, kept, name)
    if chosen is not None:
        images, labels = images[chosen], labels[chosen]
    keep = _subsample(len(images), n, seed)
    if keep is not None:
        images, labels = images[keep], labels[keep]
    colours = Counter({3 if images.ndim == 4 else 1: len(images)})
    prep, conversion = want.resolve(Counter({images.shape[1:3]: len(images)}), colours)

    def read(lo: int, hi: int) -> U8:
        return want.finish(images[lo:hi], prep)

    return ImageStream(name, source, labels, read, None, conversion, prep)


def _folder_stream(
    folder: Path, n: int | None, seed: int, want: Wanted, skip: bool, kept: frozenset[int] | None = None
) -> ImageStream:
    """Every image file under ``folder`` (of the ``kept`` classes), read on demand; images in class
    subfolders are labelled with their folder's index among the sorted class folders (images at the top:
    -1). ``skip``: files whose header cannot be read stay in place and raise their ``DataError`` when
    read (see ``open_images``)."""
    files = sorted(
        (p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")),
        key=lambda p: p.relative_to(folder).as_posix(),
    )
    files = [p for p in files if p.is_file()]
    if not files:
        raise DataError(f"no image files ({', '.join(sorted(IMAGE_SUFFIXES))}) found in folder {folder}")
    relative = [p.relative_to(folder).parts for p in files]
    classes = tuple(sorted({parts[0] for parts in relative if len(parts) > 1}))
    index = {c: i for i, c in enumerate(classes)}
    labels = np.array([index[p[0]] if len(p) > 1 else -1 for p in relative], dtype=np.int64)
    chosen = _of_classes(labels, kept, printable(str(folder)), tuple(printable(c) for c in classes))
    if chosen is not None:
        files, labels = [files[i] for i in chosen], labels[chosen]
    keep = _subsample(len(files), n, seed)
    if keep is not None:
        files, labels = [files[i] for i in keep], labels[keep]
    headers, unreadable = [], {}
    for i, file in enumerate(files):  # headers (float images: values): every conversion known up front
        try:
            with _reading(file) as img:
                headers.append(inspect(img, file))
        except DataError as exc:
            if not skip:
                raise
            unreadable[i] = str(exc)
    if not headers:
        raise DataError(
            f"none of the {len(files)} image files in {folder} can be read; the first: {unreadable[0]}"
        )
    scale, floats = float_scale(headers)
    named = [(*h.steps, floats) if h.floating and floats else h.steps for h in headers]
    steps = Counter(step for each in named for step in each)
    decoding = dict(sorted(steps.items(), key=lambda kv: step_rank(kv[0])))
    shapes = Counter(h.size for h in headers)
    prep, conversion = want.resolve(shapes, Counter(3 if h.colour else 1 for h in headers), decoding)

    def read(lo: int, hi: int) -> U8:
        bad = next((i for i in range(lo, hi) if i in unreadable), None)
        if bad is not None:
            raise DataError(unreadable[bad])
        return _read_files(files[lo:hi], prep, want, scale)

    names = tuple(printable(p.relative_to(folder).as_posix()) for p in files)
    where = printable(str(folder))
    shown = tuple(printable(c) for c in classes) or None
    return ImageStream(where, where, labels, read, names, conversion, prep, shown)


@contextlib.contextmanager
def _reading(file: Path) -> Iterator[Image.Image]:
    """The opened image file; whatever Pillow raises while it is read is one DataError naming it."""
    try:
        with Image.open(file) as img:
            yield img
    except DataError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"cannot read image file {file}: {e}") from e


def _read_files(files: list[Path], prep: Preprocessing, want: Wanted, scale: float) -> U8:
    """Each file decoded to 8-bit RGB (``roseood.data.decoding``; float images times ``scale``),
    resized/cropped on its own since sizes may differ, then preprocessed."""
    images = np.empty((len(files), prep.size, prep.size, 3), dtype=np.uint8)
    for i, file in enumerate(files):
        with _reading(file) as img:
            images[i] = np.asarray(resize_crop(decode(img, scale), prep.size, prep.resize))
    return want.finish(images, prep)


def read_readable(
    stream: ImageStream, lo: int, hi: int, on_error: Callable[[int, str], None] | None = None
) -> tuple[U8, npt.NDArray[np.intp]]:
    """Images ``lo``–``hi`` of ``stream`` and their indices; with ``on_error``, a range holding a file that
    cannot be read is read again file by file, ``on_error(index, message)`` called for each bad one and
    the rest returned (without: the ``DataError`` is raised)."""
    try:
        return stream.read(lo, hi), np.arange(lo, hi)
    except DataError:
        if on_error is None:
            raise
    parts, kept = [], []
    for i in range(lo, hi):
        try:
            parts.append(stream.read(i, i + 1))
            kept.append(i)
        except DataError as exc:
            on_error(i, str(exc))
    if not parts:
        return np.empty((0, 0, 0, 0), np.uint8), np.empty(0, np.intp)  # nothing to score
    return np.concatenate(parts), np.array(kept, np.intp)


def take(images: ImageSet, n: int, seed: int) -> ImageSet:
    """A seeded random subset of ``n`` images (all of them when ``n >= len``), in the set's order."""
    keep = _subsample(len(images), n, seed)
    return images if keep is None else select(images, keep, f"{n} of {images.source}")


def select(images: ImageSet, keep: npt.NDArray[np.intp], source: str) -> ImageSet:
    """The images at indices ``keep`` (with their labels and file names), described as ``source``."""
    files = tuple(images.files[i] for i in keep) if images.files is not None else None
    return replace(images, images=images.images[keep], labels=images.labels[keep], source=source, files=files)
