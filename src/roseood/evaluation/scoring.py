"""Scores of a saved detector for a stream of images, with OOD decisions, as CSV rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roseood import distributed
from roseood.csvfiles import GrowingCsv, spreadsheet_safe, write_csv
from roseood.data.loading import ImageStream, read_readable
from roseood.detectors.base import Detector
from roseood.errors import RoseError
from roseood.evaluation.result import EvaluationResult
from roseood.progress import progress as progress_bar
from roseood.progress import resolve
from roseood.serialization import array_digest, written_in_place

SCORE_COLUMNS = ("index", "file", "label", "score", "ood")
DECISION_COLUMNS = ("method", "set", *SCORE_COLUMNS)


def _row(index: int, file: str | None, label: int, score: float, ood: bool | None) -> list[Any]:
    """One image's ``SCORE_COLUMNS``: ``ood`` true/false, or empty without a threshold; ``score`` and
    ``ood`` both empty for a file that could not be read (NaN)."""
    if np.isnan(score):
        return [index, file or "", int(label), "", ""]
    return [index, file or "", int(label), f"{score:.6g}", "" if ood is None else str(bool(ood)).lower()]


def flagged_text(scores: np.ndarray, threshold: float | None) -> str:
    """How many ``scores`` the threshold calls OOD (``Detector.decide``'s rule: above it), as a sentence."""
    if threshold is None:
        return f"{len(scores)} images; no threshold, so no decisions."
    above = int(np.sum(np.asarray(scores) > threshold))
    return f"{above} of {len(scores)} images ({above / max(len(scores), 1):.1%}) above the threshold: OOD."


def score_chunks(
    detector: Detector,
    stream: ImageStream,
    threshold: float | None = None,
    chunk: int = 2048,
    progress: bool | None = None,
    *,
    start: int = 0,
    on_error: Callable[[int, str], None] | None = None,
) -> Iterator[tuple[np.ndarray, list[list[Any]]]]:
    """Each chunk's scores and rows (``SCORE_COLUMNS``, one per image from ``start`` on), read and scored
    ``chunk`` images per process at a time, so memory stays bounded however many images there are;
    ``ood`` is empty without a threshold. ``progress``: one bar (or log lines) for the whole stream,
    from rank 0 (unset: on a terminal). ``on_error``: as for ``Detector.score_stream`` (NaN scores,
    rows with empty score and decision)."""
    shown = resolve(progress) and distributed.is_main()
    bar = progress_bar(None, "scoring", total=len(stream) - start, unit="image", enabled=shown)
    stream_chunks = detector.score_stream(
        stream, chunk=chunk * distributed.world(), start=start, on_error=on_error
    )
    for lo, scores in stream_chunks:
        decisions = detector.decide(scores, threshold) if threshold is not None else [None] * len(scores)
        files, labels = stream.files, stream.labels
        rows = [
            _row(i, files[i] if files is not None else None, labels[i], s, d)
            for i, (s, d) in enumerate(zip(scores, decisions, strict=True), lo)
        ]
        yield scores, rows
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
    *,
    resume: bool = False,
    overwrite: bool = False,
    settings: Mapping[str, Any] | None = None,
    on_error: Callable[[int, str], None] | None = None,
) -> float | None:
    """Write one row per image (``SCORE_COLUMNS``) to the CSV file ``out`` as the chunks are scored
    (``GrowingCsv``: ``out.partial`` until the last row, then renamed; ``-`` or a device: in place).
    Under torchrun rank 0 writes while every process scores its share. ``threshold`` defaults to the
    detector's calibrated one; returns the threshold used (None: no decisions). ``resume``: continue an
    interrupted run with the same ``settings`` (and the same images, checked by file name), scoring only
    the images not yet written. ``collect``: every image's score is appended to it, chunk by chunk (for a
    report; NaN for unreadable files). ``on_error``: as for ``score_chunks``."""
    threshold = threshold if threshold is not None else detector.threshold_
    if written_in_place(out):
        chunks = score_chunks(detector, stream, threshold, chunk, progress, on_error=on_error)
        rows = (row for scores, part in _collected(chunks, collect) for row in part)
        if distributed.is_main():
            write_csv(out, SCORE_COLUMNS, rows)
        else:
            for _ in rows:  # the other processes score their shares of every chunk
                pass
        return threshold
    csv = None
    if distributed.is_main():
        csv = GrowingCsv(
            out,
            SCORE_COLUMNS,
            {"images": len(stream), "threshold": threshold, **(settings or {})},
            resume=resume,
            overwrite=overwrite,
        )
        _check_resumed(csv, stream, collect)
    start = int(distributed.broadcast(torch.tensor(csv.count if csv is not None else 0)).item())
    chunks = score_chunks(detector, stream, threshold, chunk, progress, start=start, on_error=on_error)
    for _, part in _collected(chunks, collect):
        if csv is not None:
            lo = csv.count
            csv.append(part, _pixels_digest(stream, lo, lo + len(part)))
    if csv is not None:
        csv.finish()
    return threshold


def _collected(
    chunks: Iterator[tuple[np.ndarray, list[list[Any]]]], collect: list[np.ndarray] | None
) -> Iterator[tuple[np.ndarray, list[list[Any]]]]:
    """``chunks`` as they are, each chunk's scores appended to ``collect`` first (unless None)."""
    for scores, rows in chunks:
        if collect is not None:
            collect.append(scores)
        yield scores, rows


def _pixels_digest(stream: ImageStream, lo: int, hi: int) -> str:
    """A digest of images ``lo``–``hi`` as the detector saw them (unreadable files left out), recorded with
    their rows so that a resumed run can tell whether they changed."""
    images, kept = read_readable(stream, lo, hi, on_error=lambda i, message: None)
    return array_digest(images) + array_digest(kept)


def _check_resumed(csv: GrowingCsv, stream: ImageStream, collect: list[np.ndarray] | None) -> None:
    """Refuse to continue rows written for other images: other file names, or other pixels under the
    same names (each recorded range read again and compared with its digest); their scores into
    ``collect``."""
    rows = csv.resumed
    if len(rows) > len(stream):
        raise RoseError(
            f"cannot resume: the partial CSV has {len(rows)} rows for {len(stream)} images (the images "
            "changed since it was written); start over with --overwrite"
        )
    for i, row in enumerate(rows):
        file = stream.files[i] if stream.files is not None else ""
        if len(row) != len(SCORE_COLUMNS) or row[0] != str(i) or row[1] != str(spreadsheet_safe(file)):
            raise RoseError(
                f"cannot resume: row {i + 1} of the partial CSV is for {row[1:2] or '?'}, not {file!r} "
                "(the images changed since it was written); start over with --overwrite"
            )
    start = 0
    for end, mark in csv.marks:
        if end > len(stream) or _pixels_digest(stream, start, end) != mark:
            raise RoseError(
                f"cannot resume: images {start + 1}–{end} are not those the partial CSV was written for "
                "(changed since, under the same names); start over with --overwrite"
            )
        start = end
    if collect is not None and rows:
        collect.append(np.array([float(r[3]) if r[3] else np.nan for r in rows]))


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
