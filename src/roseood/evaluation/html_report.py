"""The HTML page of ``rose score --report`` and ``rose evaluate --report``: what a person looks at.

``index.html`` shows the score histograms with the decision threshold, ROC curves (evaluations), and
the most and least OOD images of every set as thumbnails with their file names and scores. Figures and
thumbnails are PNG files beside the page (``figures/``, ``thumbs/``) under names made of indices only,
linked relatively: the folder opens from disk without a server and can be moved whole. Every name and
setting on the page is HTML-escaped; every file is written atomically.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from roseood.catalogue import DECISION_TPR
from roseood.evaluation.gallery import Example, Extremes
from roseood.evaluation.plots import plot_histograms, plot_roc, plot_score_histograms
from roseood.evaluation.report import html_page
from roseood.evaluation.result import EvaluationResult
from roseood.evaluation.scoring import flagged_text
from roseood.serialization import atomic_write, write_text

PAGE_OUTPUTS = (
    "index.html",
    "figures",
    "thumbs",
)  # what a page writes into its folder: replaced only on request
THUMB = 96  # largest thumbnail side in pixels; smaller images are shown enlarged, pixels kept sharp

_CSS = (
    "body{max-width:64rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd}"
    ".gallery{display:flex;flex-wrap:wrap;gap:.5rem;margin:.3rem 0 1rem}"
    ".gallery figure{margin:0;width:108px;font-size:.72rem;line-height:1.2}"
    ".gallery img{width:96px;height:96px;object-fit:contain;image-rendering:pixelated;margin:0;"
    "border:3px solid #8c8;background:#eee}"
    ".gallery figure.ood img{border-color:#d33}"
    ".gallery figcaption{overflow-wrap:anywhere}.score{color:#555}"
    ".figs{display:flex;flex-wrap:wrap;gap:1rem}.figs img{max-width:30rem}"
    ".note{color:#555;font-size:.9rem}"
)


def display_name(name: str) -> str:
    """A file name as readable text: bytes that are not UTF-8 (kept by Python as surrogates) as ``\\xNN``."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _esc(text: object) -> str:
    return html.escape(display_name(str(text)), quote=True)


def _write_thumbnail(image: np.ndarray, path: Path) -> None:
    """uint8 (C, H, W) → PNG, shrunk to ``THUMB`` pixels when larger (the page enlarges small ones)."""
    array = image[0] if image.shape[0] == 1 else image.transpose(1, 2, 0)
    img = Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8))
    if max(img.size) > THUMB:
        img.thumbnail((THUMB, THUMB), Image.Resampling.LANCZOS)
    atomic_write(path, lambda f: img.save(f, format="PNG"))


def _gallery(examples: tuple[Example, ...], out: Path, stem: str, threshold: float | None) -> str:
    """Thumbnails ``thumbs/{stem}_{rank}.png`` with name and score; a red frame: above the threshold."""
    figures = []
    for rank, ex in enumerate(examples):
        src = f"thumbs/{stem}_{rank}.png"
        _write_thumbnail(ex.image, out / src)
        ood = threshold is not None and ex.score > threshold
        name, frame, verdict = _esc(ex.name), ' class="ood"' if ood else "", " OOD" if ood else ""
        figures.append(
            f'<figure{frame}><img src="{src}" alt="{name}" title="{name}">'
            f'<figcaption>{name}<br><span class="score">{ex.score:.4g}{verdict}</span></figcaption></figure>'
        )
    return f'<div class="gallery">{"".join(figures)}</div>'


def _set_galleries(
    name: str, extremes: Extremes, out: Path, stem: str, threshold: float | None, flagged: str
) -> str:
    note = f'<p class="note">{flagged}</p>\n' if flagged else ""
    return (
        f"<h3>{_esc(name)}</h3>\n{note}<h4>Most OOD (highest scores)</h4>\n"
        + _gallery(extremes.most, out, f"{stem}_most", threshold)
        + "\n<h4>Least OOD (lowest scores)</h4>\n"
        + _gallery(extremes.least, out, f"{stem}_least", threshold)
    )


def _legend(threshold_text: str) -> str:
    return (
        f'<p class="note">Scores: higher = more out-of-distribution. {threshold_text} Red frames: '
        "images above the threshold (called OOD); green: below. Thumbnails show the images as the "
        "model saw them (after resizing and colour conversion).</p>"
    )


