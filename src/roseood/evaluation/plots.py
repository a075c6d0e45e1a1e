"""Figures for evaluation reports and the paper: ROC curves, score histograms, line and box plots, image rows.

Figures are built with matplotlib's object API on an Agg canvas, never through pyplot: nothing can
open a window, no global figure registry fills up (a figure is freed once its function returns), and
the functions are safe to call from scripts, tests and worker threads alike. Output is PNG at 120 dpi.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from roseood.evaluation.gallery import tile
from roseood.evaluation.metrics import roc_points
from roseood.evaluation.result import AcrossModels, EvaluationResult
from roseood.serialization import atomic_write, printable

DPI = 120
HIST_BINS = 60
ROBUST_PERCENTILES = (0.5, 99.5)  # per-set histogram range; values beyond go into the edge bins
LOG_DECADES = 3.0  # robust range spanning at least this many powers of ten -> log or symlog x axis


def _figure(width: float = 6.4, height: float = 4.4) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG; set names in its text that are not UTF-8 are drawn as ``printable``."""
    for text in fig.findobj(Text):
        text.set_text(printable(text.get_text()))
    return atomic_write(path, lambda f: fig.savefig(f, dpi=DPI, format="png"))


def _no_data(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")


def plot_roc(result: EvaluationResult, ood_set: str, path: str | Path) -> Path:
    """ROC curve of every method on ``ood_set`` (in-distribution positive), AUROC in the legend.

    x is the fraction of OOD images accepted as in-distribution, y the fraction of in-distribution
    images accepted, as in the paper's FPR80/FPR95 convention. Methods without scores for the set
    are left out.
    """
    fig, ax = _figure(5.6, 5.2)
    ax.plot([0, 1], [0, 1], ls="--", lw=1, color="0.6", label="chance")
    plotted = False
    for i, (method, per_set) in enumerate(result.scores.items()):  # colour i: same method, same colour
        if ood_set not in per_set or result.in_name not in per_set:
            continue
        fpr, tpr = roc_points(per_set[result.in_name], per_set[ood_set])
        auroc = float(np.trapezoid(tpr, fpr))
        ax.plot(fpr, tpr, lw=1.8, color=f"C{i}", label=f"{method} (AUROC {auroc:.3f})")
        plotted = True
    if not plotted:
        _no_data(ax, f"no scores for {ood_set}")
    ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), aspect="equal")
    ax.set_xlabel(f"false positive rate ({ood_set} accepted)")
    ax.set_ylabel(f"true positive rate ({result.in_name} accepted)")
    ax.set_title(f"{result.in_name} vs {ood_set}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    return _save(fig, path)


def plot_across_models(across: AcrossModels, metric: str, path: str | Path) -> Path:
    """One point per model and metric value, a column per OOD set and method, the mean as a bar:
    how far the training seed alone moves each result."""
    per_model = across.metrics()
    methods, sets = across.first.methods, across.first.ood_sets
    fig, ax = _figure(max(4.0, 1.2 * len(sets) * len(methods) + 2.0), 4.2)
    offsets = np.linspace(-0.3, 0.3, len(methods)) if len(methods) > 1 else np.zeros(1)
    for i, method in enumerate(methods):
        for j, ood_set in enumerate(sets):
            values = [m[method][ood_set][metric] for m in per_model.values()]
            x = j + offsets[i]
            ax.scatter(
                np.full(len(values), x),
                values,
                s=18,
                color=f"C{i}",
                alpha=0.8,
                label=method if j == 0 else None,
            )
            ax.hlines(np.mean(values), x - 0.08, x + 0.08, color=f"C{i}", lw=2.2)
    ax.set_xticks(range(len(sets)), sets)
    ax.set_ylabel(metric.upper())
    ax.set_title(f"{metric.upper()} of {len(per_model)} models (bar: mean)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=9)
    return _save(fig, path)


def histogram_scale(sets: Sequence[np.ndarray]) -> tuple[str, float]:
    """Choose the histogram x axis from the data: ``(scale, symlog_linthresh)``.

    Scores like ROSE's or fine-tuned NLL differences can span many orders of magnitude, which
    squashes a linear histogram into one bar. When the robust range (union over sets) covers at
    least ``LOG_DECADES`` decades, use ``log`` if it is positive, otherwise ``symlog`` whose linear
    region covers the bulk (90th percentile of |score|) of the tightest set, so that bulk is not
    stretched over empty decades; else ``linear``.
    """
    lo, hi = _robust_range(sets)
    if lo > 0:
        return ("log" if hi / lo >= 10**LOG_DECADES else "linear"), 0.0
    typical = [float(np.percentile(np.abs(s), 90)) for s in sets]
    linthresh = min((t for t in typical if t > 0), default=0.0)
    if linthresh == 0:
        return "linear", 0.0
    return ("symlog", linthresh) if max(-lo, hi) / linthresh >= 10**LOG_DECADES else ("linear", 0.0)


def _robust_range(sets: Sequence[np.ndarray]) -> tuple[float, float]:
    """Union of the sets' percentile ranges, so a small OOD set is never cut off by a large one."""
    ranges = np.array([np.percentile(s, ROBUST_PERCENTILES) for s in sets])
    return float(ranges[:, 0].min()), float(ranges[:, 1].max())


def _symlog_ticks(lo: float, hi: float, linthresh: float) -> list[float]:
    """0 and the powers of ten outside the linear region: matplotlib's default crowds labels near 0."""
    exponents = range(math.ceil(math.log10(linthresh)), math.floor(math.log10(max(-lo, hi))) + 1)
    ticks = [0.0] + [sign * 10.0**k for k in exponents for sign in (-1, 1)]
    return sorted(t for t in ticks if lo <= t <= hi)


def plot_histograms(
    result: EvaluationResult,
    method: str,
    path: str | Path,
    threshold: float | None = None,
    threshold_label: str = "threshold",
) -> Path:
    """Score histograms of the in-distribution set and every OOD set for one method (see
    ``plot_score_histograms``); each OOD set keeps its colour across methods."""
    per_set = result.scores.get(method, {})
    sets = {s: np.asarray(per_set.get(s, ()), float) for s in (result.in_name, *result.ood_sets)}
    return plot_score_histograms(
        sets,
        path,
        f"{method}: scores on {result.in_name} and OOD sets",
        reference=result.in_name,
        threshold=threshold,
        threshold_label=threshold_label,
        empty=f"no finite scores for {method}",
    )


def _shared_bins(ax: Axes, values: list[np.ndarray]) -> tuple[str, list[float]]:
    """Set ``ax``'s x scale (linear, log or symlog) for ``values`` and return it with one set of bins for
    all of them, equal-width on that axis over their robust range."""
    scale, linthresh = histogram_scale(values)
    lo, hi = _robust_range(values)
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=linthresh)
        ax.set_xticks(_symlog_ticks(lo, hi, linthresh))
    else:
        ax.set_xscale(scale)
    if lo == hi:  # all scores equal: give the single bar some width
        pad = 0.05 * abs(lo) or 0.5
        lo, hi = lo - pad, hi + pad
    to_axis = ax.xaxis.get_transform()
    axis_lo, axis_hi = to_axis.transform(np.array([lo, hi]))
    return scale, to_axis.inverted().transform(np.linspace(axis_lo, axis_hi, HIST_BINS + 1)).tolist()


def plot_score_histograms(
    sets: Mapping[str, np.ndarray],
    path: str | Path,
    title: str,
    reference: str | None = None,
    threshold: float | None = None,
    threshold_label: str = "threshold",
    empty: str = "no finite scores",
) -> Path:
    """Histograms of the scores of each set, the ``reference`` (in-distribution) set filled in grey,
    the others outlined in colour ``C0, C1, ...`` in their order; ``threshold`` a dashed red line.

    All sets share one set of bins, equal-width on the displayed (linear, log or symlog) axis and
    spanning the robust range; values outside it are counted in the edge bins. Bar heights are the
    fraction of each set's images per bin, so sets of different sizes compare directly.
    Non-finite scores are dropped and counted in the legend.
    """
    fig, ax = _figure()
    ax.set_title(title)
    ax.set_xlabel("score (higher = more OOD)")
    ax.set_ylabel("fraction of images per bin")
    raw = {s: np.asarray(v, float).ravel() for s, v in sets.items()}
    colours = {s: f"C{i}" for i, s in enumerate(s for s in raw if s != reference)}
    finite = {s: v[np.isfinite(v)] for s, v in raw.items()}
    finite = {s: v for s, v in finite.items() if v.size}
    if not finite:
        _no_data(ax, empty)
        return _save(fig, path)

    scale, bins = _shared_bins(ax, list(finite.values()))
    for name, values in finite.items():
        is_ref = name == reference
        label = f"{name} ({'in-distribution, ' if is_ref else ''}n={values.size}"
        dropped = raw[name].size - values.size
        label += f", {dropped} non-finite dropped)" if dropped else ")"
        ax.hist(
            np.clip(values, bins[0], bins[-1]),
            bins=bins,
            weights=np.full(values.size, 1 / values.size),
            histtype="stepfilled" if is_ref else "step",
            alpha=0.35 if is_ref else 1.0,
            lw=1.6,
            color="0.25" if is_ref else colours[name],
            label=label,
        )
    if threshold is not None and math.isfinite(threshold) and (scale != "log" or threshold > 0):
        ax.axvline(threshold, color="red", ls="--", lw=1.6, label=f"{threshold_label}: {threshold:.4g}")
    ax.legend(fontsize=8, title="edge bins include outliers", title_fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_lines(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    path: str | Path,
    xlabel: str,
    ylabel: str,
    title: str,
    xscale: str = "linear",
) -> Path:
    """One line with markers per series over shared ``x`` (e.g. AUROC vs number of Fisher samples)."""
    fig, ax = _figure()
    for name, ys in series.items():
        if len(ys) != len(x):
            raise ValueError(f"series {name!r} has {len(ys)} values for {len(x)} x positions")
        ax.plot(x, ys, marker="o", lw=1.6, label=name)
    ax.set_xscale(xscale)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if len(series) > 5:  # many lines: keep the legend off the data
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    elif series:
        ax.legend(fontsize=9)
    return _save(fig, path)


def plot_box(
    groups: Mapping[str, Sequence[float]], path: str | Path, xlabel: str, ylabel: str, title: str
) -> Path:
    """A box plot per x group with the individual values overlaid, for spreads over seeds or draws."""
    fig, ax = _figure()
    values = [np.asarray(v, float) for v in groups.values()]
    ax.boxplot(values, tick_labels=list(groups), showfliers=False)
    for i, v in enumerate(values, start=1):
        offsets = np.linspace(-0.12, 0.12, v.size) if v.size > 1 else np.zeros(v.size)
        ax.scatter(i + offsets, v, s=12, color="C0", alpha=0.7, zorder=3)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def plot_scatter(
    points: Mapping[str, tuple[float, float]],
    path: str | Path,
    xlabel: str,
    ylabel: str,
    title: str,
    xscale: str = "log",
) -> Path:
    """One labelled point per entry (e.g. a method's images/s vs its AUROC, the paper's Figure 4)."""
    fig, ax = _figure()
    for i, (name, (x, y)) in enumerate(points.items()):
        ax.scatter([x], [y], s=40, color=f"C{i % 10}", zorder=3)
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    if not points:
        _no_data(ax, "no points")
    ax.set_xscale(xscale)
    if xscale == "log":  # plain numbers at 1, 2, 5 × 10^k instead of 2×10^1
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_image_rows(rows: Mapping[str, np.ndarray], path: str | Path, title: str) -> Path:
    """One labelled strip of uint8 images (N, C, H, W) per row, drawn pixel for pixel (the paper's Figure 2:
    the same images at each brightness)."""
    fig = Figure(figsize=(5.6, 0.4 + 0.7 * max(len(rows), 1)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(len(rows), 1), 1, squeeze=False)[:, 0]
    for ax, (label, images) in zip(axes, rows.items(), strict=False):
        strip = tile(images, columns=len(images))
        shown = strip[..., 0] if strip.shape[2] == 1 else strip
        ax.imshow(shown, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(label, rotation=0, ha="right", va="center")
    if not rows:
        _no_data(axes[0], "no images")
    fig.suptitle(title)
    return _save(fig, path)
