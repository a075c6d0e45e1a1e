"""Downloader: IDX parsing, md5 checks, atomic writes and conversions, all offline via file:// URLs."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.io import savemat

from roseood.data import download, load_images
from roseood.data.download import Download, Resource, download_dataset, fetch, read_idx
from roseood.errors import DataError


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_read_idx_gzipped_and_plain(tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    (tmp_path / "img.gz").write_bytes(gzip.compress(idx_bytes(images, 0x08)))
    np.testing.assert_array_equal(read_idx(tmp_path / "img.gz"), images)
    ints = np.array([[1, -2], [70000, 3]], dtype=np.int32)
    (tmp_path / "ints").write_bytes(idx_bytes(ints, 0x0C))
    out = read_idx(tmp_path / "ints")
    np.testing.assert_array_equal(out, ints)
    assert out.dtype.isnative


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(DataError, match="bad header"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(idx_bytes(np.zeros((2, 4), np.uint8), 0x08)[:-3])
    with pytest.raises(DataError, match="expected 8"):
        read_idx(tmp_path / "short")
    (tmp_path / "trunc.gz").write_bytes(gzip.compress(b"\x00" * 100)[:20])
    with pytest.raises(DataError, match="cannot read IDX"):
        read_idx(tmp_path / "trunc.gz")


def test_fetch_verifies_md5_and_falls_back_to_next_url(tmp_path: Path) -> None:
    src = tmp_path / "payload.bin"
    src.write_bytes(b"x" * 5000)
    missing = (tmp_path / "missing.bin").as_uri()
    dest = tmp_path / "out" / "payload.bin"
    fetch(Resource("payload.bin", md5(src), (missing, src.as_uri())), dest, progress=False)
    assert dest.read_bytes() == src.read_bytes()


def test_checksum_mismatch_leaves_nothing_behind(tmp_path: Path) -> None:
    src = tmp_path / "payload.bin"
    src.write_bytes(b"y" * 100)
    dest = tmp_path / "out" / "payload.bin"
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch(Resource("payload.bin", "0" * 32, (src.as_uri(),)), dest, progress=False)
    assert list(dest.parent.iterdir()) == []


def mnist_like(tmp_path: Path, n: int = 6) -> tuple[Download, np.ndarray, np.ndarray]:
    """Write IDX gz files for both splits under tmp_path/src and a Download pointing at them."""
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    resources = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        files = []
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            path = src / f"{prefix}-{kind}-ubyte.gz"
            path.write_bytes(gzip.compress(idx_bytes(array, 0x08)))
            files.append(Resource(path.name, md5(path), (path.as_uri(),)))
        resources[split] = tuple(files)
    return Download(resources, download.DOWNLOADS["mnist"].convert), images, labels


def test_download_converts_idx_to_npz_and_load_images_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, images, labels = mnist_like(tmp_path)
    monkeypatch.setitem(download.DOWNLOADS, "kmnist", spec)
    data_dir = tmp_path / "data"
    s = load_images("kmnist", data_dir=data_dir, size=28)
    np.testing.assert_array_equal(s.images[:, 0], images)
    np.testing.assert_array_equal(s.labels, labels.astype(np.int64))
    with np.load(data_dir / "kmnist_test.npz") as npz:
        assert npz["images"].dtype == np.uint8 and npz["labels"].dtype == np.int64
    assert sorted(p.name for p in data_dir.iterdir()) == ["kmnist_test.npz", "raw"]
    # The verified raw files are reused: the train split needs no network.
    for resource in spec.resources["train"]:
        (tmp_path / "src" / resource.filename).unlink()
    monkeypatch.setitem(
        download.DOWNLOADS,
        "kmnist",
        Download(
            {
                "train": tuple(
                    Resource(r.filename, r.md5, ("file:///nowhere",)) for r in spec.resources["test"]
                )
            },
            spec.convert,
        ),
    )
    assert len(load_images("kmnist:train", data_dir=data_dir)) == 6


def test_offline_download_names_the_file_to_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(url: str, timeout: float) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as info:
        load_images("fashion_mnist", data_dir=tmp_path)
    message = str(info.value)
    assert "no network" in message and "fashion_mnist_test.npz" in message and str(tmp_path) in message
    assert "\n" not in message and not (tmp_path / "fashion_mnist_test.npz").exists()
    assert list(tmp_path.iterdir()) == []  # no empty raw/fashion_mnist/ left behind
    fresh = tmp_path / "new-data"
    with pytest.raises(DataError):
        load_images("mnist", data_dir=fresh)
    assert not fresh.exists()  # folders this call created are gone again


def test_cifar10_conversion_keeps_order_and_channel_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    archive = tmp_path / "cifar-10-python.tar.gz"
    batches: dict[str, dict[bytes, Any]] = {}
    with tarfile.open(archive, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            batch = {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), b"labels": [3, 7]}
            batches[name] = batch
            payload = pickle.dumps(batch)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    convert = download.DOWNLOADS["cifar10"].convert
    test_images, test_labels = convert([archive], "test")
    assert test_images.shape == (2, 32, 32, 3) and list(test_labels) == [3, 7]
    data = batches["test_batch"][b"data"]
    assert list(test_images[1, 0, 0]) == [data[1, 0], data[1, 1024], data[1, 2048]]  # R, G, B planes
    train_images, train_labels = convert([archive], "train")
    assert train_images.shape == (10, 32, 32, 3) and train_labels.dtype == np.int64
    np.testing.assert_array_equal(
        train_images[2:4].transpose(0, 3, 1, 2).reshape(2, -1), batches["data_batch_2"][b"data"]
    )


def test_svhn_conversion_maps_label_ten_to_zero(tmp_path: Path) -> None:
    x = np.random.default_rng(3).integers(0, 256, (32, 32, 3, 2), dtype=np.uint8)
    savemat(tmp_path / "test_32x32.mat", {"X": x, "y": np.array([[10], [3]], dtype=np.uint8)})
    images, labels = download.DOWNLOADS["svhn"].convert([tmp_path / "test_32x32.mat"], "test")
    assert images.shape == (2, 32, 32, 3) and list(labels) == [0, 3]
    np.testing.assert_array_equal(images[1], x[..., 1])


def test_download_sources_are_pinned() -> None:
    assert set(download.DOWNLOADS) == {"mnist", "fashion_mnist", "kmnist", "cifar10", "svhn"}
    for spec in download.DOWNLOADS.values():
        for resources in spec.resources.values():
            for r in resources:
                assert len(r.md5) == 32 and r.urls and all(u.startswith("http") for u in r.urls)


def test_unknown_download_source(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no download source"):
        download_dataset("lsun", "test", tmp_path)


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("a pickle ran code",))


def test_a_cifar_batch_that_names_code_is_refused_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        payload = pickle.dumps({b"data": _Payload(), b"labels": [1]})
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(DataError, match=r"may not name builtins\.print"):
        download.DOWNLOADS["cifar10"].convert([archive], "test")
    assert "ran code" not in capsys.readouterr().out


def test_an_unwritable_data_folder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.mkdir

    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        if str(self).startswith(str(tmp_path / "ro")):
            raise PermissionError(13, "Permission denied", str(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(
        DataError, match=r"cannot write to the data folder .*ro: .*Permission denied.*--data-dir$"
    ):
        load_images("mnist", data_dir=tmp_path / "ro", download=True)
