"""The experiments beyond the ROSE paper: the evidence behind roseood's defaults and the docs' diffusion
tables, run by hand from a checkout of the repository (``python -m research NAME``), never installed.

Each is a ``roseood.bench`` ``Experiment`` plug-in run by ``rose bench``'s own runner and options, into the
same results folder layout and caches; ``research.profiles`` adds their settings to the bench's profiles."""

from __future__ import annotations

from research import ablation, diffusion, diffusion_defaults, diffusion_kinds, diffusion_zoo, near_ood
from roseood.bench.experiments.common import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    m.EXPERIMENT.name: m.EXPERIMENT
    for m in (ablation, diffusion, diffusion_zoo, diffusion_kinds, diffusion_defaults, near_ood)
}

__all__ = ["EXPERIMENTS"]
