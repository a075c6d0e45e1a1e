"""Figure 4: scoring speed vs overall AUROC of every method on the CIFAR-10 VAE."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments import common
from roseood.bench.paper import paper_value
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.plots import plot_scatter
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.splits import OVERALL

METHODS = ("rose-ekfac", "rose-diag", "nll", "lr", "lratio", "ic-png", "ic-jp2")
DATA = "cifar10"
USES = common.Uses(models=("vae", "background vae"), data=(DATA,), methods=METHODS, outputs=("figure4",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    recipe = ws.vae(DATA)
    variants: common.Variants = {m: (m, {}) for m in METHODS}
    variants["lratio"] = ("lratio", common.with_background(ws, recipe))
    result = common.evaluate_variants(ws, ws.model(recipe), DATA, common.OOD_SETS[DATA], variants)
    metrics = result.metrics()
    points = {
        m: (result.images_per_second[m], common.metric_of(metrics, m, OVERALL) or float("nan"))
        for m in variants
    }
    fig = plot_scatter(
        points, out / "runtime_vs_auroc.png", "images per second (log)", "AUROC on overall", "VAE on CIFAR-10"
    )
    lines = [
        [
            m,
            f"{ips:.2f}",
            f"{auc:.3f}",
            str(paper_value("figure4", f"vae/{DATA}/{m}/images_per_second") or "–"),
        ]
        for m, (ips, auc) in points.items()
    ]
    rep.section(
        "Speed and overall AUROC per method (VAE on CIFAR-10)",
        "images/s: scoring the in-distribution test set on this machine; the paper's speeds were measured on "
        "an RTX 3090 GPU, so only the ordering compares.",
        markdown_rows(["method", "images/s", "overall AUROC", "paper images/s (GPU)"], lines),
    )
    rep.compare(
        "Overall AUROC",
        ("OOD set", "method"),
        common.compare_rows(result, "figure4", f"vae/{DATA}", [OVERALL], {"rose-ekfac": "rose-ekfac"}),
    )
    rep.figure(fig, "Runtime (images/s, log scale) vs overall AUROC of each method", out)
    rep.results["points"] = points


EXPERIMENT = common.Experiment("figure4", "Runtime vs overall AUROC per method", "Figure 4", run, USES)
