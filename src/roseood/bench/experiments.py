"""Each table and figure of the ROSE paper as a function that trains, fits, scores, compares and plots.

An experiment receives a ``Workspace`` (profile, caches, model/data selection), its output folder and a
``BenchReport`` to fill. Models come from the workspace's cache; evaluations go through
``roseood.evaluation.evaluate`` with the result cache, so experiments that share a model, method and
test set share the work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from roseood.bench.ablation import run_ablation
from roseood.bench.paper import paper_value
from roseood.bench.report import BenchReport, Row
from roseood.bench.workspace import ModelRecipe, Workspace
from roseood.data import load_images
from roseood.detectors import ROSE
from roseood.errors import DataError
from roseood.evaluation.cache import array_digest, cache_key
from roseood.evaluation.evaluate import OVERALL, overall_scores
from roseood.evaluation.metrics import ood_metrics
from roseood.evaluation.plots import plot_box, plot_histograms, plot_lines, plot_roc, plot_scatter
from roseood.evaluation.report import METRIC_TITLES, markdown_rows, write_report
from roseood.evaluation.result import EvaluationResult
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint

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
TABLE2_METHODS = {
    "vae": ["rose-ekfac", "lr", "nll", "lratio", "ic-png", "ic-jp2"],
    "glow": ["rose-diag", "lratio", "ic-png", "ic-jp2"],  # ROSE on Glow: diagonal, InvConv layers (App. B.2)
    "pixelcnn": ["rose-ekfac", "nll", "lratio", "ic-png", "ic-jp2"],  # not in the paper: "ours" only
}
PERTURBATIONS = ["svd:28", "dct:28", "gb", "random:0.2"]  # Table 1's settings (App. B.3)
RND_METHOD = {"svd": "rnd-svd", "dct": "rnd-dct", "gb": "rnd-gb", "random": "rnd-random"}
BRIGHTNESS_TABLES = {"celeba": "table1", "svhn": "table8", "omniglot": "table9"}
CLASSIFIERS = ["cnn", "vgg11", "vgg13", "vgg16", "vgg19", "resnet18"]
CLASSIFIER_OOD = ["mnist", "kmnist", "notmnist"]

Variants = dict[str, tuple[str, dict[str, Any]]]  # label -> (method, detector keyword arguments)


@dataclass(frozen=True)
class Experiment:
    """A named, runnable reproduction of one or more of the paper's tables or figures."""

    name: str
    title: str
    paper_ref: str
    run: Callable[[Workspace, Path, BenchReport], None]


# -- shared steps ----------------------------------------------------------------------------------
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
            merged = EvaluationResult(in_name=res.in_name, settings=res.settings, missing=res.missing)
        merged.scores[label] = res.scores[method]
        merged.images_per_second[label] = res.images_per_second[method]
    assert merged is not None, "no variants"
    merged.settings = merged.settings | {"methods": {k: f"{m} {kw}" for k, (m, kw) in variants.items()}}
    return merged


Metrics = dict[str, dict[str, dict[str, float]]]  # EvaluationResult.metrics(): method -> set -> metric


def metric_of(metrics: Metrics, method: str, ood: str, metric: str = "auroc") -> float | None:
    return metrics.get(method, {}).get(ood, {}).get(metric)


def compare_rows(
    result: EvaluationResult,
    table: str,
    prefix: str,
    ood_sets: list[str],
    methods: dict[str, str],
    metric: str = "auroc",
) -> list[Row]:
    """Rows (OOD set, method label) for ``methods`` (label -> paper key segment), paper key
    ``{prefix}/{ood}/{segment}/{metric}``; sets without data say so."""
    rows = []
    metrics = result.metrics()
    for ood in ood_sets:
        for label, segment in methods.items():
            ours = metric_of(metrics, label, ood, metric)
            why = "no data" if ood in result.missing or (ood == OVERALL and not result.ood_sets) else "–"
            rows.append(Row((ood, label), ours, paper_value(table, prefix, ood, segment, metric), why))
    return rows


