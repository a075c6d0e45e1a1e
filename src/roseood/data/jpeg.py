"""Compression history: put one image set through another's JPEG round-trip, and see which sets carry one.

Two image sets judged against each other must share their processing, or a detector separates them by
how they were stored rather than by what they show: our CIFAR-10 is decoded JPEG (quality 75, 4:2:0
chroma, an 8×8 grid on its 32×32 pixels) while CelebA was resized after decoding and carries no grid.
``JpegHistory`` is such a history (``JpegHistory.parse("75:4:2:0")``) and ``apply`` gives images the
same: one Pillow encode and decode at the model's size. ``blockiness`` measures the 8×8 grid a decoded
JPEG leaves, to warn when two sets differ in it; ``history_of`` reads a JPEG file's own history;
``Storage`` is what a set's pixels show of it, as a detector file records its fit images'.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image, JpegImagePlugin

from roseood.errors import DataError

U8 = npt.NDArray[np.uint8]

SUBSAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}  # Pillow's codes for chroma subsampling
# A source's suffix that asks for the round-trip: "celeba+jpeg75", "my_photos/+jpeg90-444".
SUFFIX = re.compile(r"\+jpeg(\d{1,3})(?:-(444|422|420))?$", re.IGNORECASE)
BLOCK = 8


@dataclass(frozen=True)
class JpegHistory:
    """One JPEG encode at libjpeg's ``quality`` (1–100, Pillow's scale) with ``subsampling`` of the
    chroma ("4:2:0", "4:2:2" or "4:4:4"; grayscale images have none), then a decode."""

    quality: int = 75
    subsampling: str = "4:2:0"

    def __post_init__(self) -> None:
        q = self.quality
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 100:
            raise DataError(f"JPEG quality must be an integer in 1..100, got {self.quality!r}")
        if self.subsampling not in SUBSAMPLINGS:
            known = ", ".join(SUBSAMPLINGS)
            raise DataError(f"JPEG chroma subsampling must be one of {known}, got {self.subsampling!r}")

    @classmethod
    def parse(cls, text: str) -> JpegHistory:
        """``QUALITY[:SUBSAMPLING]``: "75", "75:4:2:0" or "75:420" (default subsampling 4:2:0)."""
        quality, _, sub = str(text).strip().partition(":")
        try:
            q = int(quality)
        except ValueError:
            raise DataError(
                f"a JPEG history is QUALITY[:SUBSAMPLING], e.g. 75 or 75:4:2:0, got {text!r}"
            ) from None
        sub = sub.strip()
        if re.fullmatch(r"\d{3}", sub):
            sub = ":".join(sub)
        return cls(q, sub or "4:2:0")

    def describe(self) -> str:
        """E.g. "JPEG round-trip (quality 75, 4:2:0 chroma)"."""
        return f"JPEG round-trip (quality {self.quality}, {self.subsampling} chroma)"

    def tag(self) -> str:
        """The source suffix naming this history: "+jpeg75" (4:2:0) or "+jpeg90-444"."""
        sub = "" if self.subsampling == "4:2:0" else "-" + self.subsampling.replace(":", "")
        return f"+jpeg{self.quality}{sub}"

    def apply(self, images: U8) -> U8:
        """Every channel-last uint8 image ``(N, H, W)`` or ``(N, H, W, 3)`` encoded and decoded once."""
        out = np.empty_like(images)
        for i, img in enumerate(images):
            buf = io.BytesIO()
            Image.fromarray(img).save(
                buf, "JPEG", quality=self.quality, subsampling=SUBSAMPLINGS[self.subsampling]
            )
            with Image.open(buf) as decoded:
                out[i] = np.asarray(decoded.convert("RGB" if img.ndim == 3 else "L"))
        return out


@dataclass(frozen=True)
class Storage:
    """How set ``name`` was stored, as its pixels show: the JPEG ``history`` found in them (None: none
    shows) and the ``change`` one more round-trip through it makes to them (``residual``), the bar another
    set must meet to share it. ``rose fit`` records its fit images' in the detector file, so that the
    images scored later are checked against them (``roseood.evaluation.histories.compared``)."""

    name: str
    history: JpegHistory | None
    change: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain values for a file: ``{"name", "jpeg": None or {"quality", "subsampling"}, "change"}``."""
        jpeg = None if self.history is None else asdict(self.history)
        return {"name": self.name, "jpeg": jpeg, "change": self.change}

    @classmethod
    def from_dict(cls, obj: Any) -> Storage:
        """What ``as_dict`` wrote, checked (else a one-line ``DataError``)."""
        if not isinstance(obj, dict) or set(obj) != {"name", "jpeg", "change"}:
            raise DataError("a compression record holds name, jpeg and change")
        name, jpeg, change = obj["name"], obj["jpeg"], obj["change"]
        if not isinstance(name, str) or isinstance(change, bool) or not isinstance(change, int | float):
            raise DataError("a compression record's name is text and its change a number")
        if not 0 <= change <= 255:
            raise DataError(f"a compression record's change is 0..255 levels, got {change}")
        if jpeg is not None and (not isinstance(jpeg, dict) or set(jpeg) != {"quality", "subsampling"}):
            raise DataError("a compression record's jpeg is None or holds quality and subsampling")
        return cls(name, None if jpeg is None else JpegHistory(**jpeg), float(change))


def split_suffix(source: str) -> tuple[str, JpegHistory | None]:
    """``"celeba+jpeg75"`` → ``("celeba", JpegHistory(75))``; a source without the suffix is returned
    as it is with None."""
    m = SUFFIX.search(source)
    if m is None:
        return source, None
    sub = m.group(2)
    return source[: m.start()], JpegHistory(int(m.group(1)), ":".join(sub) if sub else "4:2:0")


