"""Table 6: the diagonal vs the EKFAC Fisher for ROSE on the VAE's encoder convolutions."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import BOTH, Experiment, compare_one
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace

METHODS = ("rose-diag", "rose-ekfac")


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        compare_one(
            ws,
            out,
            rep,
            ws.vae(data),
            {m: (m, {}) for m in METHODS},
            "table6",
            {m: m for m in METHODS},
            (f"AUROC, VAE on {data}: diagonal vs EKFAC Fisher (encoder convs)", "Fisher"),
            (f"vae-{data}", f"ROSE DIAG vs EKFAC, VAE on {data}"),
        )


EXPERIMENT = Experiment(
    "table6",
    "Diagonal vs EKFAC Fisher on the VAE",
    "Table 6",
    run,
    models=("vae",),
    data=BOTH,
    methods=METHODS,
    outputs=("table6",),
)
