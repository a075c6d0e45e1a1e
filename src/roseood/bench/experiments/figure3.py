"""Figure 3: ROC curves of NLL and ROSE on the VAEs."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import (
    BOTH,
    FIGURE_OOD,
    Experiment,
    Uses,
    compare_rows,
    evaluate_variants,
    note_missing,
)
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.plots import plot_roc

METHODS = ("nll", "rose-ekfac")
USES = Uses(models=("vae",), data=BOTH, methods=METHODS, outputs=("figure3",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        result = evaluate_variants(
            ws, ws.model(ws.vae(data)), data, FIGURE_OOD[data], {m: (m, {}) for m in METHODS}
        )
        rows = compare_rows(result, "figure3", f"vae/{data}", FIGURE_OOD[data], {m: m for m in METHODS})
        rep.compare(f"AUROC in the ROC figure, VAE on {data}", ("OOD set", "method"), rows)
        for ood in result.ood_sets:
            fig = plot_roc(result, ood, out / f"roc_{data}_{ood}.png")
            rep.figure(fig, f"ROC curves of NLL and ROSE, VAE trained on {data} vs {ood}", out)
        note_missing(rep, result)
        rep.results[f"vae/{data}"] = result.to_json()


EXPERIMENT = Experiment("figure3", "ROC curves of NLL and ROSE", "Figure 3", run, USES)
