"""Preprocessing must match torchvision-on-PIL: Resize(size), CenterCrop(size), Grayscale, brightness."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from roseood.data.preprocess import (
    adjust_brightness,
    check_options,
    preprocess,
    resize_crop,
    resize_images,
    to_channels,
)
from roseood.errors import DataError


def test_square_images_are_resized_with_pillow_bilinear() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (4, 28, 28), dtype=np.uint8)
    out = resize_images(images, 32)
    assert out.shape == (4, 32, 32) and out.dtype == np.uint8
    expected = np.asarray(Image.fromarray(images[2]).resize((32, 32), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(out[2], expected)


def test_images_already_at_size_are_untouched() -> None:
    images = np.random.default_rng(1).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    assert resize_images(images, 32) is images


def test_non_square_resize_keeps_aspect_then_centre_crops() -> None:
    # 178×218 (CelebA) → shorter side 32, longer int(32 * 218 / 178) = 39 → crop top round(3.5) = 4.
    img = Image.fromarray(np.random.default_rng(2).integers(0, 256, (218, 178, 3), dtype=np.uint8))
    out = resize_crop(img, 32)
    assert out.size == (32, 32)
    expected = img.resize((32, 39), Image.Resampling.BILINEAR).crop((0, 4, 32, 36))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_wide_image_is_cropped_horizontally() -> None:
    img = Image.fromarray(np.random.default_rng(3).integers(0, 256, (20, 50), dtype=np.uint8))
    out = resize_crop(img, 10)  # → 25×10, left = round(7.5) = 8 (Python rounds half to even)
    expected = img.resize((25, 10), Image.Resampling.BILINEAR).crop((8, 0, 18, 10))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_grayscale_uses_itu_601_luma_like_pillow() -> None:
    pixels = np.array([[[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]]]], dtype=np.uint8)
    gray = to_channels(pixels, 1)[0, 0, :, 0]
    np.testing.assert_array_equal(gray, [76, 150, 29, 255])  # 0.299, 0.587, 0.114 of 255, rounded
    rgb = np.random.default_rng(4).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    for i in range(2):
        pil = np.asarray(Image.fromarray(rgb[i]).convert("L"))
        np.testing.assert_array_equal(to_channels(rgb, 1)[i, ..., 0], pil)


def test_gray_to_rgb_repeats_the_channel() -> None:
    gray = np.random.default_rng(5).integers(0, 256, (2, 8, 8), dtype=np.uint8)
    rgb = to_channels(gray, 3)
    assert rgb.shape == (2, 8, 8, 3)
    for c in range(3):
        np.testing.assert_array_equal(rgb[..., c], gray)


def test_brightness_scales_rounds_and_clips() -> None:
    x = np.array([0, 100, 201, 255], dtype=np.uint8)
    np.testing.assert_array_equal(adjust_brightness(x, 1.5), [0, 150, 255, 255])
    np.testing.assert_array_equal(adjust_brightness(x, 0.2), [0, 20, 40, 51])
    assert adjust_brightness(x, 1.0) is x


def test_preprocess_returns_channel_first_uint8() -> None:
    images = np.random.default_rng(6).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    out = preprocess(images, channels=3, size=32, brightness=1.0)
    assert out.shape == (5, 3, 32, 32) and out.dtype == np.uint8 and out.flags.c_contiguous


@pytest.mark.parametrize(
    ("channels", "size", "brightness", "match"),
    [
        (2, 32, 1.0, "channels"),
        (1, 0, 1.0, "size"),
        (1, 32.0, 1.0, "size"),
        (1, 32, 0.0, "brightness"),
        (1, 32, -1.0, "brightness"),
        (1, 32, float("nan"), "brightness"),
    ],
)
def test_invalid_options_raise_data_error(channels: int, size: int, brightness: float, match: str) -> None:
    with pytest.raises(DataError, match=match):
        check_options(channels, size, brightness)


def test_a_preprocessing_passed_as_options_reads_images_its_way(tmp_path: Path) -> None:
    """``load_images(..., **prep.options())`` applies every field (a stretch to 16×24 → 16×16 RGB)."""
    from roseood.data import load_images
    from roseood.data.preprocess import Preprocessing

    wide = np.random.default_rng(3).integers(0, 256, (2, 16, 24), dtype=np.uint8)
    np.savez(tmp_path / "wide.npz", images=wide)
    prep = Preprocessing(channels=3, size=16, resize="stretch")
    got = load_images(tmp_path / "wide.npz", **prep.options()).images
    expected = preprocess(wide, channels=3, size=16, brightness=1.0, resize="stretch")
    assert got.shape == (2, 3, 16, 16)
    np.testing.assert_array_equal(got, expected)
