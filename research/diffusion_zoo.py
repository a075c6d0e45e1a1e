"""The diffusion comparison re-judged on the reference zoo (``roseood.models.zoo``): the shipped DDPMs, three
training seeds per data set, instead of UNets trained by the bench for minutes.

Every method of the ``diffusion`` experiment runs at its defaults on each zoo model; the methods that
read the model's K fixed (timestep, noise) pairs (ROSE and the denoising loss) run once per noise draw
(``set_denoising(seed=d)``, d < ``diffusion_draws``), the others once. A model's cell is its mean over
draws; a table cell is the mean over the three models ± the 95 % Student-t half-width over them, with
each model's own value beside it and the mean standard deviation over draws. Fit and test images: the
data seed + the training seed, as in ``diffusion``.

The decision rule, fixed before the runs: method A beats method B on an OOD set only where A's AUROC is
above B's on every zoo model of that data set; where the models disagree, the comparison is undecided.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np

from research.diffusion import DATA_SEED, METHODS, OOD, cell, evaluate_methods, nfe
from research.profiles import profile_of
from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.evaluation.report import markdown_rows
from roseood.models import zoo
from roseood.models.checkpoint import load_model
from roseood.models.diffusion import as_diffusion_model

DRAWN = ("rose-ekfac", "rose-diag", "denoising")  # methods whose score depends on the noise draw
USES = common.Uses(("diffusion zoo (ddpm-*-s0..s2)",), common.BOTH, tuple(METHODS), ("diffusion-zoo",))

Cells = dict[str, dict[str, list[list[float]]]]  # method -> OOD set -> per model, the AUROC of each draw


def verdicts(cells: Cells, sets: list[str], pairs: list[tuple[str, str]]) -> list[list[str]]:
    """The decision rule's rows: for each (A, B), per OOD set "A", "B" (higher on every model) or
    "undecided"."""
    rows = []
    for a, b in pairs:
        row = [f"{a} vs {b}"]
        for s in sets:
            ma = [float(np.mean(v)) for v in cells[a][s]]
            mb = [float(np.mean(v)) for v in cells[b][s]]
            if not ma or len(ma) != len(mb):
                row.append("–")
            elif all(x > y for x, y in zip(ma, mb, strict=True)):
                row.append(a)
            elif all(y > x for x, y in zip(ma, mb, strict=True)):
                row.append(b)
            else:
                row.append("undecided")
        rows.append(row)
    return rows


def summary(values: list[list[float]]) -> str:
    """``mean ± t (model values; draw sd)`` of one cell."""
    if not values:
        return "–"
    per_model = [float(np.mean(v)) for v in values]
    text = f"{cell(per_model)} ({' / '.join(f'{x:.3f}' for x in per_model)}"
    spread = [float(np.std(v, ddof=1)) for v in values if len(v) > 1]
    return text + (f"; draw sd {np.mean(spread):.3f})" if spread else ")")


PerModel = dict[int, dict[str, dict[str, list[float]]]]  # training seed -> method -> OOD set -> per draw


def tables(
    rep: BenchReport,
    data: str,
    sets: list[str],
    per_model: PerModel,
    speed: dict[str, list[float]],
    nfes: dict[str, str],
) -> None:
    """The AUROC table and the decision rule's verdicts on ``data``'s OOD ``sets`` from the models run
    so far."""
    cells: Cells = {m: {s: [] for s in sets} for m in METHODS}
    for seed in per_model:
        for m in METHODS:
            for s in sets:
                if per_model[seed][m][s]:
                    cells[m][s].append(per_model[seed][m][s])
    rows = [[s, *(summary(cells[m][s]) for m in METHODS)] for s in sets]
    rows.append(["NFEs/image", *(nfes.get(m, "–") for m in METHODS)])
    rows.append(["images/s", *(f"{np.nanmean(speed[m]):.1f}" if speed[m] else "–" for m in METHODS)])
    rep.section(f"AUROC, zoo DDPMs on {data}", markdown_rows(["OOD set", *METHODS], rows))
    pairs = [(r, b) for r in ("rose-ekfac", "rose-diag") for b in METHODS if not b.startswith("rose")]
    rep.section(
        f"Decision rule, zoo DDPMs on {data}",
        markdown_rows(["comparison", *sets], verdicts(cells, sets, [*pairs, ("rose-ekfac", "rose-diag")])),
    )
    rep.results[f"{data}/summary"] = {
        m: {s: [list(map(float, v)) for v in cells[m][s]] for s in sets} for m in METHODS
    }


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """Every (draw, model) run in turn; after each, ``report.md`` holds the tables of what has finished
    (marked partial), so a run stopped part-way leaves its numbers; the last write is the whole report."""
    p, started = profile_of(ws), time.time()
    draws = p.diffusion_draws
    rep.parts.append(
        f"Models: the zoo (zoo/README.md), training seeds {list(zoo.ZOO_SEEDS)}; ROSE at its defaults; "
        f"{', '.join(DRAWN)} over {draws} noise draws of the K pairs, the others once; data seed "
        f"{DATA_SEED} + the training seed; cells: mean AUROC ± 95 % t-interval half-width over the three "
        "models (each model's value, its mean over draws; the mean sd over draws). Decision rule (written "
        "before the runs): A beats B on a set only if A is higher on every model; otherwise undecided."
    )
    for data in ws.select_data():
        speed: dict[str, list[float]] = {m: [] for m in METHODS}
        nfes: dict[str, str] = {}
        names = dict(zoo.zoo_seeds("ddpm", data))
        sets = ws.ood_sets(data, OOD[data])
        per_model: PerModel = {seed: {m: {s: [] for s in sets} for m in METHODS} for seed in names}
        runs = [(d, seed) for d in range(draws) for seed in names]  # the seed interval first
        for done, (d, seed) in enumerate(runs, 1):
            name = names[seed]
            model = as_diffusion_model(load_model(zoo.zoo_path(name)), "the zoo bench").to(ws.device)
            model.set_denoising(**(model.denoising | {"seed": model.denoising["seed"] + d}))
            methods = [m for m in METHODS if d == 0 or m in DRAWN]
            result, values = evaluate_methods(ws, model, data, methods, seed)
            for m in methods:
                for s, value in values[m].items():
                    per_model[seed][m][s].append(value)
                if d == 0:
                    speed[m].append(result.images_per_second.get(m, float("nan")))
                    nfes[m] = nfe(model, m, ws.detector_kwargs(m))
            rep.results[f"{data}/{name}/draw{d}"] = result.to_json()
            if done < len(runs):
                partial = copy.deepcopy(rep)
                partial.parts.append(
                    f"**Partial: {done} of {len(runs)} (draw, model) runs on {data} finished** (the last: "
                    f"{name}, draw {d}); this report is replaced as the run goes on."
                )
                tables(partial, data, sets, per_model, speed, nfes)
                partial.write(out, ws, time.time() - started)
        tables(rep, data, sets, per_model, speed, nfes)


EXPERIMENT = common.Experiment(
    "diffusion-zoo", "ROSE and the diffusion baselines on the reference zoo", "beyond the paper", run, USES
)
