"""CSV files: written whole and atomically (``write_csv``), or grown row by row for long runs that may be
interrupted and resumed (``GrowingCsv``); text a spreadsheet would run as a formula is quoted."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from roseood.errors import RoseError
from roseood.serialization import NAME_ERRORS, atomic_write, cannot_write, replace_if_unclaimed, write_json

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell starting so as a formula


def spreadsheet_safe(cell: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula (``=cmd|...``, ``+1``, ``@SUM``) with a
    leading ``'``, as OWASP's guidance on CSV injection says; numbers (``-0.5`` too) and other text
    unchanged."""
    if not isinstance(cell, str) or not cell.startswith(FORMULA_START):
        return cell
    try:
        float(cell)
    except ValueError:
        return "'" + cell
    return cell


def write_csv(path: str | Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    """Write a UTF-8 CSV with ``header`` and ``rows`` to ``path`` atomically (file names that are not UTF-8
    as ``\\xNN``, text that a spreadsheet would run as a formula behind a ``'``: ``spreadsheet_safe``);
    rows are streamed to the temporary file as they come, so a long generator of rows needs no memory."""

    def write(f: IO[bytes]) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", errors=NAME_ERRORS, newline="")
        writer = csv.writer(text)
        writer.writerow(header)
        writer.writerows([spreadsheet_safe(c) for c in row] for row in rows)
        text.flush()
        text.detach()  # leave the binary file open for atomic_write's fsync

    return atomic_write(path, write)


class GrowingCsv:
    """A CSV written as it grows, for long runs that may be interrupted: rows go to ``PATH.partial``,
    each ``append`` flushed to disk and recorded (row count and byte length) with the run's ``settings``
    in ``PATH.partial.json``; ``finish`` renames it to ``PATH``, so ``PATH`` only ever holds a whole run.
    ``resume=True`` continues the partial file of an interrupted run with the same header and settings
    (rows past its last record are dropped, their work redone); ``resumed`` are the rows it already
    held (as text), ``count`` the rows written in all. ``append(rows, mark)`` records a ``mark`` (e.g. a
    digest of what the rows describe) with the row count it ends at; ``marks`` are those of the rows
    resumed, for the caller to check that they still hold. The record holds a SHA-256 of the text written,
    so rows edited by hand between the runs are refused, not continued.
    Without ``resume`` an existing partial file is refused, unless ``overwrite``."""

    def __init__(
        self,
        path: str | Path,
        header: Sequence[str],
        settings: Mapping[str, Any],
        *,
        resume: bool = False,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.record = self.path.with_name(self.path.name + ".partial.json")
        self.settings = {"header": list(header), **settings}
        self.resumed: list[list[str]] = []
        self.marks: list[tuple[int, str]] = []
        self.count = 0
        self.digest = hashlib.sha256()  # of the text written so far
        if GrowingCsv.check(path, resume=resume, overwrite=overwrite):
            self._resume()
        else:
            self._append_text(header, [], mode="wb")

    @staticmethod
    def check(path: str | Path, *, resume: bool, overwrite: bool) -> bool:
        """Whether a run writing ``path`` resumes a partial file; refuses, before any work, a partial file
        left by an interrupted run that is neither resumed nor overwritten."""
        partial = Path(path).with_name(Path(path).name + ".partial")
        record = partial.with_name(partial.name + ".json")
        if resume and record.exists():
            return True
        if (partial.exists() or record.exists()) and not (resume or overwrite):
            raise RoseError(
                f"{partial} holds an interrupted run's rows: continue it with --resume, or start over "
                "with --overwrite"
            )
        return False

    def _resume(self) -> None:
        try:
            record = json.loads(self.record.read_text())
            length, count = int(record["bytes"]), int(record["rows"])
            marks = [(int(end), str(mark)) for end, mark in record.get("marks", [])]
            size = self.partial.stat().st_size
            if not 0 <= length <= size or not 0 <= count <= length or any(e > count for e, _ in marks):
                raise ValueError(f"its record claims {count} rows in {length} bytes, the file has {size}")
            with open(self.partial, "rb") as f:
                data = f.read(length)
            text = data.decode("utf-8")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RoseError(f"cannot resume {self.partial}: {exc}; start over with --overwrite") from None
        if record.get("settings") != self.settings:
            changed = sorted(
                k
                for k in {*self.settings, *record.get("settings", {})}
                if self.settings.get(k) != record.get("settings", {}).get(k)
            )
            raise RoseError(
                f"cannot resume {self.partial}: it was written with other settings ({', '.join(changed)}); "
                "start over with --overwrite"
            )
        rows = list(csv.reader(io.StringIO(text, newline="")))
        if len(rows) != count + 1 or len(data) != length:
            raise RoseError(f"cannot resume {self.partial}: it is shorter than its record; use --overwrite")
        self.digest.update(data)
        if self.digest.hexdigest() != record.get("sha256"):
            why = (
                "its record has no digest of its rows (written by an earlier roseood)"
                if "sha256" not in record
                else "its rows were changed since they were written (they no longer match their record)"
            )
            raise RoseError(f"cannot resume {self.partial}: {why}; start over with --overwrite")
        self.resumed, self.count, self.marks = rows[1:], count, marks
        with open(self.partial, "r+b") as f:  # drop what was written after the last record
            f.truncate(length)

    def _append_text(
        self, header: Sequence[str] | None, rows: list[list[Any]], mode: str, mark: str | None = None
    ) -> None:
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        if header is not None:
            writer.writerow(header)
        writer.writerows([spreadsheet_safe(c) for c in row] for row in rows)
        data = text.getvalue().encode("utf-8", errors=NAME_ERRORS)
        try:
            with open(self.partial, mode) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                length = f.tell()
        except OSError as exc:
            raise cannot_write(self.partial, exc) from None
        if header is not None:
            self.digest = hashlib.sha256()
        self.digest.update(data)
        self.count = self.count + len(rows) if header is None else 0
        if mark is not None:
            self.marks.append((self.count, mark))
        record = {
            "settings": self.settings,
            "rows": self.count,
            "bytes": length,
            "marks": self.marks,
            "sha256": self.digest.hexdigest(),
        }
        write_json(self.record, record)

    def append(self, rows: Iterable[Sequence[Any]], mark: str | None = None) -> None:
        """Add ``rows`` (cells as ``write_csv`` writes them) and record them as written, with ``mark``."""
        self._append_text(None, [list(r) for r in rows], mode="ab", mark=mark)

    def finish(self) -> Path:
        """Rename the whole file to ``PATH`` (refused if another process wrote ``PATH`` meanwhile)."""
        replace_if_unclaimed(str(self.partial), self.path)
        self.record.unlink(missing_ok=True)
        return self.path
