"""Table 6: the diagonal vs the EKFAC Fisher for ROSE on the VAE's encoder convolutions."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import BOTH, Experiment, Uses, compare_one
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace

METHODS = ("rose-diag", "rose-ekfac")
USES = Uses(models=("vae",), data=BOTH, methods=METHODS, outputs=("table6",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    same = {m: m for m in METHODS}
    for data in ws.select_data():
        heading = (f"AUROC, VAE on {data}: diagonal vs EKFAC Fisher (encoder convs)", "Fisher")
        report = (f"vae-{data}", f"ROSE DIAG vs EKFAC, VAE on {data}")
        compare_one(
            ws, out, rep, ws.vae(data), {m: (m, {}) for m in METHODS}, "table6", same, heading, report
        )


EXPERIMENT = Experiment("table6", "Diagonal vs EKFAC Fisher on the VAE", "Table 6", run, USES)
