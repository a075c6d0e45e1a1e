"""Compression histories of the sets an evaluation compares: which carry a JPEG history, which OOD sets
to put through the in-distribution set's (``--match-jpeg``), and a one-line warning where they differ.

A detector can tell two sets apart by how they were stored instead of by what they show (our CIFAR-10 is
decoded JPEG, CelebA is not: DiffPath 1.000 as shipped, 0.565 once matched). ``roseood.data.jpeg`` finds
a history from the pixels at the model's size; this module applies it to an evaluation's sets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from roseood.data import DatasetSpec, ImageSet, dataset_spec
from roseood.data.jpeg import FIXED_POINT, JpegHistory, estimate_history, residual, split_suffix
from roseood.errors import DataError

AUTO = "auto"  # --match-jpeg auto: the history found in the in-distribution images
SAMPLE = 16  # images a history is estimated or checked on, spread over the set


def parse_match(text: str | None) -> str | None:
    """``--match-jpeg``'s value checked: None, "auto", or ``QUALITY[:SUBSAMPLING]`` (else a one-line
    ``DataError``)."""
    if text is None or text == AUTO:
        return text
    try:
        JpegHistory.parse(text)
    except DataError as exc:
        raise DataError(f"match_jpeg is auto or QUALITY[:SUBSAMPLING]: {exc}") from None
    return text


def _sample(images: ImageSet) -> np.ndarray:
    """Up to ``SAMPLE`` images spread over the set, channel-last ((N, H, W) for grayscale)."""
    x = images.images[np.linspace(0, len(images) - 1, min(SAMPLE, len(images))).astype(int)]
    x = x.transpose(0, 2, 3, 1)
    return x[..., 0] if x.shape[-1] == 1 else x


def history_of_set(images: ImageSet) -> JpegHistory | None:
    """The JPEG history found in a set's pixels as the model sees them (None: none shows)."""
    return estimate_history(_sample(images), SAMPLE) if len(images) else None


def named_set(source: str) -> DatasetSpec | None:
    """The named set a source reads (``celeba+jpeg75`` and ``CelebA:test`` read celeba), or None for a
    file or folder."""
    return dataset_spec(split_suffix(source)[0])


def _stored(source: str) -> bool:
    """Whether a source holds stored images (not ``noise`` or ``constant``), which a round-trip can match."""
    spec = named_set(source)
    return spec is None or not spec.generated


def with_twins(sources: Sequence[str], history: JpegHistory | None) -> list[str]:
    """``sources`` with, after each natural-image set, its twin put through ``history`` (``celeba``,
    ``celeba+jpeg75``); as they are without a history."""
    out = []
    for s in sources:
        out.append(s)
        spec = named_set(s)
        if history is not None and spec is not None and spec.natural and split_suffix(s)[1] is None:
            out.append(s + history.tag())
    return list(dict.fromkeys(out))


def matched_sources(sources: Sequence[str], match: str | None, in_set: ImageSet) -> list[str]:
    """The OOD sources with ``match``'s round-trip asked for on each stored set (``+jpeg75``): ``auto``
    takes the history found in ``in_set`` (nothing to match when it shows none); sources that already
    name one, and generated sets, are left as they are."""
    if match is None:
        return list(sources)
    history = history_of_set(in_set) if match == AUTO else JpegHistory.parse(match)
    if history is None:
        return list(sources)
    return [s + history.tag() if _stored(s) and split_suffix(s)[1] is None else s for s in sources]


def judged(names: Sequence[str]) -> list[str]:
    """The sets a verdict is judged on: ``names`` less each set whose matched twin is there too (``celeba``
    beside ``celeba+jpeg75``: the twin shares the in-distribution set's compression, the set as stored is
    only shown)."""
    present = set(names)
    return [n for n in names if not any(m != n and split_suffix(m)[0] == n for m in present)]


def describe(history: JpegHistory | None) -> str:
    if history is None:
        return "none found"
    return f"decoded JPEG (quality {history.quality}, {history.subsampling})"


def compression_report(in_set: ImageSet, ood: Mapping[str, ImageSet]) -> tuple[dict[str, str], list[str]]:
    """Each set's compression history (for the settings) and one warning line per OOD set whose history
    differs from the in-distribution set's. With an in-distribution history, an OOD set is checked by one
    more round-trip through it (it matches where that changes its images as little as the in-distribution
    images'); without one, only OOD sets that are not named benchmark sets are searched for their own."""
    ours = history_of_set(in_set)
    found = {in_set.name: describe(ours)}
    lines = []
    base = residual(_sample(in_set), ours) if ours is not None else 0.0
    for name, images in ood.items():
        if not _stored(name) or not len(images):
            continue
        if ours is not None:
            shares = residual(_sample(images), ours) <= max(FIXED_POINT, 4 * base)
            found[name] = describe(ours) if shares else "not the in-distribution set's"
            if not shares:
                lines.append(
                    f"{name}: not stored like {in_set.name}, whose images are {describe(ours)}: a detector "
                    f"can tell them apart by compression alone; to judge content, put {name} through the "
                    f"same round-trip: --match-jpeg {ours.quality}:{ours.subsampling} "
                    f"(or --ood {split_suffix(name)[0]}{ours.tag()})"
                )
        elif (applied := split_suffix(name)[1]) is not None or named_set(name) is None:
            theirs = applied or history_of_set(images)
            found[name] = describe(theirs)
            if theirs is not None:
                lines.append(
                    f"{name}: {describe(theirs)}, while {in_set.name} shows no JPEG history: a detector can "
                    f"tell them apart by compression alone; score OOD images stored as the in-distribution "
                    f"ones (lossless), or fit on images with the same history"
                )
    return found, lines
