"""Table 10: Likelihood Ratio on the CIFAR-10 VAE with a background model per perturbation."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import PERTURBATIONS, Experiment, Uses, compare_one, with_background
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace

BACKGROUNDS = tuple(f"background vae {p}" for p in PERTURBATIONS)
USES = Uses(models=("vae", *BACKGROUNDS), data=("cifar10",), methods=("lratio",), outputs=("table10",))
HEADING = ("LRatio AUROC on the CIFAR-10 VAE per background perturbation", "perturbation")
REPORT = ("vae-cifar10", "Likelihood Ratio backgrounds, VAE on CIFAR-10")


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    recipe = ws.vae("cifar10")
    variants = {p: ("lratio", with_background(ws, recipe, p)) for p in PERTURBATIONS}
    segments = {p: f"lratio/{p}" for p in PERTURBATIONS}
    compare_one(ws, out, rep, recipe, variants, "table10", segments, HEADING, REPORT)


EXPERIMENT = Experiment("table10", "Likelihood Ratio background perturbations", "Table 10", run, USES)
