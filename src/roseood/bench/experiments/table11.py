"""Table 11: RND trained on CIFAR-10 with each perturbation."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import PERTURBATIONS, Experiment, compare_one, rnd_method
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    compare_one(
        ws,
        out,
        rep,
        ws.vae("cifar10"),
        {p: (rnd_method(p), {"perturbation": p}) for p in PERTURBATIONS},
        "table11",
        {p: f"{rnd_method(p)}/{p}" for p in PERTURBATIONS},
        ("RND AUROC on CIFAR-10 per perturbation", "perturbation"),
        ("rnd-cifar10", "RND perturbations on CIFAR-10"),
    )


EXPERIMENT = Experiment(
    "table11",
    "RND perturbations",
    "Table 11",
    run,
    models=("vae (fingerprint only: RND trains its own nets)",),
    data=("cifar10",),
    methods=tuple(dict.fromkeys(rnd_method(p) for p in PERTURBATIONS)),
    outputs=("table11",),
)
