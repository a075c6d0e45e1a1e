"""``python -m research diffusion-defaults`` (beyond the paper): ROSE's defaults for a diffusion model judged
on the zoo — the number K of (timestep, noise) pairs, their timestep range, the layer set, the Fisher kind and
the number of noise draws.

Each setting is a ROSE fit on all the UNet's layers (``research.rescoring``: fitted once,
every image set's layer scores cached, so an interrupted run resumes); each named layer set is its
columns, aggregated by the paper's relu-norm fitted on the statistics images. Settings, one change at a
time from the default (the model's own K, 8 for the zoo, on the full range; all layers; EKFAC; one
draw): half and twice that K, the lower and the upper half of the timesteps, the diagonal Fisher, each
layer set, and three draws combined (the mean of the three detectors' scores, each z-normalised on the
statistics images). Data: the images of ``python -m research diffusion-zoo`` (its profile's image counts, data
seed + the training seed). The settings that reuse the default fit (the layer sets) run first on every
model; then the settings that need fits of their own, one at a time, each on every model in turn until
its verdict is decided: a setting at or below the default on one model cannot pass the rule, so it is
not run on the others (its verdict is final; its cells show the models it ran on). The report is
rewritten after each (setting, model) run, so a run stopped part-way keeps every verdict it completed.

The rule, written before any run: a setting replaces the default only if its mean AUROC over the data
set's OOD sets is above the default's on every zoo model of that data set; otherwise the default stays.
Since eleven settings are judged on the same images, a setting that passes is confirmed on fresh images
(test and OOD images drawn with another seed; the same Fisher and statistics images) before it replaces
the default: it must be above the default on every model there too (added after the first runs; it can
only refuse a setting the first draw accepted).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from research.diffusion import DATA_SEED, OOD, judged, mean_interval
from research.rescoring import LayerScores, fit_on_columns, in_test_images, scores_on_columns
from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.detectors import ROSE
from roseood.evaluation.metrics import ood_metrics
from roseood.evaluation.report import markdown_rows
from roseood.evaluation.splits import load_fit_images, load_ood_sets
from roseood.models import zoo
from roseood.models.checkpoint import load_model
from roseood.models.diffusion import DiffusionModel, as_diffusion_model

DEFAULT: dict[str, Any] = {"fisher": "ekfac", "layers": "all", "draws": 1}  # and the model's own pairs
STATS = "statistics images"
FRESH = " (fresh images)"  # a confirmation run's label suffix
FRESH_SEED_STEP = 100  # image draw d uses data seed + 100·d (the bench's data seeds are 0..2 above DATA_SEED)


def settings(model: DiffusionModel) -> dict[str, dict[str, Any]]:
    """Each setting's name and how it differs from ``DEFAULT`` and the model's own K and timestep range:
    half and twice K, each half of the range, the whole range [0, 1) if the model's is narrower, …"""
    out: dict[str, dict[str, Any]] = {"default": {}}
    k, lo, hi = model.k, model.denoising["t_min"], model.denoising["t_max"]
    mid = (lo + hi) / 2
    out |= {f"K = {j}": {"k": j} for j in (max(1, k // 2), 2 * k)}
    out |= {f"t ∈ [{lo:g}, {mid:g})": {"t_max": mid}, f"t ∈ [{mid:g}, {hi:g})": {"t_min": mid}}
    if (lo, hi) != (0.0, 1.0):
        out |= {"t ∈ [0, 1)": {"t_min": 0.0, "t_max": 1.0}}
    out |= {"diag Fisher": {"fisher": "diag"}}
    out |= {f"layers {s}": {"layers": s} for s in model.layer_sets() if s != DEFAULT["layers"]}
    return out | {"3 draws combined": {"draws": 3}}


def setting_scores(
    ws: Workspace,
    model: DiffusionModel,
    data: str,
    seed: int,
    setting: dict[str, Any],
    image_draw: int = 0,
) -> dict[str, np.ndarray]:
    """One setting's relu-norm scores of the test set and every OOD set (draws combined); ``image_draw``
    > 0 draws the test and OOD images with another seed (the Fisher and statistics images stay)."""
    own = {k: model.denoising[k] for k in ("k", "t_min", "t_max")}
    s = DEFAULT | own | setting
    sizes = ws.profile.experiment_overrides.get("diffusion-zoo", {})
    counts = {k: v for k, v in sizes.items() if k in ("fit_samples", "stats_samples", "test_samples")}
    spec = ws.spec(model, data, OOD[data], ["rose-ekfac"], seed=DATA_SEED + seed, **counts)
    fit = load_fit_images(spec, model)
    spec.seed += FRESH_SEED_STEP * image_draw
    test = in_test_images(spec, model, data)
    sets = {STATS: fit.held_out, data: test} | {k: v.images for k, v in load_ood_sets(spec, model)[0].items()}
    base = dict(model.denoising)
    every = model.layer_sets()["all"]
    cols = [every.index(name) for name in model.layer_sets()[s["layers"]]]
    combined: dict[str, np.ndarray] = {}
    try:
        for draw in range(s["draws"]):
            pairs = {"k": s["k"], "t_min": s["t_min"], "t_max": s["t_max"], "seed": base["seed"] + draw}
            model.set_denoising(**(base | pairs))
            scorer = LayerScores(
                ws.cache, model, s["fisher"], every, fit.fisher, spec.batch_size, progress=ws.progress
            )
            columns = {k: scorer(v) for k, v in sets.items()}
            det = ROSE(model, fisher=s["fisher"], layers=model.layer_sets()[s["layers"]], progress=False)
            scores = scores_on_columns(fit_on_columns(det, columns[STATS], cols), columns, cols)
            mean, std = scores[STATS].mean(), scores[STATS].std() or 1.0
            for k, v in scores.items():
                z = (v - mean) / std if s["draws"] > 1 else v
                combined[k] = combined.get(k, 0.0) + z / s["draws"]
    finally:
        model.set_denoising(**base)
    return combined


def needs_fit(change: dict[str, Any]) -> bool:
    """Whether a setting needs a ROSE fit of its own (a layer set reads the default fit's columns)."""
    return any(k != "layers" for k in change)


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """The default and the layer sets first (one fit per model), then each other setting on every model
    in turn; after each (setting, model) ``report.md`` holds the tables so far (marked partial), so a
    run stopped part-way leaves every verdict it completed."""
    started = time.time()
    rep.parts.append(
        f"Default: {DEFAULT} and the model's own K pairs and timestep range (its `denoising` "
        "settings). One change at a time; relu-norm over each layer "
        "set's columns of one fit on all layers. Cells: mean AUROC over the OOD sets, mean ± 95 % "
        "t-interval over the zoo models (each model's value beside it). Rule (written before the runs): "
        "a setting replaces the default only if it is above the default on every zoo model, and (added "
        f"after the first runs) again on fresh test and OOD images (data seed + {FRESH_SEED_STEP}). "
        "Order: the settings that reuse the default fit on every model, then the others one at a time on "
        "every model until the rule refuses one (not above the default on a model already run)."
    )
    for data in ws.select_data():
        names = dict(zoo.zoo_seeds("ddpm", data))
        models: dict[int, DiffusionModel] = {}
        for seed, name in names.items():
            model = as_diffusion_model(load_model(zoo.zoo_path(name)), "the defaults bench")
            models[seed] = model.to(ws.device).eval()
        first = next(iter(names))
        changes = settings(models[first])  # the same labels on every zoo model of a data set
        own = models[first].denoising
        rep.parts.append(
            f"{data}: the zoo models' pairs: K = {own['k']} on t ∈ [{own['t_min']:g}, {own['t_max']:g})."
        )
        free = [label for label, change in changes.items() if not needs_fit(change)]
        order = [(label, seed, 0) for label in free for seed in names]
        for label in (label for label in changes if label not in free):
            order += [(label, seed, draw) for draw in (0, 1) for seed in names]
        found: Found = {}
        fresh: Found = {}
        for done, (label, seed, draw) in enumerate(order, 1):
            if label not in free and refused(found, label):
                continue  # not above the default on a model already: the verdict is final, skip its fits
            if draw and (not accepted(found, label) or refused(fresh, label)):
                continue  # fresh images confirm only a setting the first draw accepted
            book = fresh if draw else found  # a confirmation runs the default beside the setting
            for name in ("default", label) if draw else (label,):
                if seed in book.get(name, {}):
                    continue
                scores = setting_scores(ws, models[seed], data, seed, changes[name], draw)
                aurocs = {
                    s: float(ood_metrics(scores[data], v)["auroc"])
                    for s, v in scores.items()
                    if s not in (STATS, data)
                }
                book.setdefault(name, {})[seed] = aurocs
                rep.results[f"{data}/{names[seed]}/{name}{FRESH if draw else ''}"] = aurocs
            if done < len(order):
                partial = copy.deepcopy(rep)
                partial.parts.append(
                    f"**Partial: {done} of {len(order)} (setting, model) runs on {data} finished** (the "
                    f"last: {label}{FRESH if draw else ''} on s{seed}); this report is replaced as the run "
                    "goes on."
                )
                _tables(partial, data, found, fresh)
                partial.write(out, ws, time.time() - started)
        _tables(rep, data, found, fresh)


Found = dict[str, dict[int, dict[str, float]]]  # setting → zoo seed → AUROC per OOD set


def below(found: Found, label: str) -> list[int]:
    """The zoo seeds on which ``label``'s mean AUROC (over the judged sets: matched twins, not the sets
    as stored) is at or below the default's (both run)."""
    default, per = found.get("default", {}), found.get(label, {})
    return [s for s in per if s in default and _mean(per[s]) <= _mean(default[s])]


def _mean(aurocs: dict[str, float]) -> float:
    return float(np.mean([aurocs[s] for s in judged(list(aurocs))]))


def refused(found: Found, label: str) -> bool:
    """Whether the rule has refused ``label`` already: at or below the default on some model."""
    return label != "default" and bool(below(found, label))


def accepted(found: Found, label: str) -> bool:
    """Whether ``label`` has run on every zoo model, the default too, and is above it on each."""
    complete = len(found.get(label, {})) == len(zoo.ZOO_SEEDS) == len(found.get("default", {}))
    return label != "default" and complete and not refused(found, label)


def verdict(found: Found, fresh: Found, label: str) -> str:
    """The rule's verdict on ``label``: refused on the first model where it is not above the default;
    above on every model, it replaces the default once fresh images confirm it on every model."""
    per = found.get(label, {})
    if label == "default":
        return "the default"
    if refused(found, label):
        seeds = ", ".join(f"s{s}" for s in below(found, label))
        left = len(zoo.ZOO_SEEDS) - len(per)
        rest = f"; not run on the other {left} models" if left else ""
        return f"default stays (not above it on {seeds}{rest})"
    if not accepted(found, label):
        return f"partial ({len(per)} of {len(zoo.ZOO_SEEDS)} models)"
    if refused(fresh, label):
        seeds = ", ".join(f"s{s}" for s in below(fresh, label))
        return f"default stays (above it on every model, but not on fresh images on {seeds})"
    if accepted(fresh, label):
        return "replaces it (confirmed on fresh images)"
    done = len(fresh.get(label, {}))
    return f"above it on every model; fresh images: {done} of {len(zoo.ZOO_SEEDS)} models"


def _tables(rep: BenchReport, data: str, found: Found, fresh: Found) -> None:
    """One row per setting run so far (its mean AUROC and per-set cells over the models it has, and the
    rule's verdict once it is decided), then the fresh-image confirmations if any ran."""
    _table(rep, f"ROSE settings on the zoo's {data} DDPMs", data, found, lambda k: verdict(found, fresh, k))
    if fresh:
        title = f"Confirmation on fresh test and OOD images, {data} (seed + {FRESH_SEED_STEP})"
        _table(rep, title, data, fresh, lambda k: _confirmation(fresh, k))


def _confirmation(fresh: Found, label: str) -> str:
    if label == "default":
        return "the default"
    if refused(fresh, label):
        return "not above it on " + ", ".join(f"s{s}" for s in below(fresh, label))
    return "above it on every model" if accepted(fresh, label) else f"{len(fresh[label])} models so far"


def _table(rep: BenchReport, title: str, data: str, found: Found, rule: Callable[[str], str]) -> None:
    default = found.get("default", {})
    rows = []
    for label, per in found.items():
        means = [_mean(a) for a in per.values()]
        sets = [_cell([per[seed][s] for seed in per]) for s in next(iter(per.values()))]
        rows.append([label, _cell(means), *sets, rule(label)])
    first = next(iter(default.values()), {})
    head = ["setting", "mean AUROC (judged sets)", *first, "rule"]
    rep.section(title, markdown_rows(head, rows))


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f} ({' / '.join(f'{v:.3f}' for v in values)})"


EXPERIMENT = common.Experiment(
    "diffusion-defaults",
    "ROSE's diffusion defaults judged on the zoo",
    "beyond the paper",
    run,
    common.Uses(
        ("diffusion zoo (ddpm-*-s0..s2)",), common.BOTH, ("rose-ekfac", "rose-diag"), ("diffusion-defaults",)
    ),
)
