"""Human-readable reports of evaluation runs: Markdown with tables and figures, plus an HTML index.

``write_report`` turns one ``EvaluationResult`` into a directory a person can read on GitHub
(``report.md`` with its PNG figures) and a machine can reload (``results.json``, ``scores.npz``).
``write_index`` collects every report under a results tree into one ``index.html``; it also renders
each ``report.md`` to ``report.html`` with a tiny built-in converter (only the Markdown that
``write_report`` emits), so figures show in a browser without any extra dependency.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from roseood.evaluation.metrics import METRICS
from roseood.evaluation.plots import plot_across_models, plot_histograms, plot_roc
from roseood.evaluation.result import AcrossModels, EvaluationResult, metric_text, spread_text
from roseood.serialization import write_text

METRIC_TITLES = {
    "auroc": "AUROC (higher is better)",
    "auprc": "AUPRC, in-distribution positive (higher is better)",
    "fpr80": "FPR at 80 % TPR (lower is better)",
    "fpr95": "FPR at 95 % TPR (lower is better)",
}
LOWER_IS_BETTER = {"fpr80", "fpr95"}

_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .6rem}"
    "th{background:#f3f3f3}img{max-width:100%;margin:.5rem 0}"
)


def markdown_rows(header: list[str], rows: list[list[str]]) -> str:
    """GitHub-flavoured Markdown table from a header and rows of cell strings.

    Pipes are escaped and line breaks flattened so that names or reasons containing them cannot
    break the table.
    """

    def line(items: list[str]) -> str:
        return "| " + " | ".join(item.replace("|", r"\|").replace("\n", " ") for item in items) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])


def markdown_table(
    rows: list[str], cols: list[str], cell: Callable[[str, str], str], corner: str = ""
) -> str:
    """Markdown table with row labels in the first column (header ``corner``), ``cell(row, col)`` after."""
    return markdown_rows([corner, *cols], [[row, *(cell(row, col) for col in cols)] for row in rows])


def safe_name(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_``, for file names."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _setting_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


def _is_best(printed: dict[str, str], method: str, metric: str) -> bool:
    """Whether ``method``'s printed value is the best of several in a row: printed values are compared,
    so that ties as the reader sees them are all bold."""
    pick = min if metric in LOWER_IS_BETTER else max
    return len(printed) > 1 and printed[method] == pick(printed.values(), key=float)


def _metric_table(
    result: EvaluationResult, metrics: dict[str, dict[str, dict[str, float]]], metric: str
) -> str:
    """Rows: OOD sets (then missing sets), columns: methods; 3 decimals, best value(s) per row bold, and
    each value's bootstrap interval when the result has them."""
    rows = result.ood_sets + [s for s in result.missing if s not in result.ood_sets]

    def cell(ood_set: str, method: str) -> str:
        values = {m: f"{per[ood_set][metric]:.3f}" for m, per in metrics.items() if ood_set in per}
        if method not in values:
            return "no data" if ood_set in result.missing else "–"  # why: once, under the tables
        interval = result.interval(method, ood_set, metric)
        return metric_text(values[method], interval, _is_best(values, method, metric))

    return markdown_table(rows, result.methods, cell, corner="OOD set")


def missing_lines(result: EvaluationResult) -> list[str]:
    """Why each named OOD set has no data, one line each: said once, where its table rows say "no data"."""
    return [f"no data for {name}: {why}" for name, why in result.missing.items()]


