"""What every experiment shares: the ``Experiment`` record, the paper's set and method lists, and the steps
from an evaluation to a paper | ours | Δ comparison.

An experiment is data (models, data, methods, outputs) plus a ``run(ws, out, report)`` that goes through
the public evaluation API (``Workspace.evaluate`` / ``Workspace.sweep`` → ``roseood.evaluation``) with
the workspace's one result cache and the spec's seed policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roseood.bench.paper import paper_value
from roseood.bench.report import BenchReport, Row
from roseood.bench.workspace import ModelRecipe, Workspace
from roseood.evaluation.report import write_report
from roseood.evaluation.result import EvaluationResult
from roseood.evaluation.splits import OVERALL
from roseood.models.base import RoseModel

# OOD sets of the paper's Table 2 per in-distribution set, in its row order ("overall" last).
OOD_SETS = {
    "fashion_mnist": [
        "mnist",
        "kmnist",
        "notmnist",
        "omniglot",
        "cifar10",
        "svhn",
        "noise",
        "constant",
        OVERALL,
    ],
    "cifar10": ["svhn", "celeba", "lsun", "mnist", "fashion_mnist", "notmnist", "noise", "constant", OVERALL],
}
BOTH = ("fashion_mnist", "cifar10")
FIGURE_OOD = {
    "fashion_mnist": ["mnist"],
    "cifar10": ["svhn", "celeba"],
}  # CelebA stands in when SVHN is absent
PERTURBATIONS = [
    "svd:22",
    "svd:28",
    "dct:28",
    "gb",
    "random:0.1",
    "random:0.2",
    "random:0.3",
]  # Tables 10, 11
RND_METHOD = {"svd": "rnd-svd", "dct": "rnd-dct", "gb": "rnd-gb", "random": "rnd-random"}

Variants = dict[str, tuple[str, dict[str, Any]]]  # label -> (method, detector keyword arguments)
Metrics = dict[str, dict[str, dict[str, float]]]  # EvaluationResult.metrics(): method -> set -> metric


@dataclass(frozen=True)
class Uses:
    """What an experiment involves, for ``rose bench --list`` and the experiment table."""

    models: tuple[str, ...]
    data: tuple[str, ...]
    methods: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Experiment:
    """A named, runnable reproduction of one or more of the paper's tables or figures."""

    name: str
    title: str
    paper_ref: str
    run: Callable[[Workspace, Path, BenchReport], None]
    uses: Uses | None = None


def rnd_method(perturbation: str) -> str:
    """The RND method name of a perturbation spec (``svd:28`` → ``rnd-svd``)."""
    return RND_METHOD[perturbation.split(":")[0]]


def evaluate_variants(
    ws: Workspace, model: RoseModel, in_data: str, ood: list[str], variants: Variants, **spec: Any
) -> EvaluationResult:
    """Evaluate several configurations (possibly of the same method) on one model and test sets; the
    result's methods are the variant labels."""
    merged: EvaluationResult | None = None
    for label, (method, given) in variants.items():
        kwargs = ws.detector_kwargs(method) | given
        res = ws.evaluate(
            model, ws.spec(model, in_data, ood, [method], detector_kwargs={method: kwargs}, **spec)
        )
        if merged is None:
            merged = EvaluationResult(
                in_name=res.in_name,
                settings=res.settings,
                missing=res.missing,
                bootstrap=res.bootstrap,
                bootstrap_seed=res.bootstrap_seed,
            )
        merged.scores[label] = res.scores[method]
        merged.images_per_second[label] = res.images_per_second[method]
    assert merged is not None, "no variants"
    merged.settings = merged.settings | {"methods": {k: f"{m} {kw}" for k, (m, kw) in variants.items()}}
    return merged


def metric_of(metrics: Metrics, method: str, ood: str, metric: str = "auroc") -> float | None:
    return metrics.get(method, {}).get(ood, {}).get(metric)


def compare_rows(
    result: EvaluationResult,
    table: str,
    prefix: str,
    ood_sets: list[str],
    methods: dict[str, str],
    metric: str = "auroc",
    paper_key: str = "{prefix}/{ood}/{segment}/{metric}",
) -> list[Row]:
    """Rows (OOD set, method label) for ``methods`` (label -> paper key segment), paper key ``paper_key``;
    sets without data say so."""
    rows = []
    metrics = result.metrics()
    for ood in ood_sets:
        for label, segment in methods.items():
            ours = metric_of(metrics, label, ood, metric)
            why = "no data" if ood in result.missing or (ood == OVERALL and not result.ood_sets) else "–"
            key = paper_key.format(prefix=prefix, ood=ood, segment=segment, metric=metric)
            interval = result.interval(label, ood, metric) if ours is not None else None
            rows.append(Row((ood, label), ours, paper_value(table, key), why, interval))
    return rows


def sub_report(rep: BenchReport, result: EvaluationResult, out: Path, name: str, title: str) -> None:
    """A full evaluation report (every metric, ROC curves, histograms) in ``out/name``, linked."""
    write_report(result, out / name, title=title)
    rep.parts.append(
        f"Full evaluation report with ROC curves and score histograms: [{name}]({name}/report.md)"
    )
    rep.results[name] = result.to_json()


def note_missing(rep: BenchReport, result: EvaluationResult) -> None:
    """Say which OOD sets had no files (their numbers are absent, not zero)."""
    if result.missing:
        rep.parts.append(f"No data for: {', '.join(result.missing)}.")


def with_background(ws: Workspace, recipe: ModelRecipe, perturb: str | None = None) -> dict[str, Any]:
    return {"background": ws.model(ws.background(recipe, perturb))}


def compare_one(
    ws: Workspace,
    out: Path,
    rep: BenchReport,
    recipe: ModelRecipe,
    variants: Variants,
    table: str,
    segments: dict[str, str],
    heading: tuple[str, str],
    report: tuple[str, str],
    paper_key: str = "{prefix}/{ood}/{segment}/{metric}",
) -> None:
    """The common shape of a one-model table: evaluate ``variants`` on ``recipe``'s model against the
    Table 2 OOD sets, compare AUROC with ``table`` (label -> paper key segment) and link a full report
    (``report``: folder name, title). ``heading``: the table's heading and its variant column's label."""
    data = recipe.data
    sets = ws.ood_sets(data, OOD_SETS[data])  # with matched twins (celeba+jpeg75) where data has a history
    result = evaluate_variants(ws, ws.model(recipe), data, sets, variants)
    rows = compare_rows(result, table, f"{recipe.kind}/{data}", sets, segments, paper_key=paper_key)
    rep.compare(heading[0], ("OOD set", heading[1]), rows)
    sub_report(rep, result, out, *report)
