"""Tables 2, 4 and 5: AUROC, AUPRC and FPR80 of ROSE and every baseline on the VAE and Glow."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import (
    BOTH,
    OOD_SETS,
    Experiment,
    Variants,
    compare_rows,
    evaluate_variants,
    sub_report,
    with_background,
)
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.report import METRIC_TITLES

METHODS = {
    "vae": ["rose-ekfac", "lr", "nll", "lratio", "ic-png", "ic-jp2"],
    "glow": ["rose-diag", "lratio", "ic-png", "ic-jp2"],  # ROSE on Glow: diagonal, InvConv layers (App. B.2)
}
TABLES = (("table2", "auroc"), ("table4", "auprc"), ("table5", "fpr80"))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for kind in ws.select_models(EXPERIMENT.models):
        for data in ws.select_data():
            recipe = ws.vae(data) if kind == "vae" else ws.glow(data)
            methods = METHODS[kind]
            variants: Variants = {m: (m, {}) for m in methods}
            variants["lratio"] = ("lratio", with_background(ws, recipe))
            result = evaluate_variants(ws, ws.model(recipe), data, OOD_SETS[data], variants)
            for table, metric in TABLES:
                rows = compare_rows(
                    result, table, f"{kind}/{data}", OOD_SETS[data], {m: m for m in methods}, metric
                )
                rep.compare(
                    f"{METRIC_TITLES[metric]}: {kind.upper()} on {data} ({table})",
                    ("OOD set", "method"),
                    rows,
                )
            sub_report(rep, result, out, f"{kind}-{data}", f"{kind.upper()} trained on {data}: all methods")


EXPERIMENT = Experiment(
    "table2",
    "AUROC, AUPRC and FPR80 of every method",
    "Tables 2, 4 and 5",
    run,
    models=("vae", "glow"),
    data=BOTH,
    methods=tuple(dict.fromkeys(METHODS["vae"] + METHODS["glow"])),
    outputs=tuple(t for t, _ in TABLES),
)