def write_score_page(
    out_dir: str | Path,
    scores: np.ndarray,
    extremes: Extremes,
    *,
    method: str,
    data_name: str,
    source: str,
    threshold: float | None,
    csv: str | None = None,
    classes: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """``out_dir/index.html`` for one scored set (``rose score --report``): the histogram of its scores
    with the threshold (one per class, and a line of each class's share, given ``classes``: a folder of
    class folders' scores by class), and its most and least OOD images. Returns the page's path."""
    out = Path(out_dir)
    hist = plot_score_histograms(
        dict(classes) if classes else {data_name: scores},
        out / "figures" / "hist_0.png",
        f"{method}: scores on {data_name}",
        threshold=threshold,
        threshold_label="threshold (OOD above)",
    )
    where = f" Every image's score and decision: <code>{_esc(csv)}</code>." if csv else ""
    cut = f"Threshold: {threshold:.6g}." if threshold is not None else "No threshold."
    title = f"{method} scores on {data_name}"
    shares = "".join(
        f"<li><code>{_esc(name)}</code>: {_esc(flagged_text(part, threshold))}</li>"
        for name, part in (classes or {}).items()
    )
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<p>{len(scores)} images from <code>{_esc(source)}</code>. {_esc(flagged_text(scores, threshold))}"
        f"{where}</p>",
        f"<ul>{shares}</ul>" if shares else "",
        _legend(cut),
        f'<img src="figures/{hist.name}" alt="histogram of the scores">',
        _set_galleries(data_name, extremes, out, "0_0", threshold, ""),
    ]
    return write_text(out / "index.html", html_page(title, "\n".join(body), _CSS))


def evaluation_thresholds(result: EvaluationResult, tpr: float = DECISION_TPR) -> dict[str, float]:
    """Each method's threshold at which a share ``tpr`` of the in-distribution test images score at or
    below it (the FPR95 operating point), for methods with one score per image."""
    out = {}
    for method, per_set in result.scores.items():
        scores = np.asarray(per_set.get(result.in_name, ()), float)
        scores = scores[np.isfinite(scores)] if scores.ndim == 1 else scores[:0]
        if scores.size:
            out[method] = float(np.quantile(scores, tpr, method="higher"))
    return out


def _auroc_table(result: EvaluationResult, metrics: Mapping[str, Any]) -> tuple[str, str]:
    """The AUROC table's header cells (one per method) and rows (one per OOD set), as HTML."""
    head = "".join(f"<th>{_esc(m)}</th>" for m in result.methods)
    rows = "".join(
        f"<tr><td>{_esc(s)}</td>"
        + "".join(
            f"<td>{metrics[m][s]['auroc']:.3f}</td>" if s in metrics[m] else "<td>–</td>"
            for m in result.methods
        )
        + "</tr>"
        for s in result.ood_sets
    )
    return head, rows


def write_evaluation_page(
    result: EvaluationResult,
    out_dir: str | Path,
    title: str = "OOD evaluation",
    thresholds: Mapping[str, float] | None = None,
) -> Path:
    """``out_dir/index.html`` for an evaluation (``rose evaluate --report``): AUROCs, ROC curves, and per
    method the histograms with its threshold and the galleries of ``result.examples``.

    ``thresholds`` (per method) default to ``evaluation_thresholds``: 95 % of the in-distribution test
    images below. Returns the page's path."""
    out = Path(out_dir)
    given = thresholds is not None
    cuts = dict(thresholds) if thresholds is not None else evaluation_thresholds(result)
    metrics = result.metrics()
    sets = result.ood_sets
    full = ' All metrics with intervals: <a href="report.md">report.md</a>.'
    cut_text = (
        "Thresholds: the ones given to the report."
        if given
        else f"Each method's threshold: {DECISION_TPR:.0%} of the {_esc(result.in_name)} test images at or "
        "below it."
    )
    head, rows = _auroc_table(result, metrics)
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<p>Model: {_esc(result.settings.get('model', '?'))}. In-distribution set: "
        f"<strong>{_esc(result.in_name)}</strong>; OOD sets: {_esc(', '.join(sets))}.</p>",
        '<h2>AUROC</h2>\n<p class="note">In-distribution = positive class; 0.5 is chance, 1 perfect.'
        f"{full if (out / 'report.md').exists() else ''}</p>\n"
        f"<table>\n<tr><th>OOD set</th>{head}</tr>\n{rows}\n</table>",
        _legend(cut_text),
    ]
    if sets:
        rocs = [plot_roc(result, s, out / "figures" / f"roc_{j}.png").name for j, s in enumerate(sets)]
        body.append(
            '<h2>ROC curves</h2>\n<div class="figs">'
            + "".join(f'<img src="figures/{name}" alt="ROC curve">' for name in rocs)
            + "</div>"
        )
    for i, method in enumerate(result.methods):
        cut = cuts.get(method)
        hist = plot_histograms(
            result, method, out / "figures" / f"hist_{i}.png", cut, "threshold (OOD above)"
        )
        body += [f"<h2>{_esc(method)}</h2>", f'<img src="figures/{hist.name}" alt="score histograms">']
        examples = result.examples.get(method, {})
        for j, name in enumerate([result.in_name, *sets]):
            if name in examples:
                flagged = _esc(flagged_text(result.scores[method][name], cut))
                body.append(_set_galleries(name, examples[name], out, f"{i}_{j}", cut, flagged))
    settings = json.dumps(result.settings, indent=1, default=str)
    body.append(f"<details><summary>Settings</summary><pre>{_esc(settings)}</pre></details>")
    return write_text(out / "index.html", html_page(title, "\n".join(body), _CSS))
