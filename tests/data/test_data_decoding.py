"""Image files of every mode, bit depth and alpha read as their real 8-bit pixels, each conversion stated:
each kind of file is written with random pixels (hypothesis) and read through ``load_images``; the
result is compared with the pixels computed here by the rule the docs state, and the one-line
conversion with the step that rule names."""

from __future__ import annotations

import io
import struct
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from roseood.data import load_images
from roseood.data.decoding import ALPHA, FIRST_FRAME, HIGH_BYTE, ONE_BIT, PALETTE, UPRIGHT, WIDE_INT, inspect
from roseood.errors import DataError

EXAMPLES = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
Pixels = np.ndarray
Kind = Callable[[Pixels, Path], tuple[Pixels, str | None]]  # random uint8 (s, s, 4) → expected, step


def png16(path: Path, pixels: np.ndarray) -> None:
    """A 16-bit gray, gray+alpha, RGB or RGBA PNG (Pillow writes only 16-bit gray): (h, w[, c]) uint16."""
    h, w = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    colour_type = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    rows = pixels.astype(">u2").reshape(h, w * channels)
    raw = b"".join(b"\0" + row.tobytes() for row in rows)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def image(mode: str, pixels: np.ndarray) -> Image.Image:
    """``pixels`` (h, w[, c]) uint8 as an image of ``mode`` (``fromarray`` guesses the mode)."""
    return Image.frombytes(mode, (pixels.shape[1], pixels.shape[0]), np.ascontiguousarray(pixels).tobytes())


def over_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.astype(np.float64)[..., None] / 255
    return rgb.astype(np.float64) * a + 255 * (1 - a)


