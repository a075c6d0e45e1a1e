"""Benchmark reports: our numbers beside the paper's, with the difference, the settings and the figures.

A ``BenchReport`` collects Markdown sections while an experiment runs and writes ``report.md`` and
``results.json`` into the experiment's folder; its header states the profile (and what it cuts), the
wall time, the models trained, seeds, versions and machine, so every number travels with its context.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roseood.bench.workspace import Workspace
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.result import metric_text
from roseood.machine import machine_description
from roseood.serialization import write_json, write_text

DELTA_FLAG = 0.05  # |ours − paper| above this is marked in tables


@dataclass(frozen=True)
class Row:
    """One compared number: row labels, ours (None: not measured, with ``why``), the paper's, and ours'
    bootstrap interval over the test images when the evaluation made one."""

    labels: tuple[str, ...]
    ours: float | None
    paper: float | None
    why: str = ""
    interval: tuple[float, float] | None = None

    def to_json(self, table: str) -> dict[str, Any]:
        """The row as ``results.json`` stores it, under its table's heading."""
        interval = list(self.interval) if self.interval else None
        return {
            "table": table,
            "labels": list(self.labels),
            "ours": self.ours,
            "paper": self.paper,
            "why": self.why,
            "interval": interval,
        }

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Row:
        """A row read back from a ``results.json`` comparison entry."""
        low_high = entry["interval"]
        interval = (low_high[0], low_high[1]) if low_high else None
        return cls(tuple(entry["labels"]), entry["ours"], entry["paper"], entry["why"], interval)

    @property
    def paper_outside(self) -> bool:
        """The paper's number lies outside our interval: more than test-image noise separates them."""
        if self.interval is None or self.paper is None:
            return False
        return not self.interval[0] <= self.paper <= self.interval[1]


def _fmt(value: float | None) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.3f}"


def ours_paper(ours: float | None, paper: float | None) -> str:
    """One grid cell, "ours (paper)"."""
    return f"{_fmt(ours)} ({_fmt(paper)})"


def comparison_table(
    headers: tuple[str, ...], rows: list[Row], notes: tuple[str, list[str]] | None = None
) -> str:
    """Markdown table ``labels… | paper | ours | Δ``; ours with its interval (``†`` when the paper's number
    is outside it), Δ beyond ``DELTA_FLAG`` bold, a missing measurement says why (e.g. "no data");
    ``notes`` (header, one text per row) adds a last column, e.g. why ours and the paper's differ. The
    bench's reports and docs/paper.md both write their Δ tables with it."""

    def cells(row: Row) -> list[str]:
        if row.ours is None:
            ours = row.why or "–"
        else:
            ours = metric_text(_fmt(row.ours), row.interval) + (" †" if row.paper_outside else "")
        if row.ours is None or row.paper is None:
            delta = "–"
        else:
            d = row.ours - row.paper
            delta = f"**{d:+.3f}**" if abs(d) > DELTA_FLAG else f"{d:+.3f}"
        return [*row.labels, _fmt(row.paper), ours, delta]

    if notes is None:
        return markdown_rows([*headers, "paper", "ours", "Δ"], [cells(r) for r in rows])
    lines = [[*cells(r), n] for r, n in zip(rows, notes[1], strict=True)]
    return markdown_rows([*headers, "paper", "ours", "Δ", notes[0]], lines)


def overview_grid(headers: tuple[str, str], rows: list[Row]) -> str:
    """The same numbers as a grid like the paper's tables: first label down, second across, each cell
    "ours (paper)", ``†`` after ours when the paper's number is outside our interval (as in the table)."""
    down = list(dict.fromkeys(r.labels[0] for r in rows))
    across = list(dict.fromkeys(r.labels[1] for r in rows))

    def cell(r: Row) -> str:
        if r.ours is None:
            return r.why or "–"
        return f"{_fmt(r.ours)}{' †' if r.paper_outside else ''} ({_fmt(r.paper)})"

    cells = {r.labels: cell(r) for r in rows}
    grid = [[d, *(cells.get((d, a), "") for a in across)] for d in down]
    return markdown_rows([f"{headers[0]} / {headers[1]}: ours (paper)", *across], grid)


def _model_row(name: str, trained: dict[str, Any]) -> list[str]:
    """One row of a report's Models table: how the run got the model (trained, cached or a given file)."""
    if "file" in trained:
        return [name, "–", "–", f"given: {trained['file']} (not trained here)"]
    how = "reused from cache" if trained.get("reused") else f"trained {trained['train_seconds']} s"
    return [name, str(trained["epochs"]), str(trained["images"]), how]


