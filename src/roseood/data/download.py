"""Download the public benchmark sets and convert them to the ``{name}_{split}.npz`` layout.

Every original file is checked against the md5 that torchvision publishes for it (``MNIST``,
``FashionMNIST``, ``KMNIST`` in ``torchvision/datasets/mnist.py``, ``CIFAR10`` in ``cifar.py``,
``SVHN`` in ``svhn.py``), so a corrupted or changed upstream file is refused rather than converted.
Original files are kept under ``{data_dir}/raw/`` so the other split of the same archive needs no
second download; that folder may be deleted once the ``.npz`` files exist.
"""

from __future__ import annotations

import gzip
import hashlib
import pickle
import tarfile
import urllib.request
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import numpy as np
import numpy.typing as npt

from roseood.errors import DataError, RoseError
from roseood.progress import progress as progress_bar
from roseood.serialization import atomic_write, file_digest, save_npz

CHUNK = 1 << 20
TIMEOUT_S = 60.0

Converted = tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]


class DownloadError(DataError):
    """A file could not be fetched from any of its URLs, or its checksum did not match."""


@dataclass(frozen=True)
class Resource:
    """One original file: its name on disk, its published md5, and the URLs to try in order."""

    filename: str
    md5: str
    urls: tuple[str, ...]


@dataclass(frozen=True)
class Download:
    """How to build ``{name}_{split}.npz``: which originals to fetch and how to convert them."""

    resources: dict[str, tuple[Resource, ...]]
    convert: Callable[[Sequence[Path], str], Converted]


