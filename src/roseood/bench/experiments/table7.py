"""Table 7: ROSE-DIAG on Glow's invertible 1x1 convolutions vs on all its convolutions."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import BOTH, Experiment, Variants, compare_one
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace

LAYER_SETS = ("invconv", "all")


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        variants: Variants = {layers: ("rose-diag", {"layers": layers}) for layers in LAYER_SETS}
        compare_one(
            ws,
            out,
            rep,
            ws.glow(data),
            variants,
            "table7",
            {layers: f"layers:{layers}" for layers in LAYER_SETS},
            (f"AUROC, Glow on {data}: ROSE-DIAG on InvConv layers vs all convs", "layers"),
            (f"glow-{data}", f"Glow on {data}: InvConv vs all layers"),
            paper_key="{prefix}/{segment}/{ood}/rose-diag/{metric}",
        )


EXPERIMENT = Experiment(
    "table7",
    "InvConv vs all layers on Glow",
    "Table 7",
    run,
    models=("glow",),
    data=BOTH,
    methods=tuple(f"rose-diag layers={layers}" for layers in LAYER_SETS),
    outputs=("table7",),
)