@dataclass
class BenchReport:
    """Sections and machine-readable results of one experiment run."""

    name: str
    title: str
    paper_ref: str
    parts: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # the heading of each row's table
    headers: dict[str, list[str]] = field(default_factory=dict)  # heading -> its row-label columns
    figures: list[dict[str, str]] = field(default_factory=list)  # file (relative to the report), caption

    def section(self, heading: str, *body: str) -> None:
        self.parts += [f"## {heading}", *body]

    def compare(self, heading: str, headers: tuple[str, ...], rows: list[Row], caption: str = "") -> None:
        """A paper | ours | Δ table (preceded, for two-label rows, by a compact grid in the paper's
        layout); the rows also go to ``results.json``."""
        self.rows += rows
        self.tables += [heading] * len(rows)
        self.headers[heading] = list(headers)
        body = [caption] if caption else []
        if len(headers) == 2 and rows:
            body.append(overview_grid(headers, rows))
        self.section(heading, *body, comparison_table(headers, rows))

    def figure(self, path: Path, caption: str, out: Path) -> None:
        file = path.relative_to(out).as_posix()
        self.parts += [f"![{caption}]({file})", f"*{caption}*"]
        self.figures.append({"file": file, "caption": caption})

    def _summary(self) -> str:
        """How our numbers compare with the paper's: the flagged differences and the paper numbers
        outside our intervals."""
        flagged = [r for r in self.rows if r.ours is not None and r.paper is not None]
        if not flagged:
            return "The paper prints no numbers for this; compare the figures with the paper's."
        far = [r for r in flagged if abs((r.ours or 0.0) - (r.paper or 0.0)) > DELTA_FLAG]  # both set
        judged = [r for r in flagged if r.interval is not None]
        text = f"Δ = ours − paper; bold when |Δ| > {DELTA_FLAG}: {len(far)} of {len(flagged)} numbers."
        if judged:
            outside = sum(r.paper_outside for r in judged)
            text += (
                " Ours come with a 95 % bootstrap interval over the test images; † marks a paper number "
                f"outside it: {outside} of {len(judged)}."
            )
        return text

    def _settings(self, ws: Workspace) -> list[list[str]]:
        """The run's settings table: sample counts, overrides, seeds and machine."""
        p = ws.profile
        own = p.experiment_overrides.get(self.name, {})  # the values this experiment runs with
        test_samples = (
            str(own["test_samples"]) if "test_samples" in own else f"{p.test_samples} / {p.glow_test_samples}"
        )
        return [
            ["fit images (Fisher / detector fit)", str(own.get("fit_samples", p.fit_samples))],
            ["ROSE layer-statistics images", str(own.get("stats_samples", p.stats_samples))],
            ["test images per set (VAE / Glow)", test_samples],
            [
                "fewer test images for slow methods",
                ", ".join(f"{m}: {n}" for m, n in p.test_limits.items()) or "none",
            ],
            ["'overall' images per OOD set", str(p.overall_per_set)],
            ["bootstrap resamples for our intervals", str(p.bootstrap) if p.bootstrap else "none"],
            [
                "detector settings changed by the profile",
                json.dumps(p.detector_kwargs, ensure_ascii=False) if p.detector_kwargs else "none",
            ],
            ["this experiment's own overrides", json.dumps(own, ensure_ascii=False) if own else "none"],
            [
                "seeds",
                "training 0 (a model named …-sN: N); evaluation 2021 (+ a per-set offset derived from the "
                "set's name)",
            ],
            ["machine", ", ".join(f"{k} {v}" for k, v in machine_description().items())],
        ]

    def write(self, out: Path, ws: Workspace, wall_seconds: float) -> Path:
        """Write ``report.md`` (header, then the sections) and ``results.json`` into ``out``."""
        out.mkdir(parents=True, exist_ok=True)
        p = ws.profile
        header = [
            f"# {self.title}",
            (
                "Beyond the ROSE paper."
                if self.paper_ref == "beyond the paper"
                else f"Reproduces {self.paper_ref} of the ROSE paper."
            )
            + f" Profile **{p.name}** — cuts: {p.cuts}. "
            f"Wall time {wall_seconds / 60:.1f} min (cached models, detectors and scores are reused, so a "
            "re-run is faster). " + self._summary(),
            "## Run",
            markdown_rows(["setting", "value"], self._settings(ws)),
            "### Models",
            markdown_rows(
                ["model", "epochs", "training images", "this run"],
                [_model_row(name, t) for name, t in ws.trained.items()],
            )
            if ws.trained
            else "No trained models (this experiment needs none).",
        ]
        write_text(out / "report.md", "\n\n".join(header + self.parts) + "\n")
        payload = {
            "experiment": self.name,
            "title": self.title,
            "profile": p.settings(),
            "wall_seconds": wall_seconds,
            "models": ws.trained,
            "machine": machine_description(),
            "results": self.results,
            "headers": self.headers,
            "figures": self.figures,
            "comparison": [r.to_json(table) for r, table in zip(self.rows, self.tables, strict=True)],
        }
        write_json(out / "results.json", payload, indent=1)
        return out / "report.md"
