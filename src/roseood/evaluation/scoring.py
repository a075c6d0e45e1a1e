"""Scores of a saved detector for a stream of images, with OOD decisions, as CSV rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from roseood import distributed
from roseood.data.loading import ImageStream
from roseood.detectors.base import Detector
from roseood.errors import RoseError
from roseood.evaluation.result import EvaluationResult
from roseood.progress import progress as progress_bar
from roseood.progress import resolve
from roseood.serialization import write_csv

SCORE_COLUMNS = ("index", "file", "label", "score", "ood")
DECISION_COLUMNS = ("method", "set", *SCORE_COLUMNS)


def _row(index: int, file: str | None, label: int, score: float, ood: bool | None) -> list[Any]:
    """One image's ``SCORE_COLUMNS``: ``ood`` true/false, or empty without a threshold."""
    return [index, file or "", int(label), f"{score:.6g}", "" if ood is None else str(bool(ood)).lower()]


def score_rows(
    detector: Detector,
    stream: ImageStream,
    threshold: float | None = None,
    chunk: int = 2048,
    progress: bool | None = None,
    collect: list[np.ndarray] | None = None,
) -> Iterator[list[Any]]:
    """One row per image (``SCORE_COLUMNS``), read and scored ``chunk`` images per process at a time, so
    memory stays bounded however many images there are; ``ood`` is empty without a threshold.
    ``progress``: one bar (or log lines) for the whole stream, from rank 0 (unset: on a terminal).
    ``collect``: each chunk's scores are appended to it (for a report)."""
    shown = resolve(progress) and distributed.is_main()
    bar = progress_bar(None, "scoring", total=len(stream), unit="image", enabled=shown)
    for lo, scores in detector.score_stream(stream, chunk=chunk * distributed.world()):
        if collect is not None:
            collect.append(scores)
        decisions = detector.decide(scores, threshold) if threshold is not None else [None] * len(scores)
        for i, (s, d) in enumerate(zip(scores, decisions, strict=True), lo):
            yield _row(i, stream.files[i] if stream.files is not None else None, stream.labels[i], s, d)
        bar.update(len(scores))
    bar.close()


def write_scores(
    detector: Detector,
    stream: ImageStream,
    out: str | Path,
    threshold: float | None = None,
    chunk: int = 2048,
    progress: bool | None = None,
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


def decision_rows(result: EvaluationResult) -> Iterator[list[Any]]:
    """One row per test image of an evaluation (``DECISION_COLUMNS``): every method, every set (the
    in-distribution test set first), its score and its decision at the method's calibrated threshold
    (``evaluate(..., tpr=)``; empty without one). The pooled ``overall`` set has no rows of its own."""
    for method, per in result.scores.items():
        cut = result.thresholds.get(method)
        for name, scores in per.items():
            if name not in result.labels:
                continue
            labels, files = result.labels[name], result.files.get(name)
            if scores.ndim != 1 or len(scores) != len(labels):
                raise RoseError(f"{method} has no per-image score for every image of {name}")
            for i, s in enumerate(scores):
                ood = None if cut is None else bool(s > cut)
                yield [method, name, *_row(i, files[i] if files else None, labels[i], s, ood)]


def write_decisions(result: EvaluationResult, out: str | Path) -> None:
    """Write ``decision_rows`` to the CSV file ``out`` (atomically)."""
    write_csv(out, DECISION_COLUMNS, decision_rows(result))
