"""The named image sets of the paper and where their files live on disk."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from roseood.errors import DataError
from roseood.registry import Registry

DATA_ENV_VAR = "ROSEOOD_DATA"
DEFAULT_DATA_DIR = Path("~/.cache/roseood/data")


@dataclass(frozen=True)
class DatasetSpec:
    """One named image set.

    ``splits`` lists the ``{name}_{split}.npz`` files the set can have; ``generated`` sets (noise,
    constant) have no file and are drawn from a seeded generator instead. ``natural``: photographs, which
    ``rose bench`` also judges through the in-distribution set's JPEG history (``roseood.data.jpeg``).
    """

    name: str
    description: str
    splits: tuple[str, ...] = ("test",)
    generated: bool = False
    natural: bool = False

    def filename(self, split: str) -> str:
        """File name of ``split`` inside the data folder, e.g. ``cifar10_test.npz``."""
        return f"{self.name}_{split}.npz"


DATASETS: Registry[str, DatasetSpec] = Registry("dataset")  # the named sets, as every other plug-in kind
for _spec in (
    DatasetSpec("fashion_mnist", "Fashion-MNIST, 28×28 grayscale clothing", ("train", "test")),
    DatasetSpec("mnist", "MNIST, 28×28 grayscale digits", ("train", "test")),
    DatasetSpec("kmnist", "Kuzushiji-MNIST, 28×28 grayscale cursive Japanese", ("train", "test")),
    DatasetSpec("notmnist", "notMNIST, 28×28 grayscale letters A–J"),
    DatasetSpec("omniglot", "Omniglot, 28×28 grayscale handwritten characters"),
    DatasetSpec("cifar10", "CIFAR-10, 32×32 RGB natural images", ("train", "test"), natural=True),
    DatasetSpec("svhn", "SVHN, 32×32 RGB house numbers", ("train", "test"), natural=True),
    DatasetSpec("celeba", "CelebA, RGB faces", natural=True),
    DatasetSpec("lsun", "LSUN, RGB scenes (non-square; resized and centre-cropped)", natural=True),
    DatasetSpec("noise", "uniform random pixels in 0..255", generated=True),
    DatasetSpec("constant", "one random value in 0..255 per image and channel", generated=True),
):
    DATASETS.register(_spec.name, _spec)


# A source's suffix that keeps some classes: "fashion_mnist@7", "cifar10:train@0-4", "photos/@0-6+8-9"
# (label values; ranges joined by "+", since "," separates the sets of --ood)
MAX_CLASSES = 100_000  # the widest range a selection may span (it is expanded label by label)
CLASSES = re.compile(r"@(\d+(?:-\d+)?(?:\+\d+(?:-\d+)?)*)$", re.ASCII)  # 0-9 only


def split_classes(source: str) -> tuple[str, str]:
    """``source`` without its class selection, and the selection (``@7``; "" without one)."""
    match = CLASSES.search(source)
    return (source, "") if match is None else (source[: match.start()], match.group(0))


def parse_classes(selection: str) -> frozenset[int]:
    """The label values a selection keeps: ``@7`` → {7}, ``@0-6+8-9`` → {0, …, 6, 8, 9}."""
    match = CLASSES.fullmatch(selection)
    if match is None:
        raise DataError(f"bad class selection {selection!r}: write @N, @A-B, joined by + (e.g. @0-6+8-9)")
    kept: set[int] = set()
    for part in match.group(1).split("+"):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            raise DataError(f"bad class selection {selection!r}: the range {part} runs backwards")
        if int(high or low) - int(low) >= MAX_CLASSES:  # each kept class must have images: none has more
            raise DataError(f"bad class selection {selection!r}: {part} spans over {MAX_CLASSES:,} labels")
        kept.update(range(int(low), int(high or low) + 1))
    return frozenset(kept)


def dataset_spec(source: str) -> DatasetSpec | None:
    """The named set ``source`` names, written any way the CLI takes it (``CelebA:test``,
    ``fashion-mnist``, ``fashion_mnist@7``), or None for anything else (a file, a folder). The one place
    names are normalised."""
    return DATASETS.find(split_classes(source)[0].split(":")[0].strip().lower().replace("-", "_"))


def list_datasets() -> list[str]:
    """Names accepted by ``load_images``, in the registry's order."""
    return list(DATASETS)


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """Folder holding the ``*.npz`` files: ``data_dir`` if given, else ``$ROSEOOD_DATA``, else the cache.

    The folder is not created here; the downloader creates it when it writes a file.
    """
    if data_dir is None or str(data_dir) == "":
        data_dir = os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_DIR
    return Path(data_dir).expanduser()


@dataclass(frozen=True)
class NamedSplit:
    """A named set's split as a loader opens it: the name the loaded images take (``cifar10``,
    ``cifar10:train@3``), the file they are read from (None: a generated set) and the labels ``kept``
    (None: all)."""

    spec: DatasetSpec
    split: str
    name: str
    path: Path | None
    kept: frozenset[int] | None = None


def locate(source: str, split: str = "test", data_dir: str | Path | None = None) -> NamedSplit | None:
    """The split of a named set that ``source`` names (``cifar10:train``; without one, ``split``) and the
    classes it keeps (``@3``), with its file in the data folder (``resolve_data_dir``), or None where
    ``source`` names no set; a split the set lacks is refused."""
    base, selection = split_classes(source)
    key, has_split, suffix = base.partition(":")
    spec = dataset_spec(key)
    if spec is None:
        return None
    if split_classes(key)[1]:  # fashion_mnist@7:test, fashion_mnist@7@8: the name alone would drop it
        raise DataError(
            f"{source!r}: one class selection, after the split: NAME[:SPLIT]@CLASSES, classes joined by + "
            "(fashion_mnist:test@7+8)"
        )
    split = suffix.strip() if has_split else split
    if split not in spec.splits:
        raise DataError(f"dataset {spec.name} has no split {split!r}; available: {', '.join(spec.splits)}")
    if selection and spec.generated:
        raise DataError(f"{spec.name} images are generated: they have no classes to select ({selection})")
    name = (spec.name if split == "test" else f"{spec.name}:{split}") + selection
    path = None if spec.generated else resolve_data_dir(data_dir) / spec.filename(split)
    return NamedSplit(spec, split, name, path, parse_classes(selection) if selection else None)


def split_of(source: str, split: str) -> str | None:
    """The named set ``source`` names at ``split``, with the classes it keeps (``fashion_mnist@7`` and
    "train" → ``fashion_mnist:train@7``), or None: not a named set, or one without that split."""
    spec = dataset_spec(source)
    if spec is None or split not in spec.splits:
        return None
    return f"{spec.name}:{split}{split_classes(source)[1]}"
