"""``python -m research near-ood`` (beyond the paper): ROSE's vector judged whole (``rose-gmm``,
``rose-gmm-stats``, ``rose-gmm-all``: ``roseood.detectors.features``; ``rose-two-sided``) against the
paper's ``rose-ekfac``, on every model family we have, for the near-OOD sets where the paper is weak
(CIFAR-10 → CelebA) and the far ones it must keep.

Each model's EKFAC Fisher is fitted once on its fit images (``research.rescoring``); the raw
layer scores, the model's statistics and the images' complexity of the statistics images, the test set and
every OOD set are cached; every variant is then fitted on the statistics images' columns as
``ROSE.fit_stats`` fits it, so the variants differ only in what they aggregate and how; on a DDPM the band
variants (``rose-bands``, ``rose-bands-stats``) read the same Fisher's scores of every row. Models:
Fashion-MNIST: the authors' VAE (shipped), the bench's Glows and PixelCNNs, the zoo's three DDPMs
(``--models ddpm``); CIFAR-10: the zoo's three VAEs (the paper's recipe), the bench's Glows and
PixelCNNs, the zoo's three DDPMs. The bench trains its Glow and PixelCNN once per training seed of the
profile (``near_ood_seeds``); every model but the authors' VAE takes data seed 2021 + its training seed.

The rule, written before any run: a variant becomes the default of ``rose evaluate`` for a model family
only if its mean AUROC over the data set's OOD sets is above ``rose-ekfac``'s on every model of that
family and no far-OOD set (noise and constant images; for CIFAR-10 also MNIST and Fashion-MNIST) that
``rose-ekfac`` has at ≥ 0.99 drops below 0.99; otherwise it stays an option. A family with one model
decides on that one model (said beside the verdict). A family's models are those of every data set run.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from research.diffusion import DATA_SEED, OOD, judged, mean_interval
from research.profiles import profile_of
from research.rescoring import Columns, LayerScores, fit_on_columns, in_test_images, scores_on_columns
from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.contracts import rows_per_input
from roseood.demo import demo_model
from roseood.detectors import ROSE
from roseood.detectors.rose import BAND_METHODS, NEAR_OOD_METHODS
from roseood.evaluation.cache import array_digest, cache_key
from roseood.evaluation.metrics import ood_metrics
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.splits import load_fit_images, load_ood_sets
from roseood.models.base import RoseModel, model_name
from roseood.models.checkpoint import load_model, model_fingerprint
from roseood.models.diffusion import as_diffusion_model
from roseood.models.zoo import zoo_seeds

DEFAULT = "rose-ekfac"


def _aggregations(methods: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """Each method's (aggregate, features), what it is fitted from on the cached columns."""
    return {name: (kw["aggregate"], kw.get("features", "layers")) for name, kw in methods.items()}


VARIANTS = {DEFAULT: ("relu-norm", "layers")} | _aggregations(NEAR_OOD_METHODS)
# on the columns of ROSE(rows="bands"): models whose loss runs each image several times (DDPMs)
BANDS = _aggregations(BAND_METHODS)
ALL_FEATURES = "layers,stats,complexity"
FAR = {"fashion_mnist": ("noise", "constant"), "cifar10": ("mnist", "fashion_mnist", "noise", "constant")}
STATS = "statistics images"
TIMED = 32  # images the per-image costs are timed on


def near_ood_models(ws: Workspace, data: str) -> list[tuple[str, str, RoseModel, int]]:
    """(family, label, model, data seed) of every model the selection names for ``data``."""
    out: list[tuple[str, str, RoseModel, int]] = []
    for kind in ws.select_models(("vae", "glow", "pixelcnn")):
        if kind == "vae" and data == "fashion_mnist":
            out.append(("vae", "authors' VAE", demo_model(), DATA_SEED))
        elif kind == "vae":
            out += [("vae", name, load_model(name), DATA_SEED + s) for s, name in zoo_seeds("vae", data)]
        else:
            for s in profile_of(ws).near_ood_seeds:
                recipe = replace({"glow": ws.glow, "pixelcnn": ws.pixelcnn}[kind](data), seed=s)
                out.append((kind, recipe.name, ws.model(recipe), DATA_SEED + s))
    if "ddpm" in ws.models:
        for s, name in zoo_seeds("ddpm", data):
            model = as_diffusion_model(load_model(name), "the near-OOD bench")
            out.append(("ddpm", name, model, DATA_SEED + s))
    return [(f, label, m.to(ws.device).eval(), s) for f, label, m, s in out]


