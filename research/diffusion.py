"""Diffusion models (not in the paper): ROSE on a DDPM's denoising loss beside the diffusion-era
detectors — the denoising loss itself, DiffPath, MSMA and DDPM-OOD reconstruction — on the same models.

Per in-distribution set, ``diffusion_seeds`` UNets are trained (one per seed); every detector is fitted
and scored on each, with the fit and test images drawn by a data seed that moves with the training seed
(``EvalSpec``'s default seed + the training seed, so seed 0 keeps the default draw). Each cell is the mean
AUROC over the seeds ± the half-width of a 95 % Student-t interval over them: the spread of training,
fitting and test draws together. Every detector sees the same in-distribution images (the profile's fit +
statistics images: ROSE takes its Fisher from the first and its layer statistics from the second, the
other detectors fit on both). NFEs/image: UNet
evaluations per scored image (ROSE: K forward and one backward pass on the K copies); images/s: scoring
throughput measured in this run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from research.profiles import profile_of
from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import ModelRecipe, Workspace
from roseood.contracts import CountsEvaluations
from roseood.data.jpeg import split_suffix
from roseood.detectors import make_detector
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.result import EvaluationResult
from roseood.evaluation.splits import EvalSpec
from roseood.models.diffusion import DiffusionModel, as_diffusion_model

OOD = {
    "fashion_mnist": ["mnist", "notmnist", "omniglot", "noise", "constant"],
    "cifar10": ["celeba", "mnist", "fashion_mnist", "noise", "constant"],
}
METHODS = ["rose-ekfac", "rose-diag", "denoising", "diffpath", "diffpath-1d", "msma", "reconstruction"]
DATA_SEED = EvalSpec.seed  # the default data draw; the bench adds the training seed to it
USES = common.Uses(("diffusion (diffusers UNet2DModel)",), common.BOTH, tuple(METHODS), ("diffusion",))


def judged(names: Sequence[str]) -> list[str]:
    """The sets a verdict is judged on: ``names`` less each set whose matched twin is there too (``celeba``
    beside ``celeba+jpeg75``: the twin shares the in-distribution set's compression, the set as stored is
    only shown)."""
    present = set(names)
    return [n for n in names if not any(m != n and split_suffix(m)[0] == n for m in present)]


def mean_interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95 % Student-t interval of the mean (NaN width for one value)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), float("nan")
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), float(half)


def cell(values: list[float]) -> str:
    if not values:
        return "–"
    mean, half = mean_interval(values)
    return f"{mean:.3f}" if np.isnan(half) else f"{mean:.3f} ± {half:.3f}"


def recipe(ws: Workspace, data: str, seed: int) -> ModelRecipe:
    p = profile_of(ws)
    subset, epochs = p.diffusion_train[data]
    return ModelRecipe("diffusion", data, tuple(p.diffusion.items()), subset, epochs, seed=seed)


def nfe(model: DiffusionModel, method: str, kwargs: dict[str, Any]) -> str:
    if method.startswith("rose"):
        return f"{model.k} + backward"
    detector = make_detector(method, model, **kwargs)
    return str(detector.nfe_per_image) if isinstance(detector, CountsEvaluations) else "–"


def evaluate_methods(
    ws: Workspace, model: DiffusionModel, data: str, methods: list[str], seed: int
) -> tuple[EvaluationResult, dict[str, dict[str, float]]]:
    """``methods`` on one model of training seed ``seed`` (data seed + ``seed``), the cheap baselines first
    so that an interrupted run has them; the result and each method's AUROC per OOD set."""
    order = sorted(methods, key=lambda m: m.startswith("rose"))
    kwargs = {m: ws.detector_kwargs(m) for m in order}
    spec = ws.spec(model, data, OOD[data], order, detector_kwargs=kwargs, seed=DATA_SEED + seed)
    result = ws.evaluate(model, spec)
    metrics = result.metrics()
    values = {m: {s: common.metric_of(metrics, m, s) for s in spec.ood} for m in order}
    return result, {m: {s: v for s, v in got.items() if v is not None} for m, got in values.items()}


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    p = profile_of(ws)
    rep.parts.append(
        f"UNet: {p.diffusion}; denoising loss (ROSE, denoising): K = {p.diffusion_k} fixed (t, noise) pairs; "
        f"training seeds {list(p.diffusion_seeds)}, data seed {DATA_SEED} + the training seed; cells: mean "
        "AUROC ± 95 % t-interval half-width over the seeds (training, fit and test draws together)."
    )
    for data in ws.select_data():
        sets = ws.ood_sets(data, OOD[data])
        aurocs: dict[str, dict[str, list[float]]] = {m: {s: [] for s in sets} for m in METHODS}
        speed: dict[str, list[float]] = {m: [] for m in METHODS}
        nfes: dict[str, str] = {}
        for seed in p.diffusion_seeds:
            model = as_diffusion_model(ws.model(recipe(ws, data, seed)), "the diffusion bench")
            model.set_denoising(k=p.diffusion_k)
            result, values = evaluate_methods(ws, model, data, METHODS, seed)
            for m in METHODS:
                for s, value in values[m].items():
                    aurocs[m][s].append(value)
                speed[m].append(result.images_per_second.get(m, float("nan")))
                nfes[m] = nfe(model, m, ws.detector_kwargs(m))
            rep.results[f"{data}/seed{seed}"] = result.to_json()
        rows = [[s, *(cell(aurocs[m][s]) for m in METHODS)] for s in sets]
        rows.append(["NFEs/image", *(nfes[m] for m in METHODS)])
        rows.append(["images/s", *(f"{np.nanmean(speed[m]):.1f}" for m in METHODS)])
        rep.section(f"AUROC, diffusion model on {data}", markdown_rows(["OOD set", *METHODS], rows))
        rep.results[f"{data}/summary"] = {
            m: {s: mean_interval(v) for s, v in aurocs[m].items() if v} for m in METHODS
        }


EXPERIMENT = common.Experiment("diffusion", "ROSE on diffusion models", "beyond the paper", run, USES)