def write_report(
    result: EvaluationResult,
    out_dir: str | Path,
    title: str = "OOD evaluation",
    notes: list[str] | None = None,
) -> Path:
    """Write ``report.md`` with settings, metric tables, throughput, notes and figures into ``out_dir``.

    Alongside it: ``roc_<set>.png`` per OOD set, ``hist_<method>.png`` per method, ``results.json``
    (settings and metrics) and ``scores.npz`` (raw scores, for re-plotting). Returns the report path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = result.metrics()
    result.write_json(out / "results.json")
    result.save_scores(out / "scores.npz")

    parts = [
        f"# {title}",
        f"In-distribution set: **{result.in_name}**. Scores are higher = more OOD; metrics treat the "
        "in-distribution set as positive.",
        "## Settings",
        markdown_table(
            list(result.settings), ["value"], lambda k, _: _setting_text(result.settings[k]), "setting"
        ),
    ]
    for metric in METRICS:
        parts += [f"## {METRIC_TITLES[metric]}", _metric_table(result, metrics, metric)]
    if result.missing:
        parts += ["## OOD sets without data", "\n".join(f"- {line}" for line in missing_lines(result))]
    if result.images_per_second:
        speed = result.images_per_second
        parts += [
            "## Throughput",
            markdown_table(list(speed), ["images/s"], lambda m, _: f"{speed[m]:,.1f}", "method"),
        ]
    if notes:
        parts += ["## Notes", "\n".join(f"- {note}" for note in notes)]

    parts.append("## Figures")
    if result.ood_sets:
        parts.append("### ROC curves")
    for ood_set in result.ood_sets:
        name = f"roc_{safe_name(ood_set)}.png"
        plot_roc(result, ood_set, out / name)
        parts.append(f"![ROC {result.in_name} vs {ood_set}]({name})")
    if result.methods:
        parts.append("### Score histograms")
    for method in result.methods:
        name = f"hist_{safe_name(method)}.png"
        plot_histograms(result, method, out / name)
        parts.append(f"![score histograms of {method}]({name})")

    report = out / "report.md"
    write_text(report, "\n\n".join(parts) + "\n")
    return report


def write_across_report(across: AcrossModels, out_dir: str | Path, title: str = "OOD evaluation") -> Path:
    """Write one report per model into ``out_dir/<model>/`` (``write_report``) and ``out_dir/report.md``:
    the settings they share, every metric's mean ± sd (min–max) across the models, each model's AUROC,
    and a plot of the per-model values. Returns the top-level report path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    folders = {}
    for name, result in across.results.items():
        folders[name] = safe_name(name)
        write_report(result, out / folders[name], title=f"{title}: {name}")
    across.write_json(out / "results.json")
    first, spread = across.first, across.spread()
    shared = across.shared_settings()
    parts = [
        f"# {title} across {len(across.results)} models",
        f"In-distribution set: **{first.in_name}**. The same images and settings for every model, so the "
        "spread below comes from the models alone (e.g. their training seeds). Cells: mean ± sd "
        "(min–max) over the models.",
        "## Shared settings",
        markdown_table(list(shared), ["value"], lambda k, _: _setting_text(shared[k]), "setting"),
    ]
    for metric in METRICS:

        def cell(ood_set: str, method: str, metric: str = metric) -> str:
            means = {m: f"{spread[m][ood_set][metric]['mean']:.3f}" for m in first.methods}
            return spread_text(spread[method][ood_set][metric], _is_best(means, method, metric))

        table = markdown_table(first.ood_sets, first.methods, cell, "OOD set")
        parts += [f"## {METRIC_TITLES[metric]}", table]
    columns = [f"{m} / {s}" for m in first.methods for s in first.ood_sets]
    aurocs = across.metrics()
    parts += [
        "## AUROC of each model",
        markdown_rows(
            ["model", *columns, "report"],
            [
                [
                    name,
                    *(f"{aurocs[name][m][s]['auroc']:.3f}" for m in first.methods for s in first.ood_sets),
                    f"[{name}]({quote(folders[name])}/report.md)",
                ]
                for name in across.results
            ],
        ),
        "## Figures",
        f"![AUROC of each model]({plot_across_models(across, 'auroc', out / 'auroc_models.png').name})",
    ]
    report = out / "report.md"
    write_text(report, "\n\n".join(parts) + "\n")
    return report


def _inline(text: str) -> str:
    """Escape HTML, then render images, links and bold: the inline Markdown ``write_report`` uses."""
    text = html.escape(text, quote=True)
    text = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", r'<img alt="\1" src="\2">', text)
    text = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', text)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)


def _table_cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [_inline(c.strip().replace(r"\|", "|")) for c in cells]


def markdown_to_html(markdown: str, title: str) -> str:
    """Minimal Markdown → HTML page: headings, pipe tables, bullet lists, images, links, bold, paragraphs."""
    body: list[str] = []
    for block in re.split(r"\n\s*\n", markdown.strip()):
        lines = block.splitlines()
        heading = re.match(r"(#{1,6}) (.*)", lines[0])
        if heading and len(lines) == 1:
            level = len(heading.group(1))
            body.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif all(line.lstrip().startswith("|") for line in lines) and len(lines) >= 2:
            head = "".join(f"<th>{c}</th>" for c in _table_cells(lines[0]))
            rows = [
                "<tr>" + "".join(f"<td>{c}</td>" for c in _table_cells(line)) + "</tr>" for line in lines[2:]
            ]
            body.append(f"<table>\n<tr>{head}</tr>\n" + "\n".join(rows) + "\n</table>")
        elif all(line.startswith("- ") for line in lines):
            body.append("<ul>\n" + "\n".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "\n</ul>")
        else:
            body.append(f"<p>{_inline(' '.join(lines))}</p>")
    return html_page(title, "\n".join(body))


def html_page(title: str, body: str, css: str = "") -> str:
    """A complete HTML page: ``title`` (escaped here), the reports' style sheet plus ``css``, ``body``."""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{_CSS}{css}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def _report_title(markdown: str, fallback: str) -> str:
    return next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), fallback)


def write_index(results_dir: str | Path) -> Path:
    """Write ``results_dir/index.html`` linking every ``report.md`` below it (each rendered to HTML).

    Reports are listed sorted by path, with their title (first ``# `` line) and directory; links are
    relative, so the tree can be moved or served as static files.
    """
    root = Path(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for report in sorted(root.rglob("report.md")):
        markdown = report.read_text()
        directory = report.parent.relative_to(root).as_posix()
        title = _report_title(markdown, directory)
        page = report.with_suffix(".html")
        write_text(page, markdown_to_html(markdown, title))
        href = quote(page.relative_to(root).as_posix(), errors="surrogateescape")
        md_href = quote(report.relative_to(root).as_posix(), errors="surrogateescape")
        rows.append(
            f'<tr><td><a href="{href}">{html.escape(title)}</a></td><td>{html.escape(directory)}</td>'
            f'<td><a href="{md_href}">markdown</a></td></tr>'
        )
    if rows:
        body = (
            "<table>\n<tr><th>report</th><th>directory</th><th>source</th></tr>\n"
            + "\n".join(rows)
            + "\n</table>"
        )
    else:
        body = "<p>No reports found.</p>"
    index = root / "index.html"
    write_text(index, html_page("Evaluation reports", f"<h1>Evaluation reports</h1>\n{body}"))
    return index