def model_result(ws: Workspace, family: str, model: RoseModel, data: str, seed: int) -> dict[str, Any]:
    """Every variant's AUROC per OOD set on one model, and the per-image costs beside ROSE-EKFAC's. The
    zoo's DDPMs get the image counts of ``python -m research diffusion-zoo`` (a UNet's ROSE costs far
    more)."""
    sizes = ws.profile.experiment_overrides.get("diffusion-zoo", {}) if family == "ddpm" else {}
    counts = {k: v for k, v in sizes.items() if k in ("fit_samples", "stats_samples", "test_samples")}
    spec = ws.spec(model, data, OOD[data], [DEFAULT], seed=seed, **counts)
    fit = load_fit_images(spec, model)
    test = in_test_images(spec, model, data)
    ood_sets, _ = load_ood_sets(spec, model)
    scorer = LayerScores(
        ws.cache,
        model,
        "ekfac",
        model.rose_layers(),
        fit.fisher,
        spec.batch_size,
        ALL_FEATURES,
        ws.progress,
    )
    sets = {STATS: fit.held_out, data: test} | {k: v.images for k, v in ood_sets.items()}
    columns = {k: scorer(v) for k, v in sets.items()}
    plan = [(v, how, scorer.rows, columns) for v, how in VARIANTS.items()]
    bands = None
    if rows_per_input(model) > 1:
        bands = replace(scorer, rows="bands", features="layers,stats", _det=None)  # its Fishers: the pool's
        band_columns = {k: bands(v) for k, v in sets.items()}
        plan += [(v, how, bands.rows, band_columns) for v, how in BANDS.items()]
    aurocs, agg_seconds = {}, {}
    for variant, (aggregate, features), rows, cols in plan:
        det = ROSE(
            model,
            fisher=scorer.fisher,
            layers=scorer.layers,
            rows=rows,
            aggregate=aggregate,
            features=features,
            progress=False,
        )
        t0 = time.perf_counter()
        fit_on_columns(det, cols[STATS])
        agg_seconds[variant] = time.perf_counter() - t0
        scores = scores_on_columns(det, cols)
        aurocs[variant] = {s: float(ood_metrics(scores[data], scores[s])["auroc"]) for s in ood_sets}
    costs = _costs(ws, scorer, test[:TIMED], columns[STATS], agg_seconds)
    if bands is not None:
        costs["bands_s_per_image"], costs["bands_rose_s_per_image"] = _band_cost(
            ws, bands, scorer, test[:TIMED]
        )
    return {"auroc": aurocs, "costs": costs}


def _band_cost(
    ws: Workspace, bands: LayerScores, summed: LayerScores, images: np.ndarray
) -> tuple[float, float]:
    """Seconds per image of the band scores (every row's gradient) and of ROSE-EKFAC's layer scores (each
    image's summed gradient), timed in turn on ``images`` in one run, so both see the same machine load;
    cached."""
    key = cache_key({"near-ood-band-costs": model_fingerprint(bands.model), "images": array_digest(images)})

    def measure() -> dict[str, np.ndarray]:
        seconds = {}
        for name, scorer in (("bands", bands), ("rose", summed)):
            det = scorer.detector()
            t0 = time.perf_counter()
            det.layer_scores_and_loss(images)
            seconds[name] = np.array((time.perf_counter() - t0) / len(images))
        return seconds

    found = ws.cache.arrays(key, ("bands", "rose"), measure)
    return float(found["bands"]), float(found["rose"])


def _costs(
    ws: Workspace, scorer: LayerScores, images: np.ndarray, stats: Columns, agg_seconds: dict[str, float]
) -> dict[str, float]:
    """Seconds per image of ROSE-EKFAC's layer scores, of the model's statistics and of the complexity
    (timed once on ``images`` and cached), and each variant's aggregation fit in seconds."""
    key = cache_key({"near-ood-costs": model_fingerprint(scorer.model), "images": array_digest(images)})

    def measure() -> dict[str, np.ndarray]:
        det = scorer.detector()
        x = scorer.as_tensor(images)
        t0 = time.perf_counter()
        _, loss = det.layer_scores_and_loss(images)
        seconds = {"rose": time.perf_counter() - t0}
        for name, features in (("stats", "layers,stats"), ("complexity", "layers,complexity")):
            det.features = features
            t0 = time.perf_counter()
            det.extra_features(x, loss)
            seconds[name] = time.perf_counter() - t0
        det.features = ALL_FEATURES
        return {name: np.array(s / len(images)) for name, s in seconds.items()}

    found = ws.cache.arrays(key, ("rose", "stats", "complexity"), measure)
    return {f"{name}_s_per_image": float(found[name]) for name in ("rose", "stats", "complexity")} | {
        **{f"fit_{v}_s": s for v, s in agg_seconds.items()},
        "held_out_images": float(len(stats.raw)),
    }