def gray8(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    Image.fromarray(x[..., 0]).save(path.with_suffix(".png"))
    return x[..., 0], None


def gray16(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    wide = x[..., 0].astype(np.uint16) << 8 | x[..., 1]  # every 16-bit value, not only 8-bit ones scaled
    if x[0, 0, 2] % 3 == 0:
        Image.fromarray(wide).save(path.with_suffix(".tif"))
        return x[..., 0], HIGH_BYTE
    if x[0, 0, 2] % 3 == 1:
        Image.fromarray(wide).save(path.with_suffix(".png"))
        return x[..., 0], HIGH_BYTE
    Image.fromarray(wide).save(path.with_suffix(".png"), transparency=int(wide[0, 0]))  # a colour key
    return np.where(wide == wide[0, 0], 255, x[..., 0]), f"{HIGH_BYTE}; {ALPHA}"


def colour16(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    channels = 3 + x[0, 0, 3] % 2  # RGB or RGBA
    wide = x[..., :channels].astype(np.uint16) * 257
    png16(path.with_suffix(".png"), wide)
    if channels == 3:
        return x[..., :3], HIGH_BYTE
    return over_white(x[..., :3], x[..., 3]), f"{HIGH_BYTE}; {ALPHA}"


def int32(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    Image.fromarray((x[..., 0].astype(np.int32) << 8) + x[..., 1]).save(path.with_suffix(".tif"))
    return x[..., 0], WIDE_INT


def float01(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    values = (x[..., 0] / 255).astype(np.float32)
    Image.fromarray(values).save(path.with_suffix(".tif"))
    return np.rint(values * np.float32(255)), "scaled from 0–1 to 0–255"


def float255(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    values = np.minimum(x[..., 0] + x[..., 1] / 256, 255).astype(np.float32)
    values[0, 0] = 2.5  # some value above 1: the set is read as 0–255
    Image.fromarray(values).save(path.with_suffix(".tif"))
    return np.rint(values), "read as 0–255, rounded"


def rgba(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    x = x.copy()
    x[0, 0, 3] %= 255  # not all opaque, or a WebP encoder may leave out the alpha channel
    Image.fromarray(x).save(path.with_suffix(".png" if x[0, 0, 0] % 2 else ".webp"), lossless=True)
    return over_white(x[..., :3], x[..., 3]), ALPHA


def gray_alpha(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    image("LA", x[..., [0, 3]]).save(path.with_suffix(".png"))
    return over_white(x[..., :1], x[..., 3])[..., 0], ALPHA


def palette(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    colours = np.random.default_rng(int(x[0, 0, 0])).integers(0, 256, (256, 3), dtype=np.uint8)
    img = image("P", x[..., 0])
    img.putpalette(colours.tobytes())
    clear = int(x[0, 0, 1])  # the palette index that is transparent
    transparent = x[0, 0, 2] % 2 == 1
    img.save(path.with_suffix(".png"), **({"transparency": clear} if transparent else {}))
    expected = colours[x[..., 0]].astype(np.float64)
    if not transparent:
        return expected, PALETTE
    expected[x[..., 0] == clear] = 255
    return expected, f"{PALETTE}; {ALPHA}"


def one_bit(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    Image.fromarray(x[..., 0] > 127).save(path.with_suffix(".png"))
    return np.where(x[..., 0] > 127, 255, 0), ONE_BIT


def cmyk(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    image("CMYK", x).save(path.with_suffix(".tif"))
    k = 255 - x[..., 3:].astype(np.float64)
    return (255 - x[..., :3].astype(np.float64)) * k / 255, "CMYK converted to RGB (no colour profile)"


UPRIGHTS = {  # EXIF orientation → what makes the stored pixels upright
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.T,
    6: lambda a: np.rot90(a, -1),
    7: lambda a: a[::-1, ::-1].T,
    8: lambda a: np.rot90(a),
}


def rotated(x: Pixels, path: Path) -> tuple[Pixels, str | None]:
    turn = 2 + int(x[0, 0, 1]) % 7
    exif = Image.Exif()
    exif[0x0112] = turn
    Image.fromarray(x[..., 0]).save(path.with_suffix(".png" if x[0, 0, 2] % 2 else ".tif"), exif=exif)
    return UPRIGHTS[turn](x[..., 0]), UPRIGHT


KINDS: dict[str, Kind] = {
    f.__name__: f
    for f in (gray8, gray16, colour16, int32, float01, float255, rgba, gray_alpha, palette, one_bit, cmyk)
} | {"rotated": rotated}
TOLERANCE = {"rgba": 0.5, "gray_alpha": 0.5, "colour16": 0.5, "cmyk": 0.5}  # Pillow's rounding


@pytest.mark.parametrize("kind", sorted(KINDS))
@EXAMPLES
@given(size=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
def test_every_kind_of_image_file_reads_as_its_real_pixels_and_says_how(
    tmp_path: Path, kind: str, size: int, seed: int
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis may repeat an example
    x = np.random.default_rng(seed).integers(0, 256, (size, size, 4), dtype=np.uint8)
    expected, step = KINDS[kind](x, folder / "image")
    s = load_images(folder, channels=None, size=None)
    got = s.images[0].transpose(1, 2, 0)
    want = expected if expected.ndim == 3 else expected[..., None]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=TOLERANCE.get(kind, 0))
    if step is None:
        assert s.conversion is None
    else:
        assert s.conversion is not None and s.conversion.endswith(step), (s.conversion, step)
        assert s.conversion.count(";") == step.count(";")  # nothing else: no resizing, no channels


@EXAMPLES
@given(x=st.binary(min_size=48, max_size=48), shift=st.booleans())
def test_an_8_bit_image_saved_as_16_bit_reads_back_exactly(tmp_path: Path, x: bytes, shift: bool) -> None:
    pixels = np.frombuffer(x, np.uint8).reshape(4, 4, 3)
    eight, wide = tmp_path / "8", tmp_path / "16"
    eight.mkdir(exist_ok=True)
    wide.mkdir(exist_ok=True)
    Image.fromarray(pixels).save(eight / "a.png")
    png16(wide / "a.png", pixels.astype(np.uint16) << 8 if shift else pixels.astype(np.uint16) * 257)
    np.testing.assert_array_equal(load_images(wide, size=None).images, load_images(eight, size=None).images)


def test_a_fully_transparent_image_is_white_not_its_hidden_colours(tmp_path: Path) -> None:
    hidden = np.zeros((8, 8, 4), np.uint8)
    hidden[..., 0] = 200  # red under alpha 0
    Image.fromarray(hidden).save(tmp_path / "clear.png")
    s = load_images(tmp_path, channels=3, size=None)
    assert (s.images == 255).all() and s.conversion == ALPHA
    Image.fromarray(np.full((8, 8), 300, np.uint16)).save(tmp_path / "clear.png", transparency=300)
    s = load_images(tmp_path, channels=3, size=None)  # a 16-bit PNG whose one value is its colour key
    assert (s.images == 255).all() and s.conversion == f"{HIGH_BYTE}; {ALPHA}; grayscale repeated to RGB"


def test_exif_rotation_swaps_the_size_before_the_size_is_chosen(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    for i in range(2):
        Image.fromarray(np.zeros((20, 30), np.uint8)).save(tmp_path / f"{i}.jpg", exif=exif)
    Image.fromarray(np.zeros((30, 20), np.uint8)).save(tmp_path / "upright.png")
    s = load_images(tmp_path, channels=None, size=None, resize="stretch")
    assert s.images.shape == (3, 1, 20, 20)  # all three are 20 wide, 30 tall once upright
    assert (
        s.conversion
        == f"2 of 3 images: {UPRIGHT}; 20×30 stretched (bilinear, aspect ratio not kept) to 20×20"
    )


def test_a_mixed_folder_states_each_step_with_its_count_in_decoding_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (16, 16, 4), dtype=np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(rng.integers(0, 65536, (16, 16), dtype=np.uint16)).save(tmp_path / "b.png")
    Image.fromarray(rng.random((16, 16), dtype=np.float32)).save(tmp_path / "c.tif")
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "d.png")
    s = load_images(tmp_path, channels=None, size=None)
    with Image.open(tmp_path / "c.tif") as img:
        low, high = (f"{v:.3g}" for v in img.getextrema())
    assert s.conversion == (
        f"1 of 4 images: {HIGH_BYTE}; 1 of 4 images: float values ({low}–{high}) scaled from 0–1 to 0–255; "
        f"1 of 4 images: {ALPHA}; 2 of 4 images: grayscale repeated to RGB"
    )


@pytest.mark.parametrize(
    ("pixels", "match"),
    [
        (np.array([[0.5, np.nan]], np.float32), r"b\.tif: its float pixels include NaN or infinity"),
        (np.array([[0.5, np.inf]], np.float32), "NaN or infinity"),
        (np.array([[-1.0, 1.0]], np.float32), r"float pixels span \[-1, 1\], outside \[0, 255\]"),
        (
            np.array([[0.0, 300.0]], np.float32),
            r"span \[0, 300\], outside \[0, 255\]; save it as 8- or 16-bit",
        ),
        (np.array([[0, 70000]], np.int32), r"32-bit integer pixels span \[0, 70000\], outside \[0, 65535\]"),
        (np.array([[-5, 7]], np.int32), r"32-bit integer pixels span \[-5, 7\]"),
    ],
)
def test_values_that_have_no_place_in_0_255_are_refused_in_one_line(
    tmp_path: Path, pixels: np.ndarray, match: str
) -> None:
    Image.fromarray(np.zeros((1, 2), np.uint8)).save(tmp_path / "a.png")
    Image.fromarray(pixels).save(tmp_path / "b.tif")
    with pytest.raises(DataError, match=match) as caught:
        load_images(tmp_path, size=None)
    assert "\n" not in str(caught.value) and str(tmp_path / "b.tif") in str(caught.value)


def test_a_mode_roseood_cannot_read_is_refused_by_name() -> None:
    with pytest.raises(DataError, match=r"x\.png: Pillow mode La is not supported"):
        inspect(Image.new("La", (2, 2)), Path("x.png"))


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")  # Pillow's note on the TIFF cut inside its header
@pytest.mark.parametrize("suffix", [".tif", ".png"])
def test_a_file_cut_short_is_one_line_naming_it_whether_its_header_or_its_pixels_break(
    tmp_path: Path, suffix: str
) -> None:
    values = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    whole = io.BytesIO()
    Image.fromarray(values if suffix == ".tif" else (values * 65535).astype(np.uint16)).save(
        whole, format=suffix[1:].replace("tif", "tiff")
    )
    for cut in (40, len(whole.getvalue()) // 2):  # inside the header; inside the pixels
        (tmp_path / f"cut{suffix}").write_bytes(whole.getvalue()[:cut])
        with pytest.raises(DataError, match=rf"^cannot read image file \S*cut\{suffix}: ") as caught:
            load_images(tmp_path, size=None).images.sum()
        assert "\n" not in str(caught.value) and str(caught.value).count("cannot read") == 1


def test_an_animation_is_read_as_its_first_frame_and_other_colour_spaces_are_named(tmp_path: Path) -> None:
    frames = [Image.fromarray(np.full((8, 8), v, np.uint8)) for v in (10, 200)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    s = load_images(tmp_path, channels=None, size=None)
    assert (s.images == 10).all() and s.conversion == f"{FIRST_FRAME}; {PALETTE}"
    (tmp_path / "anim.gif").unlink()
    Image.new("LAB", (8, 8), (50, 0, 0)).save(tmp_path / "lab.tif")
    assert load_images(tmp_path, channels=None, size=None).conversion == "LAB converted to RGB"
