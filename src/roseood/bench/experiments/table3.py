"""Table 3: ROSE-EKFAC AUROC on VAEs of 0.5x to 4x the paper's width."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments import common
from roseood.bench.report import BenchReport, Row
from roseood.bench.workspace import Workspace

CAPACITIES = (0.5, 1.0, 2.0, 4.0)
USES = common.Uses(tuple(f"vae {c:g}x" for c in CAPACITIES), common.BOTH, ("rose-ekfac",), ("table3",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        rows: list[Row] = []
        for capacity in CAPACITIES:
            recipe = ws.vae(data, capacity)
            variants: common.Variants = {"rose-ekfac": ("rose-ekfac", {})}
            sets = ws.ood_sets(data, common.OOD_SETS[data])
            result = common.evaluate_variants(ws, ws.model(recipe), data, sets, variants)
            label = f"{capacity:g}x"
            column = f"{label} (ngf {dict(recipe.arch)['ngf']})"
            prefix = f"vae/{data}/capacity:{label}"
            for row in common.compare_rows(result, "table3", prefix, sets, {"rose-ekfac": "rose-ekfac"}):
                rows.append(Row((row.labels[0], column), row.ours, row.paper, row.why))
            rep.results[f"{data}/{label}"] = result.to_json()
        rep.compare(f"ROSE-EKFAC AUROC vs VAE capacity, {data}", ("OOD set", "capacity"), rows)


EXPERIMENT = common.Experiment("table3", "ROSE vs VAE capacity", "Table 3", run, USES)
