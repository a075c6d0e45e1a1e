"""load_images on named sets, .npz files, image folders and generated sets, plus every user error."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from roseood.data import DATASETS, ImageSet, list_datasets, load_images, open_images, resolve_data_dir
from roseood.errors import DataError

SHARED = Path(os.environ.get("ROSEOOD_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")


def write_npz(path: Path, images: np.ndarray, labels: np.ndarray | None = None) -> Path:
    arrays = {"images": images} if labels is None else {"images": images, "labels": labels}
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
    return path


def gray_set(n: int = 20) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(42)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), np.arange(n, dtype=np.int64)


def raises_one_line(fn: Callable[[], object], match: str) -> str:
    with pytest.raises(DataError, match=match) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message
    return message


# --- registry and data folder -----------------------------------------------------------------------


def test_registry_lists_every_benchmark_set() -> None:
    expected = {"fashion_mnist", "mnist", "kmnist", "notmnist", "omniglot", "cifar10", "svhn"}
    assert expected | {"celeba", "lsun", "noise", "constant"} == set(list_datasets()) == set(DATASETS)
    assert DATASETS["cifar10"].splits == ("train", "test") and DATASETS["celeba"].splits == ("test",)


def test_resolve_data_dir_prefers_argument_then_env_then_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROSEOOD_DATA", str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv("ROSEOOD_DATA")
    assert resolve_data_dir() == Path.home() / ".cache" / "roseood" / "data"


# --- npz files and named sets -----------------------------------------------------------------------


def test_npz_file_is_resized_and_labelled(tmp_path: Path) -> None:
    images, labels = gray_set()
    path = write_npz(tmp_path / "mine.npz", images, labels)
    s = load_images(str(path))
    assert isinstance(s, ImageSet) and len(s) == 20
    assert s.images.shape == (20, 1, 32, 32) and s.images.dtype == np.uint8
    assert s.labels.dtype == np.int64 and s.name == str(path) and s.source == str(path)
    np.testing.assert_array_equal(s.labels, labels)


def test_subsampling_is_deterministic_sorted_and_done_before_resizing(tmp_path: Path) -> None:
    images, labels = gray_set(50)
    path = write_npz(tmp_path / "mine.npz", images, labels)
    a, b = load_images(str(path), n=7, seed=3), load_images(str(path), n=7, seed=3)
    np.testing.assert_array_equal(a.images, b.images)
    expected = np.sort(np.random.default_rng(3).choice(50, 7, replace=False))
    np.testing.assert_array_equal(a.labels, expected)
    full = load_images(str(path))
    np.testing.assert_array_equal(a.images, full.images[expected])
    assert not np.array_equal(load_images(str(path), n=7, seed=4).labels, a.labels)


def test_n_larger_than_the_set_takes_everything(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "mine.npz", *gray_set(5))
    assert len(load_images(str(path), n=1000)) == 5


def test_missing_labels_become_minus_one_and_rgb_becomes_gray(tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    s = load_images(write_npz(tmp_path / "rgb.npz", rgb), channels=1)
    np.testing.assert_array_equal(s.labels, [-1, -1, -1])
    np.testing.assert_array_equal(s.images[1, 0], np.asarray(Image.fromarray(rgb[1]).convert("L")))
    s3 = load_images(str(tmp_path / "rgb.npz"), channels=3)
    np.testing.assert_array_equal(s3.images, rgb.transpose(0, 3, 1, 2))


def test_named_set_reads_data_dir_and_split_suffix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    images, labels = gray_set()
    write_npz(tmp_path / "notmnist_test.npz", images, labels)
    write_npz(tmp_path / "fashion_mnist_train.npz", images[:4], labels[:4])
    s = load_images("notmnist", data_dir=tmp_path, n=3)
    assert s.name == "notmnist" and s.source == str(tmp_path / "notmnist_test.npz") and len(s) == 3
    t = load_images("fashion_mnist:train", split="test", data_dir=tmp_path, download=False)
    assert t.name == "fashion_mnist:train" and len(t) == 4
    monkeypatch.setenv("ROSEOOD_DATA", str(tmp_path))
    assert len(load_images("Fashion-MNIST", split="train")) == 4


@pytest.mark.skipif(not (SHARED / "mnist_test.npz").is_file(), reason="shared benchmark data not present")
def test_real_mnist_subset() -> None:
    s = load_images("mnist", data_dir=SHARED, n=64, seed=0)
    assert s.images.shape == (64, 1, 32, 32)
    full_labels = np.load(SHARED / "mnist_test.npz")["labels"]
    keep = np.sort(np.random.default_rng(0).choice(len(full_labels), 64, replace=False))
    np.testing.assert_array_equal(s.labels, full_labels[keep])
    assert s.images.max() > 200 and np.median(s.images) < 10  # bright strokes on a dark background
    assert s.title == f"mnist ({s.source})" and str(SHARED / "mnist_test.npz") in s.title  # its file named


# --- generated sets ---------------------------------------------------------------------------------


def test_noise_is_uniform_and_seeded() -> None:
    a = load_images("noise", n=200, seed=3, channels=3, size=16)
    assert a.images.shape == (200, 3, 16, 16) and a.source == "generated (seed 3)"
    np.testing.assert_array_equal(a.images, load_images("noise", n=200, seed=3, channels=3, size=16).images)
    assert a.images.min() == 0 and a.images.max() == 255
    assert abs(float(a.images.mean()) - 127.5) < 2
    assert not np.array_equal(a.images, load_images("noise", n=200, seed=4, channels=3, size=16).images)
    np.testing.assert_array_equal(a.labels, -1)


def test_constant_has_one_value_per_image_and_channel() -> None:
    s = load_images("constant", n=50, channels=3)
    flat = s.images.reshape(50, 3, -1)
    assert (flat == flat[..., :1]).all()
    assert len(np.unique(flat[:, :, 0])) > 20
    assert len(load_images("constant")) == 10000


def test_brightness_applies_to_loaded_images(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "c.npz", np.full((2, 32, 32), 100, dtype=np.uint8))
    assert (load_images(str(path), brightness=1.8).images == 180).all()
    assert (load_images(str(path), brightness=3.0).images == 255).all()


# --- folders ----------------------------------------------------------------------------------------


def test_folder_is_recursive_sorted_and_centre_cropped(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    wide = rng.integers(0, 256, (32, 64, 3), dtype=np.uint8)  # 64 wide × 32 high
    (tmp_path / "b").mkdir()
    Image.fromarray(wide).save(tmp_path / "b" / "wide.png")
    Image.fromarray(np.full((40, 40), 200, dtype=np.uint8)).save(tmp_path / "a.PNG")
    (tmp_path / "notes.txt").write_text("not an image")
    s = load_images(str(tmp_path), channels=3, size=16)
    assert s.images.shape == (2, 3, 16, 16) and s.name == str(tmp_path)
    assert (s.images[0] == 200).all()  # a.PNG sorts before b/wide.png
    expected = Image.fromarray(wide).resize((32, 16), Image.Resampling.BILINEAR).crop((8, 0, 24, 16))
    np.testing.assert_array_equal(s.images[1], np.asarray(expected).transpose(2, 0, 1))
    assert s.title == str(tmp_path)  # a folder is its own source: named once in messages
    one = load_images(str(tmp_path), n=1, seed=0, size=16)
    assert len(one) == 1 and one.images.shape == (1, 1, 16, 16)


# --- errors -----------------------------------------------------------------------------------------


def test_unknown_name_lists_known_sets() -> None:
    message = raises_one_line(lambda: load_images("imagenet"), "neither a known dataset")
    assert "fashion_mnist" in message and "cifar10" in message


def test_unknown_split(tmp_path: Path) -> None:
    raises_one_line(lambda: load_images("notmnist:train", data_dir=tmp_path), "no split 'train'")
    raises_one_line(lambda: load_images("noise", split="train"), "no split")


def test_missing_file_says_what_to_put_where(tmp_path: Path) -> None:
    message = raises_one_line(lambda: load_images("lsun", data_dir=tmp_path), "lsun_test.npz not found")
    assert str(tmp_path) in message and "cannot be downloaded" in message
    message = raises_one_line(
        lambda: load_images("cifar10", data_dir=tmp_path, download=False), "cifar10_test.npz not found"
    )
    assert "download=True" in message


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"x": np.zeros((2, 28, 28), np.uint8)}, "no 'images' array"),
        ({"images": np.zeros((0, 28, 28), np.uint8)}, "empty image set"),
        ({"images": np.zeros((2, 28, 28), np.float32)}, "must be uint8"),
        ({"images": np.zeros((2, 5, 28, 28), np.uint8)}, "shape"),
        ({"images": np.zeros((2, 28, 28), np.uint8), "labels": np.zeros(3, np.int64)}, "'labels' must be 2"),
    ],
)
def test_bad_npz_contents(tmp_path: Path, arrays: dict[str, np.ndarray], match: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    raises_one_line(lambda: load_images(str(path)), match)


def test_corrupt_or_wrong_files(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 a zip's signature, then no zip archive")
    raises_one_line(lambda: load_images(str(tmp_path / "junk.npz")), "cannot read")
    np.save(tmp_path / "floats.npy", np.zeros((2, 28, 28), np.float32))
    raises_one_line(lambda: load_images(str(tmp_path / "floats.npy")), "must be uint8")
    raises_one_line(lambda: load_images(str(tmp_path / "absent.npz")), "nor an existing")


@pytest.mark.parametrize("name", ["junk.npz", "junk.npy"])
def test_random_bytes_are_not_an_array_file_not_pickled_data(tmp_path: Path, name: str) -> None:
    """Random bytes start with neither the zip nor the NumPy signature, which numpy takes for a pickle
    ("pickled (object) data ... allow_pickle="): the line says the file is not a readable array file,
    and never suggests unpickling it."""
    (tmp_path / name).write_bytes(np.random.default_rng(0).bytes(4096))
    message = raises_one_line(
        lambda: load_images(str(tmp_path / name)),
        rf"{name} is not a readable \.npz archive or \.npy array: it starts with neither the zip nor the "
        "NumPy signature",
    )
    assert "pickle" not in message and message.endswith("a folder of image files or a dataset name")


def test_folder_errors(tmp_path: Path) -> None:
    raises_one_line(lambda: load_images(str(tmp_path)), "no image files")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 definitely not a jpeg")
    raises_one_line(lambda: load_images(str(tmp_path)), "cannot read image file .*broken.jpg")


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_invalid_n(n: int) -> None:
    raises_one_line(lambda: load_images("noise", n=n), "n must be a positive integer")


def test_invalid_brightness_is_rejected_before_loading() -> None:
    raises_one_line(lambda: load_images("noise", brightness=0), "brightness must be")


# --- your images at their own resolution: inferred, stated, never silently converted ----------------


def _png(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def test_size_and_channels_left_unset_come_from_the_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(3):
        _png(tmp_path / "colour" / f"{i}.png", rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    s = load_images(tmp_path / "colour", channels=None, size=None)
    assert s.images.shape == (3, 3, 64, 64) and s.conversion is None
    assert s.preprocessing is not None and s.preprocessing.describe() == "64×64 RGB, resize: crop"
    gray = write_npz(tmp_path / "g.npz", rng.integers(0, 256, (4, 28, 28), dtype=np.uint8))
    g = load_images(gray, channels=None, size=None)
    assert g.images.shape == (4, 1, 28, 28) and g.conversion is None
    raises_one_line(lambda: load_images("noise", size=None), "generated: name their channels and size")


def test_every_conversion_is_one_stated_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    for i in range(3):
        _png(tmp_path / "mixed" / f"a{i}.png", rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    _png(tmp_path / "mixed" / "wide.png", rng.integers(0, 256, (60, 80), dtype=np.uint8))
    s = load_images(tmp_path / "mixed", channels=None, size=None)
    assert s.images.shape == (4, 3, 64, 64)  # the most common size; colour since an image has it
    assert s.conversion == (
        "mixed sizes (3 at 64×64, 1 at 80×60) resized (shorter side, bilinear) and centre-cropped to 64×64; "
        "1 of 4 images: grayscale repeated to RGB"
    )
    small = load_images(tmp_path / "mixed", channels=1, size=32, resize="stretch")
    assert (
        small.conversion is not None
        and "stretched" in small.conversion
        and "RGB converted" in small.conversion
    )
    small.state_preprocessing()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{tmp_path / 'mixed'}: mixed sizes")
    s.state_preprocessing()
    assert capsys.readouterr().err.startswith(f"{tmp_path / 'mixed'}: mixed sizes")
    same = load_images(tmp_path / "mixed", channels=3, size=64)
    np.testing.assert_array_equal(same.images, s.images)
    raises_one_line(lambda: load_images(tmp_path / "mixed", resize="squash"), "resize must be one of")


def test_stretch_keeps_the_whole_image(tmp_path: Path) -> None:
    wide = np.zeros((32, 64), np.uint8)
    wide[:, :8] = 255  # a bar on the left edge: cropped away by crop, kept by stretch
    path = write_npz(tmp_path / "w.npz", wide[None])
    assert load_images(path, size=32, resize="crop").images[0, 0, :, 0].max() == 0
    assert load_images(path, size=32, resize="stretch").images[0, 0, :, 0].min() > 200


def test_class_folders_become_labels_and_the_stream_reads_what_load_reads(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    for cls, count in (("dogs", 2), ("cats", 3)):
        for i in range(count):
            _png(tmp_path / cls / "deep" / f"{i}.webp", rng.integers(0, 256, (20, 20, 3), dtype=np.uint8))
    _png(tmp_path / "loose.tiff", rng.integers(0, 256, (20, 20, 3), dtype=np.uint8))
    s = load_images(tmp_path, channels=3, size=None)
    assert s.classes == ("cats", "dogs") and s.files is not None
    assert list(s.labels) == [0, 0, 0, 1, 1, -1] and s.files[0] == "cats/deep/0.webp"
    stream = open_images(tmp_path, channels=3, size=None)
    np.testing.assert_array_equal(np.concatenate([stream.read(0, 4), stream.read(4, 6)]), s.images)
    sub = load_images(tmp_path, channels=3, size=None, n=2, seed=0)
    assert sub.classes == s.classes  # class indices do not depend on the subset


def test_npy_and_channel_first_arrays(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    chw = rng.integers(0, 256, (5, 3, 16, 16), dtype=np.uint8)
    np.save(tmp_path / "chw.npy", chw)
    s = load_images(tmp_path / "chw.npy", channels=None, size=None)
    np.testing.assert_array_equal(s.images, chw)
    np.testing.assert_array_equal(
        load_images(write_npz(tmp_path / "c.npz", chw), channels=3, size=16).images, chw
    )


def test_a_tie_for_the_most_common_size_asks_for_size(tmp_path: Path) -> None:
    """issue 48: two 7-pixel strips and two 32×32 images tied, and the strip's 7 was taken; now the error
    names the tied shapes and --size, and a size given settles it."""
    for i, (h, w) in enumerate([(7, 40), (7, 40), (32, 32), (32, 32), (20, 20)]):
        Image.fromarray(np.full((h, w), 50 * i, np.uint8)).save(tmp_path / f"{i}.png")
    with pytest.raises(DataError, match=r"2 images each at 40×7, 32×32; .*--size S"):
        load_images(tmp_path, size=None)  # size from the data, as the command line's unset --size
    assert load_images(tmp_path, size=32).images.shape == (5, 1, 32, 32)
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(tmp_path / "5.png")  # no tie: the common size
    assert load_images(tmp_path, size=None).images.shape == (6, 1, 32, 32)


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("CelebA:test", "celeba"),
        ("fashion-mnist", "fashion_mnist"),
        (" MNIST :train", "mnist"),
        ("noise", "noise"),
        ("fashion_mnist:train@0-6+8-9", "fashion_mnist"),
    ],
)
def test_a_named_set_is_recognised_however_it_is_written(source, name):
    from roseood.data import dataset_spec

    spec = dataset_spec(source)
    assert spec is not None and spec.name == name


@pytest.mark.parametrize("source", ["my_images/", "celeba_test.npz", "celebA2", "", "mnist@seven"])
def test_anything_else_is_not_a_named_set(source):
    from roseood.data import dataset_spec

    assert dataset_spec(source) is None


# --- a class selection: "@7", "@0-6+8-9" ------------------------------------------------------------


def test_a_class_selection_keeps_those_labels_before_n_draws_and_names_the_set(tmp_path: Path) -> None:
    images, _ = gray_set(30)
    path = write_npz(tmp_path / "s.npz", images, np.arange(30, dtype=np.int64) % 10)
    one = load_images(f"{path}@7")
    assert one.name.endswith("s.npz@7") and list(one.labels) == [7, 7, 7]
    np.testing.assert_array_equal(one.images, load_images(path).images[[7, 17, 27]])
    rest = load_images(f"{path}@0-6+8-9", n=5, seed=1)
    assert len(rest) == 5 and 7 not in rest.labels  # n drawn from the kept classes only
    assert load_images(f"{path}@0-6+8-9", n=5, seed=1).name == rest.name
    assert load_images(f"{path}@3+jpeg75").name.endswith("s.npz@3+jpeg75")  # then a JPEG history


def test_a_class_selection_of_a_folder_counts_its_class_folders_in_sorted_order(tmp_path: Path) -> None:
    for cls, count in (("dogs", 2), ("cats", 3)):
        for i in range(count):
            _png(tmp_path / cls / f"{i}.png", np.full((20, 20), 40 * i, np.uint8))
    dogs = load_images(f"{tmp_path}/@1", size=20)
    assert list(dogs.labels) == [1, 1] and dogs.files == ("dogs/0.png", "dogs/1.png")
    absent = r"no images of class 2; its classes: 0 \(cats\), 1 \(dogs\)"
    raises_one_line(lambda: load_images(f"{tmp_path}/@2"), absent)


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("noise@3", "generated: they have no classes"),
        ("fashion_mnist@5-2", "the range 5-2 runs backwards"),
        ("fashion_mnist@0-99999999999", "spans over 100,000 labels"),  # refused, not expanded
        ("fashion_mnist@seven", r"neither a known dataset .*a class selection is @N"),
        ("fashion_mnist@\u0667", r"neither a known dataset"),  # an Arabic-Indic 7: digits are 0-9
        ("fashion_mnist@7:test", r"one class selection, after the split: NAME\[:SPLIT\]@CLASSES"),
        ("fashion_mnist@7@8", r"one class selection, after the split"),  # was read as @8 alone
    ],
)
def test_a_class_selection_that_cannot_be_made_is_one_line(source: str, match: str) -> None:
    raises_one_line(lambda: load_images(source, n=4), match)


def test_a_class_selection_needs_labels_and_each_class_it_names(tmp_path: Path) -> None:
    images, _ = gray_set(10)
    raises_one_line(lambda: load_images(f"{write_npz(tmp_path / 'u.npz', images)}@1"), "no class labels")
    labelled = write_npz(tmp_path / "l.npz", images, np.arange(10, dtype=np.int64) % 3)
    raises_one_line(lambda: load_images(f"{labelled}@1-4"), "no images of class 3; its classes: 0, 1, 2$")


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5)), min_size=1, max_size=4))
def test_a_class_selection_reads_back_as_the_union_of_its_ranges(ranges: list[tuple[int, int]]) -> None:
    """``@A-B+C+…`` written from any ranges parses to exactly the labels they cover, and a source with it
    splits into the source and the selection."""
    from roseood.data.registry import parse_classes, split_classes

    text = "@" + "+".join(f"{a}-{a + w}" if w else str(a) for a, w in ranges)
    assert parse_classes(text) == {c for a, w in ranges for c in range(a, a + w + 1)}
    assert split_classes(f"my_photos/{text}") == ("my_photos/", text)
