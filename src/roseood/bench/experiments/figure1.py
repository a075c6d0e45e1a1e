"""Figure 1: NLL histograms, in-distribution vs OOD, for the VAE and Glow."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import (
    BOTH,
    FIGURE_OOD,
    Experiment,
    Uses,
    evaluate_variants,
    note_missing,
)
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.plots import plot_histograms

USES = Uses(models=("vae", "glow"), data=BOTH, methods=("nll",), outputs=("figure1",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for kind in ws.select_models(("vae", "glow")):
        for data in ws.select_data():
            model = ws.model(ws.vae(data) if kind == "vae" else ws.glow(data))
            result = evaluate_variants(ws, model, data, FIGURE_OOD[data], {"nll": ("nll", {})})
            fig = plot_histograms(result, "nll", out / f"nll_{kind}_{data}.png")
            rep.figure(fig, f"NLL histograms, {kind.upper()} trained on {data} (higher = less likely)", out)
            rep.results[f"{kind}/{data}"] = result.to_json()
            note_missing(rep, result)


EXPERIMENT = Experiment(
    "figure1", "NLL histograms of in- and out-of-distribution images", "Figure 1", run, USES
)
