"""``python -m research ablation`` (beyond the paper): every ROSE aggregation × Fisher × layer set, per model,
and the likelihood adjustment (``ROSE(adjust=...)``) with the paper's aggregation.

Aggregations and the adjustment are post-processing, so each model's raw layer scores and per-image
losses are computed once per Fisher (for the union of its layer sets; a layer's score does not depend on
the other layers) on the Fisher images' held-out statistics images, the in-distribution test set and
every OOD set, cached through the evaluation result cache, and every variant is fitted on the statistics
images' columns of a layer set and applied to the test columns. Models: the authors' Fashion-MNIST VAE
(shipped) and the bench's CIFAR-10 VAE and Glow. The table gives AUROC per OOD set and "overall", the
share of tied scores, and how many degenerate-fit warnings the fit raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from research.profiles import profile_of
from research.rescoring import LayerScores, fit_on_columns, in_test_images, scores_on_columns
from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.demo import demo_model
from roseood.detectors import ROSE
from roseood.detectors.aggregation import tie_share
from roseood.evaluation.metrics import ood_metrics
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.splits import OVERALL, load_fit_images, load_ood_sets, overall_scores
from roseood.models.base import GenerativeModel

AGGREGATES = ["relu-norm", "relu-norm:beta=3", "max-z", "log-z", "gaussian", "gmm:k=3"]
# (aggregation, adjustment): every aggregation on the raw layer scores, the adjustments with the paper's
VARIANTS = [(a, "none") for a in AGGREGATES] + [("relu-norm", "nll"), ("relu-norm", "both")]
FISHERS = ["diag", "ekfac"]
PAPER_CONFIG = {"vae": ("ekfac", "encoder"), "glow": ("diag", "invconv")}  # the paper's ROSE per model
STATS = "statistics images"


def ablation_models(ws: Workspace) -> list[tuple[str, GenerativeModel, str]]:
    """(label, model, in-distribution set): the authors' FMNIST VAE and the bench's CIFAR-10 VAE / Glow."""
    models = []
    if "fashion_mnist" in ws.select_data() and "vae" in ws.models:
        models.append(("authors' VAE, fashion_mnist", demo_model(), "fashion_mnist"))
    if "cifar10" in ws.select_data():
        for kind in ws.select_models(("vae", "glow")):
            recipe = ws.vae("cifar10") if kind == "vae" else ws.glow("cifar10")
            models.append((f"{kind} {recipe.name}", ws.model(recipe), "cifar10"))
    out = []
    for label, model, data in models:
        assert isinstance(model, GenerativeModel)  # the paper's families: named layer sets and kinds
        out.append((label, model.to(ws.device).eval(), data))
    return out


def ablation_layer_sets(ws: Workspace, model: GenerativeModel, fisher: str) -> dict[str, list[str]]:
    """The model's layer sets this Fisher runs on: all, except EKFAC only on the paper's set when the
    profile says so (see ``ResearchProfile.ablation_ekfac_everywhere``)."""
    sets = model.layer_sets()
    if fisher == "ekfac" and not profile_of(ws).ablation_ekfac_everywhere:
        paper = PAPER_CONFIG[model.kind][1]
        return {paper: sets[paper]}
    return sets


def ablation_rows(
    ws: Workspace, model: GenerativeModel, in_data: str, ood: list[str]
) -> list[dict[str, Any]]:
    """One row per Fisher × layer set × aggregation: AUROC per OOD set (and overall), tie shares, warnings."""
    spec = ws.spec(model, in_data, ood, ["rose-ekfac"])
    fit = load_fit_images(spec, model)
    test = in_test_images(spec, model, in_data)
    ood_sets, _ = load_ood_sets(spec, model)
    rows = []
    for fisher in FISHERS:
        layer_sets = ablation_layer_sets(ws, model, fisher)
        union = list(dict.fromkeys(name for names in layer_sets.values() for name in names))
        scorer = LayerScores(
            ws.cache, model, fisher, union, fit.fisher, spec.batch_size, progress=ws.progress
        )
        sets = {STATS: fit.held_out, in_data: test} | {k: v.images for k, v in ood_sets.items()}
        columns = {k: scorer(v) for k, v in sets.items()}
        for set_name, names in layer_sets.items():
            keep = [union.index(n) for n in names]
            for aggregate, adjust in VARIANTS:
                det = ROSE(
                    model, fisher=fisher, layers=names, aggregate=aggregate, adjust=adjust, progress=False
                )
                scores = scores_on_columns(fit_on_columns(det, columns[STATS], keep), columns, keep)
                if OVERALL in ood:
                    scores[OVERALL] = overall_scores(scores, list(ood_sets), spec.overall_per_set, spec.seed)
                variant = {"fisher": fisher, "layers": set_name, "aggregate": aggregate, "adjust": adjust}
                rows.append(
                    variant | _judged(scores, in_data, list(ood_sets)) | {"warnings": det.fit_warnings_}
                )
    return rows


def _judged(scores: dict[str, np.ndarray], in_data: str, ood: list[str]) -> dict[str, Any]:
    """A variant's AUROC against each OOD set (and overall) and its share of tied scores."""
    tested = [scores[in_data], *(scores[k] for k in ood)]
    return {
        "auroc": {
            k: ood_metrics(scores[in_data], s)["auroc"]
            for k, s in scores.items()
            if k not in (STATS, in_data)
        },
        "ties_in": tie_share(scores[in_data]),
        "ties_all": tie_share(np.concatenate(tested)),
    }


