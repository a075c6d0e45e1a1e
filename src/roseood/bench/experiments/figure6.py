"""Figure 6: layer-wise ROSE-DIAG AUROC on classifiers trained on Fashion-MNIST."""

from __future__ import annotations

from pathlib import Path

from roseood.bench.experiments.common import Experiment, Uses, note_missing
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.plots import plot_lines

CLASSIFIERS = ("cnn", "vgg11", "vgg13", "vgg16", "vgg19", "resnet18")
OOD = ["mnist", "kmnist", "notmnist"]
DATA = "fashion_mnist"
METHOD = "rose-diag"
USES = Uses(
    tuple(f"classifier {a}" for a in CLASSIFIERS),
    (DATA,),
    (f"{METHOD} layers=all, layer-wise",),
    ("figure6",),
)


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """Layer-wise scores (``EvalSpec.layerwise``) of every layer; the classifiers' loss is the
    cross-entropy with the predicted label."""
    for arch in CLASSIFIERS:
        model = ws.model(ws.classifier(arch))
        kwargs = ws.detector_kwargs(METHOD) | {"layers": "all"}
        spec = ws.spec(model, DATA, OOD, [METHOD], detector_kwargs={METHOD: kwargs}, layerwise=True)
        result = ws.evaluate(model, spec)
        if arch == CLASSIFIERS[0]:
            note_missing(rep, result)
        series = result.layer_metrics(METHOD)
        layers = model.rose_layers("all")
        fig = plot_lines(
            list(range(1, len(layers) + 1)),
            series,
            out / f"layerwise_{arch}.png",
            "layer (input → output)",
            "AUROC",
            f"layer-wise ROSE-DIAG, {arch} on {DATA}",
        )
        rep.figure(fig, f"Layer-wise AUROC of ROSE-DIAG on a {arch} classifier trained on Fashion-MNIST", out)
        rep.results[arch] = {"layers": layers, "auroc": series}


EXPERIMENT = Experiment("figure6", "Layer-wise ROSE on classifiers", "Figure 6", run, USES)
