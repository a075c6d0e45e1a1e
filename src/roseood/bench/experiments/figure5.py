"""Figure 5: ROSE's overall AUROC vs the number of Fisher images, over repeated random draws."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from roseood.bench.experiments.common import OOD_SETS, Experiment, Uses, note_missing
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.plots import plot_box
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.splits import OVERALL

DATA = "fashion_mnist"
METHOD = "rose-ekfac"
USES = Uses(("vae",), (DATA,), (f"{METHOD} (sweep over fit_samples × repeats)",), ("figure5",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """A ``sweep`` over ``fit_samples``: each repeat draws fresh Fisher images while the layer statistics
    images and the test sets stay fixed, so only the Fisher varies."""
    p = ws.profile
    model = ws.model(ws.vae(DATA))
    spec = ws.spec(
        model,
        DATA,
        OOD_SETS[DATA],
        [METHOD],
        stats_samples=p.fisher_stats_samples,
        test_samples=p.fisher_test_samples,
        detector_kwargs={METHOD: ws.detector_kwargs(METHOD)},
    )
    runs = ws.sweep(model, spec, "fit_samples", p.fisher_sizes, p.fisher_repeats)
    first = runs[p.fisher_sizes[0]][0]
    per_set: dict[int, dict[str, list[float]]] = {}
    for n, results in runs.items():
        metrics = [r.metrics()[METHOD] for r in results]
        per_set[n] = {s: [m[s]["auroc"] for m in metrics] for s in first.ood_sets}
    note_missing(rep, first)
    fig = plot_box(
        {str(n): v[OVERALL] for n, v in per_set.items()},
        out / "fisher_samples_box.png",
        "number of Fisher samples",
        "AUROC on overall",
        f"ROSE-EKFAC, VAE on {DATA}: {p.fisher_repeats} repeats per size",
    )
    rep.figure(
        fig,
        f"AUROC on the overall set vs the number of Fisher images ({p.fisher_repeats} random draws each)",
        out,
    )
    header = ["Fisher samples", *(f"{s} mean ± std" for s in first.ood_sets)]
    lines = [
        [str(n), *(f"{np.mean(v):.3f} ± {np.std(v):.3f}" for v in per_set[n].values())]
        for n in p.fisher_sizes
    ]
    rep.section(
        f"AUROC (mean ± std over {p.fisher_repeats} repeats)",
        f"{len(first.scores[METHOD][DATA])} in-distribution test images, "
        f"{p.fisher_test_samples} per OOD set, "
        f"overall = {min(p.overall_per_set, p.fisher_test_samples)} of each; {p.fisher_stats_samples} fixed "
        "images for the layer statistics.",
        markdown_rows(header, lines),
    )
    rep.results["auroc"] = {str(n): v for n, v in per_set.items()}


EXPERIMENT = Experiment("figure5", "AUROC vs the number of Fisher samples", "Figure 5", run, USES)
