"""Scores of a saved detector for a stream of images, with OOD decisions, as CSV rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from roseood import distributed
from roseood.data.loading import ImageStream
from roseood.detectors.base import Detector
from roseood.progress import progress as progress_bar
from roseood.serialization import write_csv

SCORE_COLUMNS = ("index", "file", "label", "score", "ood")


def score_rows(
    detector: Detector,
    stream: ImageStream,
    threshold: float | None = None,
    chunk: int = 2048,
    progress: bool = False,
    collect: list[np.ndarray] | None = None,
) -> Iterator[list[Any]]:
    """One row per image (``SCORE_COLUMNS``), read and scored ``chunk`` images per process at a time, so
    memory stays bounded however many images there are; ``ood`` is empty without a threshold.
    ``progress``: one bar (or log lines) for the whole stream, from rank 0. ``collect``: each chunk's
    scores are appended to it (for a report)."""
    shown = progress and distributed.is_main()
    bar = progress_bar(None, "scoring", total=len(stream), unit="image", enabled=shown)
    for lo, scores in detector.score_stream(stream, chunk=chunk * distributed.world()):
        if collect is not None:
            collect.append(scores)
        decisions = detector.decide(scores, threshold) if threshold is not None else [None] * len(scores)
        for i, (s, d) in enumerate(zip(scores, decisions, strict=True), lo):
            name = stream.files[i] if stream.files is not None else ""
            yield [i, name, int(stream.labels[i]), f"{s:.6g}", "" if d is None else str(bool(d)).lower()]
        bar.update(len(scores))
    bar.close()


def write_scores(
    detector: Detector,
    stream: ImageStream,
    out: str | Path,
    threshold: float | None = None,
    chunk: int = 2048,
    progress: bool = False,
    collect: list[np.ndarray] | None = None,
) -> float | None:
    """Write ``score_rows`` to the CSV file ``out`` (atomically; under torchrun rank 0 writes while every
    process scores its share). ``threshold`` defaults to the detector's calibrated one; returns the
    threshold used (None: no decisions). ``collect``: as for ``score_rows``."""
    threshold = threshold if threshold is not None else detector.threshold_
    rows = score_rows(detector, stream, threshold, chunk, progress, collect)
    if distributed.is_main():
        write_csv(out, SCORE_COLUMNS, rows)
    else:
        for _ in rows:  # the other processes score their shares of every chunk
            pass
    return threshold
