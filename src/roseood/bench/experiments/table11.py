"""Table 11: RND trained on CIFAR-10 with each perturbation."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import PERTURBATIONS, Experiment, Uses, compare_one, rnd_method
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace

RND = tuple(dict.fromkeys(rnd_method(p) for p in PERTURBATIONS))
USES = Uses(("vae (fingerprint only: RND trains its own nets)",), ("cifar10",), RND, ("table11",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """The variants are RND per perturbation, keyed in the paper as ``rnd-svd/svd:28`` etc."""
    variants = {p: (rnd_method(p), {"perturbation": p}) for p in PERTURBATIONS}
    heading = ("RND AUROC on CIFAR-10 per perturbation", "perturbation")
    segments = {p: f"{rnd_method(p)}/{p}" for p in PERTURBATIONS}
    report = ("rnd-cifar10", "RND perturbations on CIFAR-10")
    compare_one(ws, out, rep, ws.vae("cifar10"), variants, "table11", segments, heading, report)


EXPERIMENT = Experiment("table11", "RND perturbations", "Table 11", run, USES)