def variant_label(aggregate: str, adjust: str) -> str:
    """``relu-norm``, or ``relu-norm, adjust=both`` for an adjusted variant."""
    return aggregate if adjust == "none" else f"{aggregate}, adjust={adjust}"


def _decision(per_model: dict[str, tuple[str, list[dict[str, Any]]]]) -> tuple[list[list[str]], list[str]]:
    """Each variant's overall AUROC at each model's paper configuration, and which beat the paper's
    (relu-norm, no adjustment) on every model (the rule for changing the default)."""
    table, winners = [], []
    for variant in VARIANTS:
        cells, beats = [], True
        for kind, rows in per_model.values():
            fisher, layers = PAPER_CONFIG[kind]
            pick = {
                (r["aggregate"], r["adjust"]): r["auroc"].get(OVERALL, float("nan"))
                for r in rows
                if (r["fisher"], r["layers"]) == (fisher, layers)
            }
            cells.append(f"{pick[variant]:.3f}")
            beats &= bool(pick[variant] > pick[VARIANTS[0]])
        table.append([variant_label(*variant), *cells])
        if beats and variant != VARIANTS[0]:
            winners.append(variant_label(*variant))
    return table, winners


def run_ablation(ws: Workspace, out: Path, rep: BenchReport) -> None:
    per_model: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for label, model, data in ablation_models(ws):
        rows = ablation_rows(ws, model, data, common.OOD_SETS[data])
        per_model[label] = (model.kind, rows)
        sets = list(rows[0]["auroc"])
        header = ["Fisher", "layers", "aggregate", *sets, "ties in-dist", "ties all", "warnings"]
        lines = [
            [
                r["fisher"],
                r["layers"],
                variant_label(r["aggregate"], r["adjust"]),
                *(f"{r['auroc'][s]:.3f}" for s in sets),
                f"{r['ties_in']:.1%}",
                f"{r['ties_all']:.1%}",
                str(len(r["warnings"])),
            ]
            for r in rows
        ]
        missing = [s for s in common.OOD_SETS[data] if s not in sets]
        rep.section(
            f"AUROC per OOD set, {label}",
            "ties: share of test scores equal to another score (in-distribution test set; all test sets). "
            + (f"No data: {', '.join(missing)}. " if missing else "")
            + (
                ""
                if profile_of(ws).ablation_ekfac_everywhere
                else "EKFAC only on the paper's layer set under this profile (the VAE decoder's output "
                "layer has a (256·C·16)² Kronecker factor: too slow on a CPU)."
            ),
            markdown_rows(header, lines),
        )
        # each warning, and the rows (Fisher, layers, variant) that raised it
        found: dict[str, list[str]] = {}
        for r in rows:
            for w in r["warnings"]:
                found.setdefault(w, []).append(
                    f"{r['fisher']} {r['layers']} {variant_label(r['aggregate'], r['adjust'])}"
                )
        if found:
            items = (f"- {w} ({'; '.join(where)})" for w, where in sorted(found.items()))
            rep.section(f"Degenerate-fit warnings, {label}", *items)
        rep.results[label] = rows
    if per_model:
        table, winners = _decision(per_model)
        rep.section(
            "Overall AUROC at each model's paper configuration (VAE: EKFAC, encoder; Glow: diag, invconv)",
            markdown_rows(["aggregate", *per_model], table),
            "Default rule: a variant replaces the paper's (relu-norm, no adjustment) only if it beats it on "
            f"every model's overall AUROC. Beats it on every model here: {', '.join(winners) or 'none'}.",
        )
        rep.results["beats_default_on_every_model"] = winners


EXPERIMENT = common.Experiment(
    "ablation",
    "ROSE aggregations × Fisher × layers",
    "beyond the paper",
    run_ablation,
    common.Uses(
        ("vae (authors', Fashion-MNIST)", "vae", "glow"),
        common.BOTH,
        ("rose-ekfac", "rose-diag"),
        ("ablation",),
    ),
)
