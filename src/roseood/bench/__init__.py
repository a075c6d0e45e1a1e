"""``rose bench``: the ROSE paper's tables and figures, one command each, with its numbers beside ours."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from roseood.bench.experiments import EXPERIMENTS, Experiment, experiment_table
from roseood.bench.profiles import PROFILES, Profile, get_profile
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.errors import RoseError
from roseood.evaluation.report import write_index


def run_experiment(name: str, ws: Workspace, experiments: Mapping[str, Experiment] = EXPERIMENTS) -> Path:
    """Run one experiment of ``experiments`` (the paper's, or another registry such as the repository's
    ``research``) into ``{root}/{profile}/{folder}`` (``Workspace.report_folder``), refresh the root's
    ``index.html`` and return the report path. Finished models, detectors and scores in ``{root}/cache``
    are reused."""
    if name not in experiments:
        raise RoseError(f"unknown experiment {name!r}; choose from {', '.join(experiments)}")
    exp = experiments[name]
    out = ws.root / ws.profile.name / ws.report_folder(name)
    out.mkdir(parents=True, exist_ok=True)
    report = BenchReport(name=name, title=f"{exp.paper_ref}: {exp.title}", paper_ref=exp.paper_ref)
    ws.trained.clear()  # the report lists the models this experiment used
    ws.experiment = name
    t0 = time.time()
    exp.run(ws, out, report)
    path = report.write(out, ws, time.time() - t0)
    write_index(ws.root)
    return path


__all__ = [
    "EXPERIMENTS",
    "PROFILES",
    "BenchReport",
    "Experiment",
    "Profile",
    "Workspace",
    "experiment_table",
    "get_profile",
    "run_experiment",
]
