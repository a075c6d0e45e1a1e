"""Each table and figure of the ROSE paper as one module (``EXPERIMENT``: models, data, methods, outputs
and a ``run``), all through the public evaluation API; ``EXPERIMENTS`` lists them in the paper's order."""

from __future__ import annotations

from roseood.bench.experiments import (
    brightness,
    figure1,
    figure2,
    figure3,
    figure4,
    figure5,
    figure6,
    table2,
    table3,
    table6,
    table7,
    table10,
    table11,
)
from roseood.bench.experiments.common import Experiment
from roseood.evaluation.report import markdown_rows

EXPERIMENTS: dict[str, Experiment] = {
    m.EXPERIMENT.name: m.EXPERIMENT
    for m in (
        table2,
        table3,
        table6,
        table7,
        brightness,
        table10,
        table11,
        figure1,
        figure2,
        figure3,
        figure4,
        figure5,
        figure6,
    )
}


def experiment_table() -> str:
    """Markdown: every experiment with the models, data, methods and tables/figures it involves."""
    return markdown_rows(
        ["experiment", "paper", "models", "data", "methods", "outputs"],
        [
            [
                e.name,
                e.paper_ref,
                *(", ".join(getattr(e.uses, f, ())) for f in ("models", "data", "methods", "outputs")),
            ]
            for e in EXPERIMENTS.values()
        ],
    )


__all__ = ["EXPERIMENTS", "Experiment", "experiment_table"]
