"""Figure 2: the OOD images of the brightness sweep (Tables 1, 8 and 9) at each of its levels, as the CIFAR-10
VAE sees them: the same images, darker and brighter, so a reader sees what a level means."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments import brightness
from roseood.bench.experiments.common import Experiment, Uses
from roseood.bench.report import BenchReport
from roseood.bench.workspace import CHANNELS, Workspace
from roseood.data import load_images
from roseood.errors import DataError
from roseood.evaluation.plots import plot_image_rows

COUNT = 8  # images per row
USES = Uses((), tuple(f"{ood} × brightness" for ood in brightness.TABLES), (), ("figure2",))


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    levels = ws.profile.brightness
    missing = []
    for ood in brightness.TABLES:
        try:
            rows = {
                f"{b:g}×": load_images(
                    ood,
                    n=COUNT,
                    channels=CHANNELS[brightness.DATA],
                    size=32,
                    brightness=b,
                    data_dir=ws.data_dir,
                ).images
                for b in levels
            }
        except DataError:
            missing.append(ood)
            continue
        fig = plot_image_rows(
            rows, out / f"brightness_{ood}_examples.png", f"{ood} at each brightness factor"
        )
        rep.figure(
            fig,
            f"{COUNT} {ood} test images (drawn with seed 0) at the brightness sweep's {len(levels)} levels, "
            f"at 32×32 in colour as the CIFAR-10 VAE takes them",
            out,
        )
    rep.results["brightness"] = list(levels)
    rep.results["drawn"] = [ood for ood in brightness.TABLES if ood not in missing]
    if missing:
        rep.parts.append(f"No data for: {', '.join(missing)}.")


EXPERIMENT = Experiment(
    "figure2", "Example OOD images at each brightness of the sweep", "Figure 2", run, USES
)