def blockiness(images: U8) -> float:
    """How strongly a set shows the 8×8 grid of JPEG: the median over images of the mean absolute step
    between neighbouring pixels across block boundaries (columns and rows 8, 16, ...) divided by that
    within blocks. About 1 without a grid; a decoded quality-75 JPEG at its own size is well above.
    Takes uint8 ``(N, C, H, W)``; NaN for images smaller than two blocks."""
    if images.ndim != 4 or min(images.shape[-2:]) < 2 * BLOCK or not len(images):
        return float("nan")
    x = images.astype(np.float32).mean(1)  # luma-like: the grid is in every channel
    ratios = []
    for d in (np.abs(np.diff(x, axis=2)), np.abs(np.diff(x, axis=1)).transpose(0, 2, 1)):
        at = np.arange(d.shape[2]) % BLOCK == BLOCK - 1  # steps from column 8k-1 to 8k
        across, within = d[:, :, at].mean((1, 2)), d[:, :, ~at].mean((1, 2))
        ratios.append(across / np.maximum(within, 1e-6))
    return float(np.median(np.mean(ratios, axis=0)))


def residual(images: U8, history: JpegHistory) -> float:
    """The median over images of the mean absolute change (in 0–255 levels) that one more round-trip
    through ``history`` makes: near 0 for images already decoded from that history (a JPEG decode is
    nearly a fixed point of its own encoder), several levels for images that never went through it.
    Takes channel-last uint8 images."""
    again = history.apply(images)
    change = np.abs(again.astype(np.int16) - images).reshape(len(images), -1).mean(1)
    return float(np.median(change))


SEARCHED = range(30, 99)  # qualities estimate_history tries; at 99-100 every image is near a fixed point
FIXED_POINT = 1.0  # a history's round-trip changes its images by at most this (levels) ...
DIP = 0.7  # ... and by at most this share of the change one quality step either side


def estimate_history(images: U8, n: int = 16) -> JpegHistory | None:
    """The JPEG history the first ``n`` channel-last uint8 images were decoded from, or None: the
    quality and subsampling at which one more round-trip changes them least *relative to its neighbour
    qualities*, kept only where that is a sharp dip (at most ``DIP`` times the change one quality step
    either side, and under ``FIXED_POINT`` levels), as only a decoded JPEG shows; smooth images change
    little at every high quality and show none. Images flat in every 8×8 block are left out (``textured``):
    they show no history. Remembered by the images' bytes: the search is 142 round-trips of each image,
    and an evaluation (a bench run: dozens) asks again for the same sets."""
    if min(images.shape[1:3]) < 2 * BLOCK:
        return None
    x = np.ascontiguousarray(images[textured(images)][:n])
    return _search(x.shape, x.dtype.str, x.tobytes()) if len(x) else None


def textured(images: U8) -> np.ndarray:
    """Which channel-last images vary inside at least one 8×8 block. A JPEG round-trip keeps a flat block
    flat, moving it at most a level by rounding its mean, at every quality, so an image flat in every
    block is unchanged at some qualities and moved at others: a dip that is no history (a flat set read
    as quality 30)."""
    n, h, w = images.shape[:3]
    blocks = images[:, : h - h % BLOCK, : w - w % BLOCK].reshape(n, h // BLOCK, BLOCK, w // BLOCK, BLOCK, -1)
    return np.asarray((blocks.max(axis=(2, 4)) != blocks.min(axis=(2, 4))).reshape(n, -1).any(1))


@functools.lru_cache(maxsize=64)
def _search(shape: tuple[int, ...], dtype: str, data: bytes) -> JpegHistory | None:
    x = np.frombuffer(data, dtype).reshape(shape)
    subs = ("4:2:0", "4:4:4") if x.ndim == 4 else ("4:4:4",)  # grayscale has no chroma to subsample
    qualities = range(SEARCHED.start - 1, SEARCHED.stop + 1)
    change = {(q, s): residual(x, JpegHistory(q, s)) for q in qualities for s in subs}

    def dip(q: int, s: str) -> float:
        return change[q, s] / max(min(change[q - 1, s], change[q + 1, s]), 1e-9)

    q, s = min(((q, s) for q in SEARCHED for s in subs), key=lambda qs: dip(*qs))
    if change[q, s] > FIXED_POINT or dip(q, s) > DIP:
        return None
    return JpegHistory(q, s if x.ndim == 4 else "4:2:0")


@functools.cache
def _quality_tables() -> dict[tuple[int, ...], int]:
    """libjpeg's luminance table at each quality, as Pillow writes it, mapped back to the quality."""
    tables = {}
    for q in range(100, 0, -1):  # the lowest quality wins where two give one table (q ≥ 98 may)
        buf = io.BytesIO()
        Image.new("L", (8, 8)).save(buf, "JPEG", quality=q)
        buf.seek(0)
        with JpegImagePlugin.JpegImageFile(buf) as img:  # read as a JPEG: its quantization tables
            tables[tuple(img.quantization[0])] = q
    return tables


def history_of(img: Image.Image) -> JpegHistory | None:
    """The history a JPEG file's header says: its quality where its luminance table is libjpeg's table
    at one (None for other tables and for files that are not JPEG), and its chroma subsampling."""
    if not isinstance(img, JpegImagePlugin.JpegImageFile):
        return None
    quality = _quality_tables().get(tuple(img.quantization.get(0, ())))
    if quality is None:
        return None
    code = JpegImagePlugin.get_sampling(img)
    names = {v: k for k, v in SUBSAMPLINGS.items()}
    return JpegHistory(quality, names.get(code, "4:2:0"))
