"""Tables 2, 4 and 5: AUROC, AUPRC and FPR80 of ROSE and every baseline on the VAE and Glow."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import BENCH_MODELS, Workspace
from roseood.evaluation.report import METRIC_TITLES

METHODS = {
    "vae": ["rose-ekfac", "lr", "nll", "lratio", "ic-png", "ic-jp2"],
    "glow": ["rose-diag", "lratio", "ic-png", "ic-jp2"],  # ROSE on Glow: diagonal, InvConv layers (App. B.2)
    "pixelcnn": ["rose-ekfac", "nll", "lratio", "ic-png", "ic-jp2"],  # not in the paper: "ours" only
}
TABLES = (("table2", "auroc"), ("table4", "auprc"), ("table5", "fpr80"))
USES = common.Uses(
    ("vae", "glow", "pixelcnn (with --models)", "their backgrounds"),
    common.BOTH,
    tuple(dict.fromkeys(m for ms in METHODS.values() for m in ms)),
    ("table2", "table4", "table5"),
)


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for kind in ws.select_models(BENCH_MODELS):
        for data in ws.select_data():
            recipe = ws.recipe(kind, data)
            model = ws.model(recipe)
            methods = METHODS[kind]
            variants: common.Variants = {m: (m, {}) for m in methods}
            variants["lratio"] = ("lratio", common.with_background(ws, recipe))
            sets = ws.ood_sets(data, common.OOD_SETS[data])
            result = common.evaluate_variants(ws, model, data, sets, variants)
            for table, metric in TABLES:
                rows = common.compare_rows(
                    result, table, f"{kind}/{data}", sets, {m: m for m in methods}, metric
                )
                rep.compare(
                    f"{METRIC_TITLES[metric]}: {kind.upper()} on {data} ({table})",
                    ("OOD set", "method"),
                    rows,
                )
            common.sub_report(
                rep, result, out, f"{kind}-{data}", f"{kind.upper()} trained on {data}: all methods"
            )


EXPERIMENT = common.Experiment(
    "table2", "AUROC, AUPRC and FPR80 of every method", "Tables 2, 4 and 5", run, USES
)
