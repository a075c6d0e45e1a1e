"""Table 3: ROSE-EKFAC AUROC on VAEs of 0.5x to 4x the paper's width."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import (
    BOTH,
    OOD_SETS,
    Experiment,
    Variants,
    compare_rows,
    evaluate_variants,
)
from roseood.bench.report import BenchReport, Row
from roseood.bench.workspace import Workspace

CAPACITIES = (0.5, 1.0, 2.0, 4.0)


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        rows: list[Row] = []
        for capacity in CAPACITIES:
            recipe = ws.vae(data, capacity)
            variants: Variants = {"rose-ekfac": ("rose-ekfac", {})}
            result = evaluate_variants(ws, ws.model(recipe), data, OOD_SETS[data], variants)
            label = f"{capacity:g}x"
            column = f"{label} (ngf {dict(recipe.arch)['ngf']})"
            prefix = f"vae/{data}/capacity:{label}"
            for row in compare_rows(result, "table3", prefix, OOD_SETS[data], {"rose-ekfac": "rose-ekfac"}):
                rows.append(Row((row.labels[0], column), row.ours, row.paper, row.why))
            rep.results[f"{data}/{label}"] = result.to_json()
        rep.compare(f"ROSE-EKFAC AUROC vs VAE capacity, {data}", ("OOD set", "capacity"), rows)


EXPERIMENT = Experiment(
    "table3",
    "ROSE vs VAE capacity",
    "Table 3",
    run,
    models=tuple(f"vae {c:g}x" for c in CAPACITIES),
    data=BOTH,
    methods=("rose-ekfac",),
    outputs=("table3",),
)
