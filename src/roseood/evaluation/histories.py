"""Compression histories of the sets an evaluation compares: which carry a JPEG history, which OOD sets
to put through the in-distribution set's (``--match-jpeg``), and a one-line warning where they differ
(``compared``: also what ``rose score`` and ``rose fit`` check against a detector's fit images).

A detector can tell two sets apart by how they were stored instead of by what they show (our CIFAR-10 is
decoded JPEG, CelebA is not: DiffPath 1.000 as shipped, 0.565 once matched). ``roseood.data.jpeg`` finds
a history from the pixels at the model's size; this module applies it to an evaluation's sets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roseood.data import DatasetSpec, ImageSet, ImageStream, dataset_spec
from roseood.data.jpeg import FIXED_POINT, JpegHistory, Storage, estimate_history, residual, split_suffix
from roseood.data.loading import read_readable
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


def _sample(images: np.ndarray) -> np.ndarray:
    """Up to ``SAMPLE`` of uint8 ``(N, C, H, W)`` images spread over the set, channel-last ((N, H, W) for
    grayscale)."""
    x = images[spread(len(images))].transpose(0, 2, 3, 1)
    return x[..., 0] if x.shape[-1] == 1 else x


def spread(n: int) -> np.ndarray:
    """The indices of the (up to ``SAMPLE``) images of ``n`` that a history is estimated or checked on."""
    return np.linspace(0, n - 1, min(SAMPLE, n)).astype(int)


def history_of_set(images: ImageSet) -> JpegHistory | None:
    """The JPEG history found in a set's pixels as the model sees them (None: none shows)."""
    return estimate_history(_sample(images.images), SAMPLE) if len(images) else None


def stream_sample(stream: ImageStream) -> np.ndarray:
    """The images of a lazily read set that a check looks at (``spread``), read one by one; a file that
    cannot be read is left out (scoring reports it)."""
    parts = [read_readable(stream, i, i + 1, lambda *_: None)[0] for i in spread(len(stream))]
    return np.concatenate([p for p in parts if len(p)] or [np.empty((0, 1, 1, 1), np.uint8)])


def storage_of(name: str, images: np.ndarray) -> Storage:
    """How set ``name``'s uint8 ``(N, C, H, W)`` images were stored, as their pixels show (``Storage``)."""
    x = _sample(images)
    history = estimate_history(x, SAMPLE) if len(x) else None
    return Storage(name, history, residual(x, history) if history is not None else 0.0)


def named_set(source: str) -> DatasetSpec | None:
    """The named set a source reads (``celeba+jpeg75`` and ``CelebA:test`` read celeba), or None for a
    file or folder."""
    return dataset_spec(split_suffix(source)[0])


def _stored(spec: DatasetSpec | None) -> bool:
    """Whether a source of named set ``spec`` (None: a file or folder) holds stored images (not ``noise``
    or ``constant``), which a round-trip can match."""
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
    return [s + history.tag() if _stored(named_set(s)) and split_suffix(s)[1] is None else s for s in sources]


@dataclass(frozen=True)
class OodSource:
    """An OOD set to load: its ``name`` (with the round-trip asked for, ``celeba+jpeg75``), the set as
    stored whose images it draws (``base``: the name its seed comes from) and whether it is a named set
    (absent files: a 'no data' entry rather than an error)."""

    name: str
    base: str
    named: bool


def ood_sources(sources: Sequence[str], match: str | None, in_set: ImageSet | None) -> list[OodSource]:
    """The OOD sets to load, each named and matched once here (``matched_sources`` where ``in_set``, the
    in-distribution test images, is given), so that the loader need not read a source's name again."""
    names = list(sources) if in_set is None else matched_sources(sources, match, in_set)
    bases = [split_suffix(s)[0] for s in names]
    return [OodSource(s, base, dataset_spec(base) is not None) for s, base in zip(names, bases, strict=True)]


def describe(history: JpegHistory | None) -> str:
    if history is None:
        return "none found"
    return f"decoded JPEG (quality {history.quality}, {history.subsampling})"


def compared(
    ref: Storage,
    name: str,
    images: np.ndarray,
    remedy: Callable[[JpegHistory], str],
    source: str | None = None,
) -> tuple[str | None, str | None]:
    """The one compression check (``rose evaluate``'s OOD sets, ``rose score``'s and ``rose fit``'s
    images): how set ``name`` (uint8 ``(N, C, H, W)`` images read from ``source``, default ``name``) was
    stored beside ``ref`` (the in-distribution set's, or a detector's fit images'), and a one-line warning
    where the two differ (``remedy(history)``: the option that matches them); (None, None) for a
    generated or empty set. With a history in ``ref``, the set is checked by one more round-trip through
    it (it shares it where that changes its images as little as ``ref``'s); without one, only a set that
    is not a named benchmark set is searched for its own."""
    source = name if source is None else source
    base, applied = split_suffix(source)
    named = dataset_spec(base)
    if not _stored(named) or not len(images):
        return None, None
    x, ours = _sample(images), ref.history
    if ours is not None:
        if residual(x, ours) <= max(FIXED_POINT, 4 * ref.change):
            return describe(ours), None
        return "not the in-distribution set's", (
            f"{name}: not stored like {ref.name}, whose images are {describe(ours)}: a detector can tell "
            f"them apart by compression alone; to judge content, put {name} through the same round-trip: "
            f"{remedy(ours)}"
        )
    if applied is None and named is not None:
        return None, None
    theirs = applied or estimate_history(x, SAMPLE)
    if theirs is None:
        return describe(None), None
    return describe(theirs), (
        f"{name}: {describe(theirs)}, while {ref.name} shows no JPEG history: a detector can tell them "
        f"apart by compression alone; score OOD images stored as the in-distribution ones (lossless), or "
        f"fit on images with the same history"
    )


def _match_option(name: str, history: JpegHistory) -> str:
    """``rose evaluate``'s way to put OOD set ``name`` through ``history``."""
    twin = split_suffix(name)[0] + history.tag()
    return f"--match-jpeg {history.quality}:{history.subsampling} (or --ood {twin})"


def compression_report(in_set: ImageSet, ood: Mapping[str, ImageSet]) -> tuple[dict[str, str], list[str]]:
    """Each set's compression history (for the settings) and one warning line per OOD set whose history
    differs from the in-distribution set's (``compared``; the remedy: ``--match-jpeg``)."""
    ref = storage_of(in_set.name, in_set.images)
    found = {in_set.name: describe(ref.history)}
    lines = []
    for name, images in ood.items():
        seen, line = compared(ref, name, images.images, functools.partial(_match_option, name))
        if seen is not None:
            found[name] = seen
        lines += [line] if line else []
    return found, lines
