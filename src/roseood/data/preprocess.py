"""Image preprocessing that reproduces the authors' torchvision pipeline on uint8 arrays.

Order: ``Resize(size)`` (shorter side to ``size``, Pillow bilinear, antialiased when shrinking) →
``CenterCrop(size)`` → channel conversion (``Grayscale`` luma or channel repeat) → a JPEG round-trip where
one is asked for (``roseood.data.jpeg``) → brightness.
Arrays are channel-last ``(N, H, W)`` or ``(N, H, W, 3)`` until the final ``(N, C, size, size)``.
A ``Preprocessing`` names what a model was trained with; ``describe_conversion`` says in one line what
it does to a given set of images (nothing is converted silently).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt
from PIL import Image

from roseood.catalogue import RESIZE_METHODS
from roseood.data.jpeg import JpegHistory
from roseood.errors import DataError

U8 = npt.NDArray[np.uint8]


CHANNEL_NAMES = {1: "grayscale", 3: "RGB"}


class PreprocessingOptions(TypedDict, total=False):
    """A ``Preprocessing`` as the keyword arguments of ``load_images`` / ``open_images`` / ``preprocess``."""

    channels: int | None
    size: int | None
    resize: str


@dataclass(frozen=True)
class Preprocessing:
    """What every image goes through before a model sees it: ``size``×``size`` pixels, ``channels``
    (1 gray, 3 RGB), resized by ``resize``: "crop" (shorter side to ``size``, then a centre crop: the
    paper's torchvision pipeline) or "stretch" (both sides to ``size``, aspect ratio not kept).
    Checkpoints store it; scoring, fitting and evaluating with the model apply it again."""

    channels: int = 1
    size: int = 32
    resize: str = "crop"

    def __post_init__(self) -> None:
        check_options(self.channels, self.size, 1.0)
        if self.resize not in RESIZE_METHODS:
            raise DataError(f"resize must be one of {', '.join(RESIZE_METHODS)}, got {self.resize!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def options(self) -> PreprocessingOptions:
        """These settings as keyword arguments: ``load_images(source, **prep.options())``."""
        return PreprocessingOptions(channels=self.channels, size=self.size, resize=self.resize)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Preprocessing:
        return cls(**{k: d[k] for k in ("channels", "size", "resize") if k in d})

    def describe(self) -> str:
        """E.g. "64×64 RGB, resize: crop"."""
        return f"{self.size}×{self.size} {CHANNEL_NAMES[self.channels]}, resize: {self.resize}"


def _counted(counts: Mapping[Any, int], show: Any) -> str:
    """ "12 at 64×64, 3 at 80×60" for the three most common keys (most common first)."""
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{n} at {show(k)}" for k, n in top[:3])
    return text + (f", {len(top) - 3} more sizes" if len(top) > 3 else "")


def describe_conversion(
    shapes: Mapping[tuple[int, int], int],
    channels: Mapping[int, int],
    prep: Preprocessing,
    decoding: Mapping[str, int] | None = None,
) -> str | None:
    """One line saying what decoding (named steps, with how many images take each) and then ``prep`` do
    to images with these counts per (height, width) and per channel count, or None when they already are
    what it makes (no conversion)."""

    def wh(hw: tuple[int, int]) -> str:
        return f"{hw[1]}×{hw[0]}"

    total = sum(channels.values())

    def of(n: int) -> str:
        return "" if n == total else f"{n} of {total} images: "

    parts = [of(n) + step for step, n in (decoding or {}).items()]
    target = (prep.size, prep.size)
    if set(shapes) != {target}:
        source = wh(next(iter(shapes))) if len(shapes) == 1 else f"mixed sizes ({_counted(shapes, wh)})"
        if prep.resize == "stretch":
            how = "stretched (bilinear, aspect ratio not kept)"
        elif all(h == w for h, w in shapes):
            how = "resized (bilinear)"
        else:
            how = "resized (shorter side, bilinear) and centre-cropped"
        parts.append(f"{source} {how} to {wh(target)}")
    other = {c: n for c, n in channels.items() if c != prep.channels}
    if other:
        how = "RGB converted to grayscale (luma)" if prep.channels == 1 else "grayscale repeated to RGB"
        parts.append(of(sum(other.values())) + how)
    return "; ".join(parts) or None


def resize_crop(image: Image.Image, size: int, resize: str = "crop") -> Image.Image:
    """Torchvision ``Resize(size)`` then ``CenterCrop(size)`` on one PIL image (``resize="stretch"``:
    both sides to ``size`` instead).

    The shorter side becomes ``size`` and the longer one ``int(size * long / short)`` (torchvision's
    integer rule); the crop offset is ``int(round((h - size) / 2.0))`` as in ``CenterCrop``.
    """
    w, h = image.size
    if resize == "stretch":
        return image if (w, h) == (size, size) else image.resize((size, size), Image.Resampling.BILINEAR)
    if min(w, h) != size:
        if w <= h:
            new_w, new_h = size, int(size * h / w)
        else:
            new_w, new_h = int(size * w / h), size
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
        w, h = new_w, new_h
    if (w, h) != (size, size):
        top = round((h - size) / 2.0)
        left = round((w - size) / 2.0)
        image = image.crop((left, top, left + size, top + size))
    return image


def resize_images(images: U8, size: int, resize: str = "crop") -> U8:
    """Apply :func:`resize_crop` to every image of a ``(N, H, W)`` or ``(N, H, W, 3)`` uint8 array.

    Returns the input unchanged when it already is ``size``×``size`` (Pillow would copy it as is).
    """
    if images.shape[1:3] == (size, size):
        return images
    out = np.empty((images.shape[0], size, size, *images.shape[3:]), dtype=np.uint8)
    for i, img in enumerate(images):
        out[i] = np.asarray(resize_crop(Image.fromarray(img), size, resize))
    return out


def to_channels(images: U8, channels: int) -> U8:
    """Convert channel-last uint8 images to ``channels`` (1 or 3), returned as ``(N, H, W, channels)``.

    RGB → gray uses Pillow's ``convert("L")`` integer luma (ITU-R 601-2, 0.299 R + 0.587 G + 0.114 B
    in 16-bit fixed point with rounding), bit-exact with torchvision's ``Grayscale`` on PIL images;
    gray → RGB repeats the channel.
    """
    if images.ndim == 3:
        images = images[..., None]
    if images.shape[-1] == channels:
        return images
    if channels == 3:
        return np.repeat(images, 3, axis=-1)
    rgb = images.astype(np.uint32)
    luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    return luma.astype(np.uint8)[..., None]


def adjust_brightness(images: U8, factor: float) -> U8:
    """Scale pixel values by ``factor``: ``clip(round(x * factor), 0, 255)``; ``factor == 1`` is a no-op."""
    if factor == 1.0:
        return images
    return np.clip(np.rint(images * factor), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class Wanted:
    """The preprocessing a loader is asked for (None channels or size: from the data), refused when made if
    it cannot be honoured; ``resolve`` fixes it for the images found, ``finish`` applies it."""

    channels: int | None
    size: int | None
    resize: str
    brightness: float
    jpeg: JpegHistory | None = None

    def __post_init__(self) -> None:
        check_options(self.channels or 1, self.size or 1, self.brightness)
        Preprocessing(self.channels or 1, self.size or 1, self.resize)  # refuses an unknown resize method

    def resolve(
        self,
        shapes: Counter[tuple[int, int]],
        colours: Counter[int],
        decoding: Mapping[str, int] | None = None,
    ) -> tuple[Preprocessing, str | None]:
        """The preprocessing for images with these (height, width) and channel counts, and the one-line
        conversion it makes, after the ``decoding`` steps (counted per image) that files need:
        channels 3 if any image has colour, size the shorter side of the most common shape; where shapes
        of different sizes tie for most common, a one-line ``DataError`` asks for a size."""
        channels = self.channels or (3 if colours[3] else 1)
        if self.size is not None:
            size = self.size
        else:
            top = max(shapes.values())
            sizes = sorted({min(hw) for hw, count in shapes.items() if count == top})
            if len(sizes) > 1:
                tied = ", ".join(f"{w}×{h}" for (h, w), count in sorted(shapes.items()) if count == top)
                raise DataError(
                    f"no single most common image size: {top} image{'s' * (top > 1)} each at {tied}; "
                    "choose the size to bring them to with --size S (size=S in Python)"
                )
            size = sizes[0]
        prep = Preprocessing(channels, size, self.resize)
        conversion = describe_conversion(shapes, colours, prep, decoding)
        if self.jpeg is not None:
            conversion = "; ".join(filter(None, [conversion, self.jpeg.describe()]))
        return prep, conversion

    def finish(self, images: U8, prep: Preprocessing) -> U8:
        """``preprocess`` to ``prep`` with this round-trip and brightness."""
        return preprocess(
            images,
            channels=prep.channels,
            size=prep.size,
            brightness=self.brightness,
            resize=prep.resize,
            jpeg=self.jpeg,
        )


def check_options(channels: int, size: int, brightness: float) -> None:
    """Raise ``DataError`` for preprocessing options that cannot be honoured."""
    if channels not in (1, 3):
        raise DataError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DataError(f"size must be a positive integer, got {size!r}")
    if not math.isfinite(brightness) or brightness <= 0:
        raise DataError(f"brightness must be a finite number > 0, got {brightness}")


def preprocess(
    images: U8,
    *,
    channels: int,
    size: int,
    brightness: float,
    resize: str = "crop",
    jpeg: JpegHistory | None = None,
) -> U8:
    """Full pipeline on channel-last uint8 images; returns ``(N, channels, size, size)`` uint8. ``jpeg``:
    a round-trip at the final size and channels, before the brightness change."""
    out = to_channels(resize_images(images, size, resize), channels)
    if jpeg is not None:
        out = jpeg.apply(out[..., 0] if channels == 1 else out).reshape(out.shape)
    out = adjust_brightness(out, brightness)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
