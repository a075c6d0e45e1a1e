"""JPEG histories: parsing, the round-trip, and finding a history in decoded pixels."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from roseood.data import load_images, open_images
from roseood.data.jpeg import JpegHistory, estimate_history, history_of, residual, split_suffix
from roseood.errors import DataError


def photos(n: int = 16, size: int = 32, seed: int = 0) -> np.ndarray:
    """Smooth colour fields with texture: photo-like pixels that never went through JPEG (uint8 NHWC)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = []
    for _ in range(n):
        a, b, c = rng.uniform(-1, 1, (3, 3, 1, 1))
        base = 128 + 90 * np.sin(3 * a * xx + 2 * b * yy + c)
        out.append(np.clip(base + rng.normal(0, 12, (3, size, size)), 0, 255).transpose(1, 2, 0))
    return np.asarray(out).astype(np.uint8)


@pytest.mark.parametrize(
    ("text", "history"),
    [
        ("75", JpegHistory(75, "4:2:0")),
        ("75:4:4:4", JpegHistory(75, "4:4:4")),
        ("90:422", JpegHistory(90, "4:2:2")),
    ],
)
def test_parse_reads_quality_and_subsampling(text: str, history: JpegHistory) -> None:
    assert JpegHistory.parse(text) == history


@pytest.mark.parametrize("text", ["", "high", "0", "101", "75:4:1:1", "75:x"])
def test_parse_refuses_in_one_line(text: str) -> None:
    with pytest.raises(DataError, match="JPEG"):
        JpegHistory.parse(text)


def test_tag_and_suffix_are_inverse() -> None:
    for history in (JpegHistory(75), JpegHistory(90, "4:4:4"), JpegHistory(5, "4:2:2")):
        assert split_suffix("celeba" + history.tag()) == ("celeba", history)
    assert split_suffix("celeba") == ("celeba", None)


def test_a_decoded_jpeg_is_a_fixed_point_of_its_history_and_not_of_others() -> None:
    """The property every check rests on: one more round-trip through the same history changes a
    decoded JPEG by well under a level, and changes photos that never went through it by several."""
    x = photos()
    once = JpegHistory(75).apply(x)
    assert residual(once, JpegHistory(75)) < 0.3
    assert residual(x, JpegHistory(75)) > 2.0
    assert residual(once, JpegHistory(60)) > 1.0


@pytest.mark.parametrize("history", [JpegHistory(75), JpegHistory(40, "4:4:4"), JpegHistory(90)])
def test_estimate_finds_the_history_of_decoded_photos(history: JpegHistory) -> None:
    assert estimate_history(history.apply(photos())) == history


def test_estimate_finds_none_in_photos_or_noise_never_compressed() -> None:
    rng = np.random.default_rng(1)
    assert estimate_history(photos()) is None
    assert estimate_history(rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)) is None
    assert estimate_history(photos(size=8)) is None  # smaller than two blocks: nothing to see


@pytest.mark.parametrize("level", [0, 17, 90, 128, 255])
def test_flat_images_show_no_history_and_are_left_out_of_a_mixed_set(level: int) -> None:
    """A flat block survives any round-trip up to a level of rounding: a flat set was read as quality
    30-36 (every level here). Left out, they neither make a history nor hide one."""
    flat = np.full((16, 32, 32, 3), level, np.uint8)
    assert estimate_history(flat) is None and estimate_history(flat[..., 0]) is None
    tiles = np.repeat(np.repeat(np.arange(16, dtype=np.uint8).reshape(1, 4, 4, 1) * 15, 8, 1), 8, 2)
    assert estimate_history(np.repeat(tiles, 16, 0)) is None  # flat in every 8×8 block, not overall
    decoded = JpegHistory(75).apply(photos())
    assert estimate_history(np.concatenate([flat, decoded])) == JpegHistory(75)


def test_an_estimate_is_remembered_by_the_images_not_by_the_array(monkeypatch) -> None:
    """The same pixels ask again without a round-trip (an evaluation's sets, a bench's dozens of them);
    other pixels, even in the same array object changed in place, are searched afresh."""
    import roseood.data.jpeg as jpeg

    x = JpegHistory(75).apply(photos(seed=3))
    assert estimate_history(x) == JpegHistory(75)
    calls = []
    monkeypatch.setattr(jpeg, "residual", lambda *a: calls.append(1) or 5.0)
    assert estimate_history(x.copy()) == JpegHistory(75) and not calls
    x[:] = photos(seed=3)  # in place: never compressed now
    assert estimate_history(x) is None and calls


def test_history_of_reads_a_jpeg_header() -> None:
    buf = io.BytesIO()
    Image.fromarray(photos(1)[0]).save(buf, "JPEG", quality=85, subsampling=0)
    with Image.open(buf) as img:
        assert history_of(img) == JpegHistory(85, "4:4:4")
    buf = io.BytesIO()
    Image.fromarray(photos(1)[0]).save(buf, "PNG")
    with Image.open(buf) as img:
        assert history_of(img) is None


def test_a_source_suffix_applies_the_round_trip_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "photos.npz"
    np.savez(path, images=photos())
    plain = load_images(str(path), channels=3, size=32)
    matched = open_images(f"{path}+jpeg75", channels=3, size=32)
    assert matched.name.endswith("+jpeg75") and "JPEG round-trip (quality 75, 4:2:0 chroma)" in str(
        matched.conversion
    )
    x = matched.read(0, len(matched))
    expected = JpegHistory(75).apply(plain.images.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(x, expected)


def test_a_path_named_like_a_suffix_is_the_path(tmp_path: Path) -> None:
    path = tmp_path / "set+jpeg75.npz"
    np.savez(path, images=photos(4))
    s = open_images(str(path), channels=3, size=32)
    assert s.conversion is None


def test_grayscale_sets_take_the_round_trip_in_gray(tmp_path: Path) -> None:
    path = tmp_path / "gray.npz"
    np.savez(path, images=photos(4)[..., 0])
    x = load_images(str(path), channels=1, size=32, jpeg=JpegHistory(80)).images
    assert x.shape == (4, 1, 32, 32)
    expected = JpegHistory(80).apply(photos(4)[..., 0])
    np.testing.assert_array_equal(x[:, 0], expected)


def test_generated_sets_and_two_histories_are_refused() -> None:
    with pytest.raises(DataError, match="generated"):
        open_images("noise+jpeg75", channels=1, size=32)
    with pytest.raises(DataError, match="two JPEG round-trips"):
        open_images("mnist+jpeg75", channels=1, size=32, jpeg=JpegHistory(90))