def verdict(per_model: list[tuple[str, dict[str, Any]]], variant: str) -> str:
    """The rule's verdict for ``variant`` over (data set, result) of a family's models (see the module's
    docstring): ``default`` only if it passes on every one of them."""
    if variant == DEFAULT:
        return "the default"
    above, dropped = True, []
    for data, r in per_model:
        mine, base = r["auroc"][variant], r["auroc"][DEFAULT]
        sets = judged(list(mine))  # a matched twin, not the set as stored
        above &= bool(np.mean([mine[s] for s in sets]) > np.mean([base[s] for s in sets]))
        dropped += [s for s in FAR[data] if s in mine and base[s] >= 0.99 > mine[s]]
    if dropped:
        return f"option (a far set drops below 0.99: {', '.join(sorted(set(dropped)))})"
    return "default" if above else "option (not above rose-ekfac on every model)"


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    rep.parts.append(
        "Each model's EKFAC Fisher fitted once; the variants fitted on the same statistics images' columns. "
        "Cells: AUROC, the mean ± 95 % t-interval over a family's models where it has several, each model's "
        "value beside it. Rule (written before the runs): a variant becomes a family's default only if its "
        "mean AUROC over the OOD sets is above rose-ekfac's on every model of the family and no far-OOD set "
        "rose-ekfac has at ≥ 0.99 drops below 0.99. Each table's column applies it to that data set's "
        "models; the family's verdict, over every data set run, is the last section."
    )
    zoo = {
        k: v for k, v in ws.profile.experiment_overrides.get("diffusion-zoo", {}).items() if "samples" in k
    }
    if "ddpm" in ws.models and zoo:
        rep.parts.append(f"The zoo's DDPMs take diffusion-zoo's image counts instead of the table's: {zoo}.")
    every: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for data in ws.select_data():
        families: dict[str, list[dict[str, Any]]] = {}
        for family, label, model, seed in near_ood_models(ws, data):
            result = model_result(ws, family, model, data, seed) | {"model": label, "kind": model_name(model)}
            families.setdefault(family, []).append(result)
            every.setdefault(family, []).append((data, result))
            rep.results[f"{data}/{label}"] = result
        for family, results in families.items():
            sets = list(results[0]["auroc"][DEFAULT])
            here = [(data, r) for r in results]
            rows = [
                [v, *(_cell([r["auroc"][v][s] for r in results]) for s in sets), verdict(here, v)]
                for v in results[0]["auroc"]
            ]
            one = " (one model: it decides alone)" if len(results) == 1 else ""
            rep.section(
                f"AUROC, {family} on {data}{one}",
                markdown_rows(["method", *sets, f"rule on {data}'s models"], rows),
                _cost_line(results),
            )
    rows = [
        [family, f"{len(runs)} ({', '.join(sorted({d for d, _ in runs}))})", v, verdict(runs, v)]
        for family, runs in every.items()
        for v in runs[0][1]["auroc"]
        if v != DEFAULT
    ]
    rep.section(
        "The rule's verdict per family (every model run, all data sets)",
        markdown_rows(["family", "models", "variant", "verdict"], rows),
    )
    rep.results["verdicts"] = {f"{r[0]}/{r[2]}": r[3] for r in rows}


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f} ({' / '.join(f'{v:.3f}' for v in values)})"


def _cost_line(results: list[dict[str, Any]]) -> str:
    c = {k: float(np.mean([r["costs"][k] for r in results])) for k in results[0]["costs"]}
    rose = c["rose_s_per_image"]
    fits = ", ".join(f"{v} {c[f'fit_{v}_s']:.2f} s" for v in results[0]["auroc"])
    bands = (
        f"; the band scores (every row's gradient) instead of the layer scores: "
        f"{c['bands_s_per_image'] / c['bands_rose_s_per_image']:.2f}× ROSE-EKFAC's time, timed in turn "
        f"({c['bands_s_per_image'] * 1e3:.1f} against {c['bands_rose_s_per_image'] * 1e3:.1f} ms)"
        if "bands_s_per_image" in c
        else ""
    )
    return (
        f"Cost per scored image beside ROSE-EKFAC's {rose * 1e3:.1f} ms: the model's statistics "
        f"+{c['stats_s_per_image'] * 1e3:.1f} ms ({c['stats_s_per_image'] / rose:.1%}), the complexity "
        f"+{c['complexity_s_per_image'] * 1e3:.1f} ms ({c['complexity_s_per_image'] / rose:.1%}){bands}; "
        f"the aggregation's fit on {c['held_out_images']:.0f} held-out images: {fits} (the Fisher is shared)."
    )


EXPERIMENT = common.Experiment(
    "near-ood",
    "ROSE's vector judged whole (near-OOD)",
    "beyond the paper",
    run,
    common.Uses(("vae", "glow", "pixelcnn", "ddpm (zoo)"), common.BOTH, (*VARIANTS, *BANDS), ("near-ood",)),
)
