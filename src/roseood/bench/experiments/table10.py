"""Table 10: Likelihood Ratio on the CIFAR-10 VAE with a background model per perturbation."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import PERTURBATIONS, Experiment, compare_one, with_background
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    recipe = ws.vae("cifar10")
    compare_one(
        ws,
        out,
        rep,
        recipe,
        {p: ("lratio", with_background(ws, recipe, p)) for p in PERTURBATIONS},
        "table10",
        {p: f"lratio/{p}" for p in PERTURBATIONS},
        ("LRatio AUROC on the CIFAR-10 VAE per background perturbation", "perturbation"),
        ("vae-cifar10", "Likelihood Ratio backgrounds, VAE on CIFAR-10"),
    )


EXPERIMENT = Experiment(
    "table10",
    "Likelihood Ratio background perturbations",
    "Table 10",
    run,
    models=("vae", *(f"background vae {p}" for p in PERTURBATIONS)),
    data=("cifar10",),
    methods=("lratio",),
    outputs=("table10",),
)