# --- parsing the original formats -------------------------------------------------------------------

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (LeCun's MNIST format), gzipped or not, into a native-endian array."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot read IDX file {path}: {e}") from e
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES:
        raise DataError(f"{path} is not an IDX file (bad header)")
    dtype, ndim = np.dtype(_IDX_DTYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"IDX file {path} is truncated (header)")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    count = int(np.prod(shape))
    if len(raw) != header + count * dtype.itemsize:
        raise DataError(
            f"IDX file {path} holds {len(raw) - header} data bytes, expected {count * dtype.itemsize}"
        )
    data = np.frombuffer(raw, dtype, count=count, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def _convert_idx(paths: Sequence[Path], split: str) -> Converted:
    """(images gz, labels gz) of one MNIST-style split → uint8 (N, 28, 28), int64 (N,)."""
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"IDX files {paths[0].name}, {paths[1].name} do not hold N images and N labels")
    return images.astype(np.uint8), labels.astype(np.int64)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only: a pickle naming any other code is refused, so even an
    archive whose md5 check was bypassed (a file placed in ``raw/`` by hand) cannot run code."""

    ALLOWED: ClassVar[set[tuple[str, str]]] = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"a CIFAR-10 batch may not name {module}.{name}")
        return super().find_class(module, name)


def _unpickle(archive: tarfile.TarFile, member: str) -> dict[bytes, Any]:
    """Load one CIFAR batch (a pickle of plain data and arrays, nothing else: ``_ArrayUnpickler``)."""
    handle: IO[bytes] | None = archive.extractfile(member)
    if handle is None:
        raise DataError(f"CIFAR-10 archive has no file {member}")
    with handle:
        batch: dict[bytes, Any] = _ArrayUnpickler(handle, encoding="bytes").load()
    return batch


def _convert_cifar10(paths: Sequence[Path], split: str) -> Converted:
    """Python-version CIFAR-10 tarball → uint8 (N, 32, 32, 3), int64 (N,), original order kept."""
    members = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    try:
        with tarfile.open(paths[0], "r:gz") as archive:
            batches = [_unpickle(archive, f"cifar-10-batches-py/{m}") for m in members]
    except (tarfile.TarError, OSError, KeyError, pickle.UnpicklingError) as e:
        raise DataError(f"cannot read CIFAR-10 archive {paths[0]}: {e}") from e
    data = np.concatenate([np.asarray(b[b"data"], dtype=np.uint8) for b in batches])
    labels = np.concatenate([np.asarray(b[b"labels"], dtype=np.int64) for b in batches])
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy(), labels


def _convert_svhn(paths: Sequence[Path], split: str) -> Converted:
    """SVHN ``*_32x32.mat`` (X: H×W×C×N, y: N×1 with 10 for digit 0) → uint8 (N, 32, 32, 3), int64."""
    from scipy.io import loadmat  # scipy is only needed for SVHN

    try:
        mat = loadmat(paths[0])
        x, y = mat["X"], mat["y"]
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"cannot read SVHN file {paths[0]}: {e}") from e
    images = np.ascontiguousarray(np.asarray(x, dtype=np.uint8).transpose(3, 0, 1, 2))
    return images, np.asarray(y, dtype=np.int64).ravel() % 10


def _idx_set(base_urls: Sequence[str], md5s: dict[str, str]) -> Download:
    """An MNIST-style set: ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`` under each base URL."""

    def res(filename: str) -> Resource:
        return Resource(filename, md5s[filename], tuple(base + filename for base in base_urls))

    return Download(
        resources={
            split: (res(f"{prefix}-images-idx3-ubyte.gz"), res(f"{prefix}-labels-idx1-ubyte.gz"))
            for split, prefix in (("train", "train"), ("test", "t10k"))
        },
        convert=_convert_idx,
    )


# URLs and md5s as published in torchvision/datasets/{mnist,cifar,svhn}.py. MNIST tries the PyTorch
# S3 mirror first because yann.lecun.com often refuses scripted downloads.
_CIFAR10 = Resource(
    "cifar-10-python.tar.gz",
    "c58f30108f718f92721af3b95e74349a",
    ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
)
_SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"
_SVHN_MD5 = {"train": "e26dedcc434d2e4c54c9b2d4a06d8373", "test": "eb5a983be6a315427106f1b164d9cef3"}

DOWNLOADS: dict[str, Download] = {
    "mnist": _idx_set(
        ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
        {
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
    ),
    "fashion_mnist": _idx_set(
        ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        {
            "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
            "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
            "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
        },
    ),
    "kmnist": _idx_set(
        ("http://codh.rois.ac.jp/kmnist/dataset/kmnist/",),
        {
            "train-images-idx3-ubyte.gz": "bdb82020997e1d708af4cf47b453dcf7",
            "train-labels-idx1-ubyte.gz": "e144d726b3acfaa3e44228e80efcd344",
            "t10k-images-idx3-ubyte.gz": "5c965bf0a639b31b8f53240b1b52f4d7",
            "t10k-labels-idx1-ubyte.gz": "7320c461ea6c1c855c0b718fb2a4b134",
        },
    ),
    "cifar10": Download({"train": (_CIFAR10,), "test": (_CIFAR10,)}, _convert_cifar10),
    "svhn": Download(
        {
            split: (Resource(f"{split}_32x32.mat", md5, (f"{_SVHN_URL}{split}_32x32.mat",)),)
            for split, md5 in _SVHN_MD5.items()
        },
        _convert_svhn,
    ),
}


# --- fetching ---------------------------------------------------------------------------------------


def _fetch_one(url: str, dest: Path, md5: str, progress: bool) -> None:
    """Stream ``url`` into ``dest`` atomically; the file appears only if the md5 matches."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        total = int(response.headers.get("Content-Length") or 0) or None

        def stream(out: IO[bytes]) -> None:
            digest = hashlib.md5(usedforsecurity=False)
            with progress_bar(
                desc=dest.name, total=total, enabled=progress, unit="B", unit_scale=True
            ) as bar:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
            if digest.hexdigest() != md5:
                raise DownloadError(f"checksum mismatch for {url}: md5 {digest.hexdigest()}, expected {md5}")

        atomic_write(dest, stream)


def fetch(resource: Resource, dest: Path, *, progress: bool = True) -> Path:
    """Download ``resource`` to ``dest`` (atomically, md5-checked), trying its URLs in order."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in resource.urls:
        try:
            _fetch_one(url, dest, resource.md5, progress)
            return dest
        except DownloadError as e:
            errors.append(str(e))
        except OSError as e:  # URLError, HTTPError, timeouts and connection resets are all OSErrors
            errors.append(f"could not download {url}: {getattr(e, 'reason', e)}")
        except RoseError as e:  # the file could not be written (atomic_write's one-line error)
            errors.append(f"could not download {url}: {e}")
    raise DownloadError("; ".join(errors))


def download_dataset(name: str, split: str, data_dir: Path, *, progress: bool = True) -> Path:
    """Fetch the originals of ``name``/``split`` (unless already verified) and write ``{name}_{split}.npz``.

    Raises ``DataError`` naming the file to place by hand when the network or a checksum fails, or the
    data folder cannot be written (read-only, a file in the way); folders this call created are removed
    again when it fails, so an offline attempt leaves no empty ``raw/``.
    """
    if name not in DOWNLOADS or split not in DOWNLOADS[name].resources:
        raise DataError(f"no download source for {name} split {split!r}; known: {sorted(DOWNLOADS)}")
    spec = DOWNLOADS[name]
    target = data_dir / f"{name}_{split}.npz"
    raw_dir = data_dir / "raw" / name
    created = [d for d in (raw_dir, raw_dir.parent, data_dir) if not d.exists()]  # deepest first
    paths = []
    try:
        for resource in spec.resources[split]:
            path = raw_dir / resource.filename
            if not (path.is_file() and file_digest(path, "md5") == resource.md5):
                fetch(resource, path, progress=progress)
            paths.append(path)
    except (DownloadError, OSError) as e:
        for folder in created:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        if isinstance(e, DownloadError):
            why = f"{e} — to work offline, put {target.name} (npz with uint8 'images') into {data_dir}"
        else:
            why = f"cannot write to the data folder {data_dir}: {e} — choose one with --data-dir"
        raise DataError(why) from None
    images, labels = spec.convert(paths, split)
    return save_npz(target, {"images": images, "labels": labels})
