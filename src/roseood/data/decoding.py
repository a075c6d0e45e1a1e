"""One image file to 8-bit RGB pixels, with every conversion that takes named before any pixel is used.

Pillow decodes a file to a *mode*; roseood's models take 8-bit pixels. ``inspect`` reads what a file
needs from its header (and, for 32-bit integer and float images, their values), ``float_scale`` picks
one rule for the float images of a set, and ``decode`` makes the conversions:

- 16-bit (PNG, TIFF; gray or colour) → 8-bit by the high byte, ``x >> 8``: 65535 → 255, and exact for
  8-bit images saved as 16-bit (``×257`` or ``<< 8``). Pillow does the same for 16-bit colour PNGs.
  32-bit integer images are read the same way when their values lie in 0–65535, refused otherwise.
- float (32-bit TIFF) → one rule for the whole set, from its values: all in [0, 1] → ``×255``, all in
  [0, 255] → as they are; rounded. Values outside [0, 255], NaN or infinity are refused.
- alpha (RGBA, LA, PA, a palette or colour key with transparency) → composited over white, as image
  viewers on a white page and ImageMagick's ``-flatten`` show it: a fully transparent image is white.
- palette → its colours; 1-bit → 0/255; CMYK, YCbCr, LAB, HSV → RGB by Pillow's formulas (embedded
  colour profiles are not applied, as in torchvision).
- EXIF orientation → rotated or flipped upright (``ImageOps.exif_transpose``); animations → first frame.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import ExifTags, Image, ImageOps

from roseood.errors import DataError

SIXTEEN_BIT = frozenset({"I;16", "I;16B", "I;16L", "I;16N"})
WIDE = SIXTEEN_BIT | {"I", "F"}  # modes whose pixels are not 8-bit: converted by roseood itself
GRAY = frozenset({"1", "L", "LA"}) | WIDE
OTHER_COLOUR = frozenset({"CMYK", "YCbCr", "LAB", "HSV"})  # converted to RGB by Pillow
SUPPORTED = GRAY | OTHER_COLOUR | {"P", "PA", "RGB", "RGBA", "RGBa", "RGBX"}
WHITE = (255, 255, 255, 255)
TURNS = frozenset({5, 6, 7, 8})  # EXIF orientations that swap width and height

FIRST_FRAME = "first frame of an animation"
UPRIGHT = "rotated upright by their EXIF orientation"
HIGH_BYTE = "16-bit read as 8-bit (high byte)"
WIDE_INT = "32-bit integers (0–65535) read as 16-bit, then 8-bit (high byte)"
ONE_BIT = "1-bit read as 0/255"
PALETTE = "palette colours looked up"
ALPHA = "alpha composited over white"


def step_rank(step: str) -> int:
    """Where a step comes in decoding (frame, orientation, pixel values, alpha), to state them in order."""
    return {FIRST_FRAME: 0, UPRIGHT: 1, ALPHA: 3}.get(step, 2)


@dataclass(frozen=True)
class Header:
    """What one image file is: ``size`` (height, width) once upright, whether it has ``colour``, the
    conversions it needs, named (``steps``; a float image's is added by ``float_scale``), and the
    (min, max) of its ``values`` for 32-bit integer and float images."""

    size: tuple[int, int]
    colour: bool
    steps: tuple[str, ...]
    values: tuple[float, float] | None = None
    floating: bool = False


def orientation(img: Image.Image) -> int:
    """The EXIF orientation (1: upright), read from the header only (a PNG's EXIF after its pixels
    is not looked for, so the statement and the decoding agree without decoding twice)."""
    if img.format == "PNG" and "exif" not in img.info:
        return 1
    value = img.getexif().get(ExifTags.Base.Orientation, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _rawmode(img: Image.Image) -> str:
    """How the file stores its pixels (e.g. "RGB;16B"), before they are loaded."""
    tiles = getattr(img, "tile", None)
    args = tiles[0].args if tiles else None
    return str(args[0] if isinstance(args, tuple) and args else args or "")


def inspect(img: Image.Image, file: Path) -> Header:
    """The ``Header`` of an opened, not yet decoded image; DataError for a mode roseood cannot read
    or a 32-bit integer or float image whose values it cannot place in 0–255."""
    mode = img.mode
    if mode not in SUPPORTED:
        raise DataError(f"cannot read image file {file}: Pillow mode {mode} is not supported")
    steps = []
    if getattr(img, "is_animated", False):
        steps.append(FIRST_FRAME)
    turn = orientation(img)
    if turn != 1:
        steps.append(UPRIGHT)
    if mode in SIXTEEN_BIT or (mode not in WIDE and ";16" in _rawmode(img)):
        steps.append(HIGH_BYTE)
    elif mode == "I":
        steps.append(WIDE_INT)
    elif mode == "1":
        steps.append(ONE_BIT)
    elif mode in ("P", "PA"):
        steps.append(PALETTE)
    elif mode in OTHER_COLOUR:
        steps.append(f"{mode} converted to RGB{' (no colour profile)' if mode == 'CMYK' else ''}")
    if img.has_transparency_data:
        steps.append(ALPHA)
    values = _values(img, file) if mode in ("I", "F") else None
    size = (img.width, img.height) if turn in TURNS else (img.height, img.width)
    return Header(size, mode not in GRAY, tuple(steps), values, mode == "F")


def _values(img: Image.Image, file: Path) -> tuple[float, float]:
    """(min, max) of a 32-bit integer or float image, refused when 0–255 cannot hold them."""
    pixels = np.asarray(img)
    if not np.isfinite(pixels).all():
        raise DataError(f"cannot read image file {file}: its float pixels include NaN or infinity")
    lo, hi = (float(pixels.min()), float(pixels.max())) if pixels.size else (0.0, 0.0)
    top = 255.0 if img.mode == "F" else 65535.0
    if lo < 0 or hi > top:
        kind = "float" if img.mode == "F" else "32-bit integer"
        raise DataError(
            f"cannot read image file {file}: its {kind} pixels span [{lo:g}, {hi:g}], outside "
            f"[0, {top:g}]; save it as 8- or 16-bit, or as float in [0, 1] or [0, 255]"
        )
    return lo, hi


def float_scale(headers: Iterable[Header]) -> tuple[float, str | None]:
    """The factor that takes every float image of a set to 0–255, and the step that names it: ``×255``
    when all values lie in [0, 1], 1 when some exceed 1 (``inspect`` refused anything beyond 255)."""
    ranges = [h.values for h in headers if h.floating and h.values is not None]
    if not ranges:
        return 1.0, None
    lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
    span = f"float values ({lo:.3g}–{hi:.3g})"
    if hi <= 1:
        return 255.0, f"{span} scaled from 0–1 to 0–255"
    return 1.0, f"{span} read as 0–255, rounded"


def decode(img: Image.Image, scale: float) -> Image.Image:
    """The 8-bit RGB image the steps ``inspect`` named make of ``img``; ``scale``: ``float_scale``'s."""
    if orientation(img) != 1:
        img = ImageOps.exif_transpose(img)
    if img.mode in WIDE:
        pixels = np.asarray(img)
        if img.mode == "F":
            eight = np.clip(np.rint(np.nan_to_num(pixels) * scale), 0, 255)
        else:
            eight = np.clip(pixels.astype(np.int64), 0, 65535) >> 8
        key = img.info.get("transparency")  # a 16-bit PNG's colour key: that value is transparent
        if isinstance(key, int):
            eight[pixels == key] = 255
        return Image.fromarray(eight.astype(np.uint8)).convert("RGB")
    if img.has_transparency_data:
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, WHITE), rgba).convert("RGB")
    return img.convert("RGB")
