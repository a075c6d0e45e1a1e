"""Table 7: ROSE-DIAG on Glow's invertible 1x1 convolutions vs on all its convolutions."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import BOTH, Experiment, Uses, Variants, compare_one
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace

LAYER_SETS = ("invconv", "all")
USES = Uses(("glow",), BOTH, tuple(f"rose-diag layers={s}" for s in LAYER_SETS), ("table7",))
PAPER_KEY = "{prefix}/{segment}/{ood}/rose-diag/{metric}"  # glow/DATA/layers:SET/OOD/rose-diag/auroc


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    variants: Variants = {layers: ("rose-diag", {"layers": layers}) for layers in LAYER_SETS}
    segments = {layers: f"layers:{layers}" for layers in LAYER_SETS}
    for data in ws.select_data():
        heading = (f"AUROC, Glow on {data}: ROSE-DIAG on InvConv layers vs all convs", "layers")
        report = (f"glow-{data}", f"Glow on {data}: InvConv vs all layers")
        compare_one(ws, out, rep, ws.glow(data), variants, "table7", segments, heading, report, PAPER_KEY)


EXPERIMENT = Experiment("table7", "InvConv vs all layers on Glow", "Table 7", run, USES)
