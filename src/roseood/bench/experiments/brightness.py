"""Tables 1, 8 and 9: AUROC of LRatio, RND and ROSE as the OOD images get darker or brighter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from roseood.bench.experiments.common import (
    Experiment,
    Uses,
    Variants,
    evaluate_variants,
    metric_of,
    rnd_method,
    with_background,
)
from roseood.bench.paper import paper_value
from roseood.bench.report import BenchReport, Row, ours_paper
from roseood.bench.workspace import ModelRecipe, Workspace
from roseood.evaluation.plots import plot_lines
from roseood.evaluation.report import markdown_rows

PERTURBATIONS = ["svd:28", "dct:28", "gb", "random:0.2"]  # Table 1's settings (App. B.3)
TABLES = {"celeba": "table1", "svhn": "table8", "omniglot": "table9"}
DATA = "cifar10"
METHODS = (
    *(f"lratio {p}" for p in PERTURBATIONS),
    *(f"{rnd_method(p)} {p}" for p in PERTURBATIONS),
    "rose-ekfac",
)
MODELS = ("vae", *(f"background vae {p}" for p in PERTURBATIONS))
USES = Uses(
    MODELS, (DATA, *(f"{ood} × brightness" for ood in TABLES)), METHODS, (*TABLES.values(), "figures")
)


def variants_of(ws: Workspace, recipe: ModelRecipe) -> Variants:
    """LRatio with a background per perturbation, RND per perturbation, and ROSE (Table 1's rows)."""
    variants: Variants = {f"lratio/{p}": ("lratio", with_background(ws, recipe, p)) for p in PERTURBATIONS}
    variants |= {f"{rnd_method(p)}/{p}": (rnd_method(p), {"perturbation": p}) for p in PERTURBATIONS}
    variants["rose-ekfac"] = ("rose-ekfac", {})
    return variants


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    recipe = ws.vae(DATA)
    model = ws.model(recipe)
    variants = variants_of(ws, recipe)
    levels = ws.profile.brightness
    auroc: dict[str, dict[str, list[float | None]]] = {ood: {v: [] for v in variants} for ood in TABLES}
    for b in levels:
        metrics = evaluate_variants(ws, model, DATA, list(TABLES), variants, brightness=b).metrics()
        for ood in TABLES:
            for v in variants:
                auroc[ood][v].append(metric_of(metrics, v, ood))
    rep.results["auroc"] = auroc
    rep.results["brightness"] = list(levels)
    for ood, table in TABLES.items():
        if all(x is None for per in auroc[ood].values() for x in per):
            rep.section(f"{ood} ({table}): no data", f"The {ood} files are not in the data folder.")
            continue
        header = ["method / perturbation", *(f"{b:g}×" for b in levels), "mean", "std"]
        lines, rows = [], []
        for v, values in auroc[ood].items():
            vals = np.array([np.nan if x is None else x for x in values])
            mean, std = float(np.nanmean(vals)), float(np.nanstd(vals))
            paper = [paper_value(table, f"vae/{DATA}/{ood}/{v}/brightness:{b:g}/auroc") for b in levels]
            pm, ps = (paper_value(table, f"vae/{DATA}/{ood}/{v}/auroc/{s}") for s in ("mean", "std"))
            cells = [ours_paper(x, p) for x, p in zip([*vals, mean, std], [*paper, pm, ps], strict=True)]
            lines.append([v, *cells])
            rows += [Row((v, "mean"), mean, pm), Row((v, "std"), std, ps)]
        rep.section(
            f"AUROC vs brightness of {ood}, VAE on CIFAR-10 ({table}): ours (paper)",
            markdown_rows(header, lines),
        )
        rep.compare(f"Mean and std over brightness, {ood}", ("method", "statistic"), rows)
        fig = plot_lines(
            list(levels),
            {v: [np.nan if x is None else x for x in vals] for v, vals in auroc[ood].items()},
            out / f"brightness_{ood}.png",
            xlabel=f"brightness factor of {ood}",
            ylabel="AUROC",
            title=f"VAE on CIFAR-10 vs {ood} at varying brightness",
        )
        rep.figure(fig, f"AUROC of each method vs the brightness of {ood} (VAE trained on CIFAR-10)", out)
    rep.parts.append(
        "Table 9 (Omniglot) used SVD with K = 22 in the paper; this run uses K = 28 for all three sets, "
        "so its SVD rows have no paper number."
    )


EXPERIMENT = Experiment(
    "brightness", "Robustness to the brightness of OOD images", "Tables 1, 8 and 9", run, USES
)