def sub_report(rep: BenchReport, result: EvaluationResult, out: Path, name: str, title: str) -> None:
    """A full evaluation report (every metric, ROC curves, histograms) in ``out/name``, linked."""
    write_report(result, out / name, title=title)
    rep.parts.append(
        f"Full evaluation report with ROC curves and score histograms: [{name}]({name}/report.md)"
    )
    rep.results[name] = result.to_json()


def with_background(ws: Workspace, recipe: ModelRecipe, perturb: str | None = None) -> dict[str, Any]:
    return {"background": ws.model(ws.background(recipe, perturb))}


# -- Table 2 with Tables 4 and 5 -------------------------------------------------------------------
def run_table2(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for kind in ws.select_models(("vae", "glow", "pixelcnn")):
        for data in ws.select_data():
            recipe = ws.recipe(kind, data)
            model = ws.model(recipe)
            methods = TABLE2_METHODS[kind]
            variants: Variants = {m: (m, {}) for m in methods}
            variants["lratio"] = ("lratio", with_background(ws, recipe))
            result = evaluate_variants(ws, model, data, OOD_SETS[data], variants)
            for table, metric in (("table2", "auroc"), ("table4", "auprc"), ("table5", "fpr80")):
                rows = compare_rows(
                    result, table, f"{kind}/{data}", OOD_SETS[data], {m: m for m in methods}, metric
                )
                rep.compare(
                    f"{METRIC_TITLES[metric]}: {kind.upper()} on {data} ({table})",
                    ("OOD set", "method"),
                    rows,
                )
            sub_report(rep, result, out, f"{kind}-{data}", f"{kind.upper()} trained on {data}: all methods")


# -- Table 3 ---------------------------------------------------------------------------------------
def run_table3(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        rows: list[Row] = []
        for capacity in (0.5, 1.0, 2.0, 4.0):
            recipe = ws.vae(data, capacity)
            result = evaluate_variants(
                ws, ws.model(recipe), data, OOD_SETS[data], {"rose-ekfac": ("rose-ekfac", {})}
            )
            label = f"{capacity:g}x"
            for row in compare_rows(
                result, "table3", f"vae/{data}/capacity:{label}", OOD_SETS[data], {"rose-ekfac": "rose-ekfac"}
            ):
                rows.append(
                    Row(
                        (row.labels[0], f"{label} (ngf {dict(recipe.arch)['ngf']})"),
                        row.ours,
                        row.paper,
                        row.why,
                    )
                )
            rep.results[f"{data}/{label}"] = result.to_json()
        rep.compare(f"ROSE-EKFAC AUROC vs VAE capacity, {data}", ("OOD set", "capacity"), rows)


# -- Table 6 ---------------------------------------------------------------------------------------
def run_table6(ws: Workspace, out: Path, rep: BenchReport) -> None:
    methods = ["rose-diag", "rose-ekfac"]
    for data in ws.select_data():
        result = evaluate_variants(
            ws, ws.model(ws.vae(data)), data, OOD_SETS[data], {m: (m, {}) for m in methods}
        )
        rows = compare_rows(result, "table6", f"vae/{data}", OOD_SETS[data], {m: m for m in methods})
        rep.compare(
            f"AUROC, VAE on {data}: diagonal vs EKFAC Fisher (encoder convs)", ("OOD set", "Fisher"), rows
        )
        sub_report(rep, result, out, f"vae-{data}", f"ROSE DIAG vs EKFAC, VAE on {data}")


# -- Table 7 ---------------------------------------------------------------------------------------
def run_table7(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for data in ws.select_data():
        variants: Variants = {layers: ("rose-diag", {"layers": layers}) for layers in ("invconv", "all")}
        result = evaluate_variants(ws, ws.model(ws.glow(data)), data, OOD_SETS[data], variants)
        metrics = result.metrics()
        rows = [
            Row(
                (ood, layers),
                metric_of(metrics, layers, ood),
                paper_value("table7", f"glow/{data}/layers:{layers}", ood, "rose-diag/auroc"),
                "no data",
            )
            for ood in OOD_SETS[data]
            for layers in variants
        ]
        rep.compare(
            f"AUROC, Glow on {data}: ROSE-DIAG on InvConv layers vs all convs", ("OOD set", "layers"), rows
        )
        sub_report(rep, result, out, f"glow-{data}", f"Glow on {data}: InvConv vs all layers")


# -- Tables 1, 8, 9: brightness --------------------------------------------------------------------
def brightness_variants(ws: Workspace, recipe: ModelRecipe) -> Variants:
    """LRatio with a background per perturbation, RND per perturbation, and ROSE (Table 1's rows)."""
    variants: Variants = {}
    for p in PERTURBATIONS:
        variants[f"lratio/{p}"] = ("lratio", with_background(ws, recipe, p))
    for p in PERTURBATIONS:
        variants[f"{RND_METHOD[p.split(':')[0]]}/{p}"] = (RND_METHOD[p.split(":")[0]], {"perturbation": p})
    variants["rose-ekfac"] = ("rose-ekfac", {})
    return variants


def run_brightness(ws: Workspace, out: Path, rep: BenchReport) -> None:
    data = "cifar10"
    recipe = ws.vae(data)
    model = ws.model(recipe)
    variants = brightness_variants(ws, recipe)
    levels = ws.profile.brightness
    auroc: dict[str, dict[str, list[float | None]]] = {
        ood: {v: [] for v in variants} for ood in BRIGHTNESS_TABLES
    }
    for b in levels:
        metrics = evaluate_variants(
            ws, model, data, list(BRIGHTNESS_TABLES), variants, brightness=b
        ).metrics()
        for ood in BRIGHTNESS_TABLES:
            for v in variants:
                auroc[ood][v].append(metric_of(metrics, v, ood))
    rep.results["auroc"] = auroc
    rep.results["brightness"] = list(levels)
    for ood, table in BRIGHTNESS_TABLES.items():
        if all(x is None for per in auroc[ood].values() for x in per):
            rep.section(f"{ood} ({table}): no data", f"The {ood} files are not in the data folder.")
            continue
        header = ["method / perturbation", *(f"{b:g}×" for b in levels), "mean", "std"]
        lines, rows = [], []
        for v, values in auroc[ood].items():
            vals = np.array([np.nan if x is None else x for x in values])
            mean, std = float(np.nanmean(vals)), float(np.nanstd(vals))
            key = "rose-ekfac" if v == "rose-ekfac" else v
            paper = [paper_value(table, f"vae/{data}/{ood}/{key}/brightness:{b:g}/auroc") for b in levels]
            pm, ps = (paper_value(table, f"vae/{data}/{ood}/{key}/auroc/{s}") for s in ("mean", "std"))
            cells = [
                f"{x:.3f} ({'–' if p is None else f'{p:.3f}'})" for x, p in zip(vals, paper, strict=True)
            ]
            lines.append(
                [
                    v,
                    *cells,
                    f"{mean:.3f} ({'–' if pm is None else f'{pm:.3f}'})",
                    f"{std:.3f} ({'–' if ps is None else f'{ps:.3f}'})",
                ]
            )
            rows += [Row((v, "mean"), mean, pm), Row((v, "std"), std, ps)]
        rep.section(
            f"AUROC vs brightness of {ood}, VAE on CIFAR-10 ({table}): ours (paper)",
            markdown_rows(header, lines),
        )
        rep.compare(f"Mean and std over brightness, {ood}", ("method", "statistic"), rows)
        fig = plot_lines(
            list(levels),
            {v: [np.nan if x is None else x for x in vals] for v, vals in auroc[ood].items()},
            out / f"brightness_{ood}.png",
            xlabel=f"brightness factor of {ood}",
            ylabel="AUROC",
            title=f"VAE on CIFAR-10 vs {ood} at varying brightness",
        )
        rep.figure(fig, f"AUROC of each method vs the brightness of {ood} (VAE trained on CIFAR-10)", out)
    rep.parts.append(
        "Table 9 (Omniglot) used SVD with K = 22 in the paper; this run uses K = 28 for all three sets, "
        "so its SVD rows have no paper number."
    )


# -- Tables 10 and 11: perturbation variants ---------------------------------------------------------
TABLE10_PERTURBATIONS = ["svd:22", "svd:28", "dct:28", "gb", "random:0.1", "random:0.2", "random:0.3"]


def run_table10(ws: Workspace, out: Path, rep: BenchReport) -> None:
    data = "cifar10"
    recipe = ws.vae(data)
    variants: Variants = {p: ("lratio", with_background(ws, recipe, p)) for p in TABLE10_PERTURBATIONS}
    result = evaluate_variants(ws, ws.model(recipe), data, OOD_SETS[data], variants)
    rows = compare_rows(
        result, "table10", f"vae/{data}", OOD_SETS[data], {p: f"lratio/{p}" for p in variants}
    )
    rep.compare(
        "LRatio AUROC on the CIFAR-10 VAE per background perturbation", ("OOD set", "perturbation"), rows
    )
    sub_report(rep, result, out, "vae-cifar10", "Likelihood Ratio backgrounds, VAE on CIFAR-10")


def run_table11(ws: Workspace, out: Path, rep: BenchReport) -> None:
    data = "cifar10"
    variants: Variants = {
        p: (RND_METHOD[p.split(":")[0]], {"perturbation": p}) for p in TABLE10_PERTURBATIONS
    }
    result = evaluate_variants(ws, ws.model(ws.vae(data)), data, OOD_SETS[data], variants)
    segments = {p: f"{RND_METHOD[p.split(':')[0]]}/{p}" for p in variants}
    rows = compare_rows(result, "table11", f"vae/{data}", OOD_SETS[data], segments)
    rep.compare("RND AUROC on CIFAR-10 per perturbation", ("OOD set", "perturbation"), rows)
    sub_report(rep, result, out, "rnd-cifar10", "RND perturbations on CIFAR-10")


# -- Figures ---------------------------------------------------------------------------------------
FIGURE_OOD = {
    "fashion_mnist": ["mnist"],
    "cifar10": ["svhn", "celeba"],
}  # CelebA stands in when SVHN is absent


def run_figure1(ws: Workspace, out: Path, rep: BenchReport) -> None:
    for kind in ws.select_models(("vae", "glow")):
        for data in ws.select_data():
            model = ws.model(ws.vae(data) if kind == "vae" else ws.glow(data))
            result = evaluate_variants(ws, model, data, FIGURE_OOD[data], {"nll": ("nll", {})})
            fig = plot_histograms(result, "nll", out / f"nll_{kind}_{data}.png")
            rep.figure(fig, f"NLL histograms, {kind.upper()} trained on {data} (higher = less likely)", out)
            rep.results[f"{kind}/{data}"] = result.to_json()
            if result.missing:
                rep.parts.append(f"No data for: {', '.join(result.missing)}.")


def run_figure3(ws: Workspace, out: Path, rep: BenchReport) -> None:
    methods = {"nll": "nll", "rose-ekfac": "rose-ekfac"}
    for data in ws.select_data():
        result = evaluate_variants(
            ws, ws.model(ws.vae(data)), data, FIGURE_OOD[data], {m: (m, {}) for m in methods}
        )
        rows = compare_rows(result, "figure3", f"vae/{data}", FIGURE_OOD[data], methods)
        rep.compare(f"AUROC in the ROC figure, VAE on {data}", ("OOD set", "method"), rows)
        for ood in result.ood_sets:
            fig = plot_roc(result, ood, out / f"roc_{data}_{ood}.png")
            rep.figure(fig, f"ROC curves of NLL and ROSE, VAE trained on {data} vs {ood}", out)
        if result.missing:
            rep.parts.append(f"No data for: {', '.join(result.missing)}.")
        rep.results[f"vae/{data}"] = result.to_json()


FIGURE4_METHODS = ["rose-ekfac", "rose-diag", "nll", "lr", "lratio", "ic-png", "ic-jp2"]


def run_figure4(ws: Workspace, out: Path, rep: BenchReport) -> None:
    data = "cifar10"
    recipe = ws.vae(data)
    variants: Variants = {m: (m, {}) for m in FIGURE4_METHODS}
    variants["lratio"] = ("lratio", with_background(ws, recipe))
    result = evaluate_variants(ws, ws.model(recipe), data, OOD_SETS[data], variants)
    metrics = result.metrics()
    points = {
        m: (result.images_per_second[m], metric_of(metrics, m, OVERALL) or float("nan")) for m in variants
    }
    fig = plot_scatter(
        points, out / "runtime_vs_auroc.png", "images per second (log)", "AUROC on overall", "VAE on CIFAR-10"
    )
    lines = [
        [
            m,
            f"{ips:.2f}",
            f"{auc:.3f}",
            str(paper_value("figure4", f"vae/{data}/{m}/images_per_second") or "–"),
        ]
        for m, (ips, auc) in points.items()
    ]
    rep.section(
        "Speed and overall AUROC per method (VAE on CIFAR-10)",
        "images/s: scoring the in-distribution test set on this machine; the paper's speeds were measured on "
        "an RTX 3090 GPU, so only the ordering compares.",
        markdown_rows(["method", "images/s", "overall AUROC", "paper images/s (GPU)"], lines),
    )
    rep.compare(
        "Overall AUROC",
        ("OOD set", "method"),
        compare_rows(result, "figure4", f"vae/{data}", [OVERALL], {"rose-ekfac": "rose-ekfac"}),
    )
    rep.figure(fig, "Runtime (images/s, log scale) vs overall AUROC of each method", out)
    rep.results["points"] = points


@dataclass
class CachedROSE:
    """A ROSE detector fitted on first use, whose (layer-wise) scores go through the result cache."""

    ws: Workspace
    key: dict[str, Any]
    model: RoseModel
    fisher_images: np.ndarray
    stats_images: np.ndarray
    fisher: str = "ekfac"
    layers: str | None = None
    layerwise: bool = False
    _det: ROSE | None = None

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.ws.cache.scores(
            cache_key(self.key | {"images": array_digest(images)}), partial(self._compute, images)
        )

    def _compute(self, images: np.ndarray) -> np.ndarray:
        if self._det is None:
            det = ROSE(
                self.model, fisher=self.fisher, layers=self.layers, batch_size=self.ws.profile.batch_size
            )
            self._det = det.fit(self.fisher_images, held_out=self.stats_images)
        return self._det.layer_scores(images).numpy() if self.layerwise else self._det.score(images)


def load_ood(
    ws: Workspace, names: list[str], n: int, channels: int, rep: BenchReport
) -> dict[str, np.ndarray]:
    """The named OOD test sets that exist (seeded subsets of ``n``); absent ones are noted in the report."""
    sets: dict[str, np.ndarray] = {}
    for i, name in enumerate(names):
        try:
            sets[name] = load_images(name, n=n, seed=2022 + i, channels=channels, data_dir=ws.data_dir).images
        except DataError:
            rep.parts.append(f"{name}: no data in the data folder; left out.")
    return sets


def run_figure5(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """AUROC on the overall set vs the number of Fisher images (fresh random draws per repeat); the layer
    statistics images and the test sets stay fixed so only the Fisher varies."""
    data = "fashion_mnist"
    p = ws.profile
    model = ws.model(ws.vae(data))
    pool = load_images(f"{data}:train", seed=0, channels=1, data_dir=ws.data_dir).images
    order = np.random.default_rng(0).permutation(len(pool))
    stats, rest = pool[order[: p.fisher_stats_samples]], pool[order[p.fisher_stats_samples :]]
    test = load_images(data, n=p.fisher_test_samples, seed=2021, channels=1, data_dir=ws.data_dir).images
    ood = load_ood(ws, [s for s in OOD_SETS[data] if s != OVERALL], p.fisher_test_samples, 1, rep)
    per_set: dict[int, dict[str, list[float]]] = {}
    for n in p.fisher_sizes:
        per_set[n] = {s: [] for s in [*ood, OVERALL]}
        for r in range(p.fisher_repeats):
            fisher_images = rest[np.random.default_rng(r).choice(len(rest), n, replace=False)]
            key = {
                "figure5": model_fingerprint(model),
                "fisher": array_digest(fisher_images),
                "stats": array_digest(stats),
            }
            rose = CachedROSE(ws, key, model, fisher_images, stats)
            s_in = rose(test)
            s_ood = {name: rose(x) for name, x in ood.items()}
            s_ood[OVERALL] = overall_scores(s_ood, list(ood), p.overall_per_set, r)
            for name, s in s_ood.items():
                per_set[n][name].append(ood_metrics(s_in, s)["auroc"])
    fig = plot_box(
        {str(n): v[OVERALL] for n, v in per_set.items()},
        out / "fisher_samples_box.png",
        "number of Fisher samples",
        "AUROC on overall",
        f"ROSE-EKFAC, VAE on {data}: {p.fisher_repeats} repeats per size",
    )
    rep.figure(
        fig,
        f"AUROC on the overall set vs the number of Fisher images ({p.fisher_repeats} random draws each)",
        out,
    )
    header = ["Fisher samples", *(f"{s} mean ± std" for s in [*ood, OVERALL])]
    lines = [
        [str(n), *(f"{np.mean(v):.3f} ± {np.std(v):.3f}" for v in per_set[n].values())]
        for n in p.fisher_sizes
    ]
    rep.section(
        f"AUROC (mean ± std over {p.fisher_repeats} repeats)",
        f"{len(test)} in-distribution test images, {p.fisher_test_samples} per OOD set, overall = "
        f"{min(p.overall_per_set, p.fisher_test_samples)} of each; {len(stats)} fixed images for the "
        "layer statistics.",
        markdown_rows(header, lines),
    )
    rep.results["auroc"] = {str(n): v for n, v in per_set.items()}


def run_figure6(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """Layer-wise ROSE-DIAG AUROC on classifiers trained on Fashion-MNIST (loss: cross-entropy with the
    predicted label)."""
    p = ws.profile
    fit = load_images(
        "fashion_mnist:train", n=p.fit_samples + p.stats_samples, seed=2021, channels=1, data_dir=ws.data_dir
    ).images
    test = load_images("fashion_mnist", n=p.test_samples, seed=2021, channels=1, data_dir=ws.data_dir).images
    ood = load_ood(ws, CLASSIFIER_OOD, p.test_samples, 1, rep)
    for arch in CLASSIFIERS:
        model = ws.model(ws.classifier(arch))
        key = {"figure6": model_fingerprint(model), "fit": array_digest(fit), "n_fisher": p.fit_samples}
        rose = CachedROSE(
            ws, key, model, fit[: p.fit_samples], fit[p.fit_samples :], "diag", "all", layerwise=True
        )
        s_in = rose(test)
        series = {}
        for name, x in ood.items():
            s_out = rose(x)
            series[name] = [ood_metrics(s_in[:, j], s_out[:, j])["auroc"] for j in range(s_in.shape[1])]
        layers = model.rose_layers("all")
        fig = plot_lines(
            list(range(1, len(layers) + 1)),
            series,
            out / f"layerwise_{arch}.png",
            "layer (input → output)",
            "AUROC",
            f"layer-wise ROSE-DIAG, {arch} on Fashion-MNIST",
        )
        rep.figure(fig, f"Layer-wise AUROC of ROSE-DIAG on a {arch} classifier trained on Fashion-MNIST", out)
        rep.results[arch] = {"layers": layers, "auroc": series}


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment("table2", "AUROC, AUPRC and FPR80 of every method", "Tables 2, 4 and 5", run_table2),
        Experiment("table3", "ROSE vs VAE capacity", "Table 3", run_table3),
        Experiment("table6", "Diagonal vs EKFAC Fisher on the VAE", "Table 6", run_table6),
        Experiment("table7", "InvConv vs all layers on Glow", "Table 7", run_table7),
        Experiment(
            "brightness", "Robustness to the brightness of OOD images", "Tables 1, 8 and 9", run_brightness
        ),
        Experiment("table10", "Likelihood Ratio background perturbations", "Table 10", run_table10),
        Experiment("table11", "RND perturbations", "Table 11", run_table11),
        Experiment(
            "figure1", "NLL histograms of in- and out-of-distribution images", "Figure 1", run_figure1
        ),
        Experiment("figure3", "ROC curves of NLL and ROSE", "Figure 3", run_figure3),
        Experiment("figure4", "Runtime vs overall AUROC per method", "Figure 4", run_figure4),
        Experiment("figure5", "AUROC vs the number of Fisher samples", "Figure 5", run_figure5),
        Experiment("figure6", "Layer-wise ROSE on classifiers", "Figure 6", run_figure6),
        Experiment("ablation", "ROSE aggregations × Fisher × layers", "beyond the paper", run_ablation),
    )
}
