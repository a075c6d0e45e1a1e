"""How much a diffusion model's OOD AUROCs move with the noise draw of the detector's fixed (timestep,
noise) pairs, per method, over several trained models: the spread over draws of each AUROC, the mean
over models with an interval, and the cost per image. Run:

    python benchmarks/draw_spread.py --models m_s0.pt,m_s1.pt,m_s2.pt [--in fashion_mnist
        --ood mnist,notmnist,omniglot] [--draws 5] [--methods rose-diag,rose-diag:each,msma]
        [--fit 200 --stats 100 --test 150] --out results.json

A method ``name:each`` is ROSE with ``rows="each"`` (one gradient per (image, timestep) row);
``name@k=16`` runs it at 16 pairs instead of the model's K, ``name@anti`` with antithetic noise (each odd
pair's noise minus its even neighbour's); ``--combine A/B`` adds rows of A's and B's held-out z-scores'
mean and max (ROSE beside a score-norm method). The table
adds ``method×D`` rows, the mean score of D draws, and ``name:each+tmean`` rows, each layer's timestep
z-scores averaged before the max over layers. Each (model, draw, method) result, with every image's
score, is written to ``--out`` as it finishes (ROSE's raw layer scores of the held-out and test images
beside it, in ``OUT-layers/``); a re-run skips those already there. The fit, held-out and
test images are the same for every model, draw and method. MSMA and DiffPath read none of the pairs, so
they run at draw 0 only (their draw spread is 0 by construction).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats as st
from sklearn.metrics import roc_auc_score

from roseood.detectors import ROSE, make_detector
from roseood.evaluation.evaluate import machine_description
from roseood.models import load_model
from roseood.serialization import write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for this folder's fisher_size.py
from fisher_size import images

DRAW_FREE = {"msma", "diffpath", "diffpath-1d"}  # read no (timestep, noise) pair: run at draw 0 only


def auroc(s_in: np.ndarray, s_ood: np.ndarray) -> float:
    """AUROC of separating ``s_ood`` (positive) from in-distribution ``s_in`` by score."""
    return float(roc_auc_score(np.r_[np.zeros(len(s_in)), np.ones(len(s_ood))], np.r_[s_in, s_ood]))


def run_one(
    model: torch.nn.Module, method: str, data: dict[str, torch.Tensor], n_fit: int, layers: Path | None = None
) -> dict:
    """AUROCs of one detector against each OOD set (in-distribution test images negative) and seconds;
    for ROSE with ``layers``, its raw layer scores of the held-out and test images saved there (.npz)."""
    name, _, rows = method.partition("@")[0].partition(":")
    kwargs = {"rows": rows} if rows else {}
    det = make_detector(name, model, progress=False, **kwargs)
    start = time.perf_counter()
    det.fit(data["fit"][:n_fit], held_out=data["fit"][n_fit:])
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    if isinstance(det, ROSE) and layers is not None and det.adjust == "none":
        raw = {k: det.layer_scores(v).numpy() for k, v in data.items() if k != "fit"}
        scores = {k: det.aggregation_(r) for k, r in raw.items()}  # what score() gives
        score_s = time.perf_counter() - start
        held = det.layer_scores(data["fit"][n_fit:]).numpy()
        layers.parent.mkdir(parents=True, exist_ok=True)
        np.savez(layers, held=held, columns=np.array(det.columns), **raw)
        held_scores = det.aggregation_(held)
    else:
        scores = {k: det.score(v) for k, v in data.items() if k != "fit"}
        score_s = time.perf_counter() - start
        held_scores = det.score(data["fit"][n_fit:])
    images = sum(len(v) for k, v in data.items() if k != "fit")
    s_in = scores.pop("in")
    return {
        "auroc": {k: auroc(s_in, s) for k, s in scores.items()},
        "fit_s": fit_s,
        "score_ms_per_image": 1000 * score_s / images,
        "scores": {"in": s_in.tolist()} | {k: s.tolist() for k, s in scores.items()},
        "held": np.asarray(held_scores, dtype=np.float64).tolist(),  # the held-out images' scores
    }


def set_pairs(model: torch.nn.Module, method: str, draw: int, k: int) -> None:
    """The model's K (timestep, noise) pairs for ``method``'s options after ``@``: ``k=N`` (N pairs
    instead of ``k``), ``anti`` (antithetic noise: each odd pair's noise is minus its even neighbour's,
    the timesteps unchanged); always drawn from seed ``draw``."""
    options = [o for o in method.partition("@")[2].split(",") if o]
    given = dict(o.split("=", 1) for o in options if "=" in o)
    model.set_denoising(seed=draw, k=int(given.get("k", k)))
    if "anti" in options:
        noise = model.loss_noise.clone()
        odd = noise[1::2].shape[0]
        noise[1::2] = -noise[0::2][:odd]
        model.loss_noise.copy_(noise)


def combined(results: dict, path: str, method: str, draws: int) -> list[dict]:
    """One model's results of ``A/B mean`` or ``A/B max`` at each draw: the scores of A and B (a
    draw-free B: its draw-0 scores) each z-normalised by its mean and standard deviation on the held-out
    images, then their mean or max, at the sum of the two methods' median costs."""
    pair, _, how = method.partition(" ")
    first, second = pair.split("/")
    out = []
    for d in range(draws):
        a = results.get(f"{path}|{d}|{first}")
        b = results.get(f"{path}|{0 if second in DRAW_FREE else d}|{second}")
        if not a or not b or "held" not in a or "held" not in b:
            continue
        z = {}
        for k in a["scores"]:
            parts = []
            for r in (a, b):
                held = np.asarray(r["held"])
                parts.append((np.asarray(r["scores"][k]) - held.mean()) / max(held.std(ddof=1), 1e-12))
            z[k] = np.mean(parts, 0) if how == "mean" else np.max(parts, 0)
        s_in = z.pop("in")
        out.append(
            {
                "auroc": {k: auroc(s_in, x) for k, x in z.items()},
                "score_ms_per_image": a["score_ms_per_image"] + b["score_ms_per_image"],
            }
        )
    return out


def timestep_means(out: Path, results: dict) -> dict:
    """For each ``rows="each"`` result with saved layer scores, the ``+tmean`` aggregation: each layer's K
    timestep z-scores averaged, the means z-normalised again on the held-out images, then the paper's
    ReLU and max over layers (what ``name:each`` gives is the max over all K × layers columns)."""
    extra = {}
    for key, r in results.items():
        path, d, m = key.split("|")
        saved = out.parent / f"{out.stem}-layers" / f"{Path(path).stem}-draw{d}-{m}.npz"
        if not m.endswith(":each") or not saved.exists():
            continue
        layers = np.load(saved)
        k = len({str(c).rsplit("@", 1)[1] for c in layers["columns"]})
        held = layers["held"]
        mean, std = held.mean(0), held.std(0, ddof=1) + 1e-12

        def tmean(raw: np.ndarray, k: int = k, mean: np.ndarray = mean, std: np.ndarray = std) -> np.ndarray:
            return ((raw - mean) / std).reshape(len(raw), -1, k).mean(2)

        ref = tmean(held)
        score = {
            name: np.maximum((tmean(layers[name]) - ref.mean(0)) / (ref.std(0, ddof=1) + 1e-12), 0).max(1)
            for name in r["scores"]
        }
        s_in = score.pop("in")
        extra[f"{path}|{d}|{m}+tmean"] = {
            "auroc": {name: auroc(s_in, x) for name, x in score.items()},
            "score_ms_per_image": r["score_ms_per_image"],
            "scores": {"in": s_in.tolist()} | {name: x.tolist() for name, x in score.items()},
        }
    return extra


def interval(values: list[float]) -> str:
    """Mean ± the half-width of a 95 % t-interval (one value: the value alone)."""
    v = np.asarray(values)
    if len(v) < 2:
        return f"{v.mean():.3f}"
    half = st.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return f"{v.mean():.3f} ± {half:.3f}"


def runs(results: dict, path: str, method: str, draws: int) -> list[dict]:
    """One model's results of ``method`` at each draw; ``method×D``: the mean score of D draws, for each
    of the C(draws, D) subsets of the draws (overlapping subsets: their spread understates that of
    independent D-draw averages), at D times the median cost of one draw."""
    if "/" in method:
        return combined(results, path, method, draws)
    name, _, times = method.partition("×")
    got = [r for d in range(draws) if (r := results.get(f"{path}|{d}|{name}"))]
    if not times:
        return got
    out = []
    for subset in itertools.combinations(got, int(times)):
        mean = {k: np.mean([r["scores"][k] for r in subset], 0) for k in subset[0]["scores"]}
        s_in = mean.pop("in")
        out.append(
            {
                "auroc": {k: auroc(s_in, x) for k, x in mean.items()},
                "score_ms_per_image": len(subset) * np.median([r["score_ms_per_image"] for r in got]),
            }
        )
    return out


def table(results: dict, models: list[str], methods: list[str], oods: list[str], draws: int) -> str:
    """Per method and OOD set: the AUROC over models (each model's mean over draws) and the draw spread
    (standard deviation over draws, averaged over models; the largest in brackets); the median scoring
    cost per image."""
    lines = [
        "| method | " + " | ".join(f"{o}: AUROC | {o}: draw sd" for o in oods) + " | ms / image |",
        "|---|" + "---|---|" * len(oods) + "---|",
    ]
    for m in methods:
        cells, cost = [], []
        for o in oods:
            per_model, spread = [], []
            for path in models:
                got = runs(results, path, m, draws)
                values = [r["auroc"][o] for r in got]
                cost += [r["score_ms_per_image"] for r in got]
                if values:
                    per_model.append(float(np.mean(values)))
                    spread.append(float(np.std(values, ddof=1)) if len(values) > 1 else float("nan"))
            if not per_model:
                cells += ["–", "–"]
                continue
            sd = (
                "one draw"
                if np.isnan(spread).all()
                else f"{np.nanmean(spread):.3f} ({np.nanmax(spread):.3f})"
            )
            cells += [interval(per_model), sd]
        ms = f"{np.median(cost):.0f}" if cost else "–"  # the median: robust to a run slowed by other work
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {ms} |")
    return "\n".join(lines)


def per_model(results: dict, models: list[str], methods: list[str], oods: list[str], draws: int) -> str:
    """Per method and OOD set: each model's AUROC (its mean over draws), models in the order given."""
    lines = ["| method | " + " | ".join(oods) + " |", "|---|" + "---|" * len(oods)]
    for m in methods:
        cells = []
        for o in oods:
            means = [
                np.mean([r["auroc"][o] for r in got])
                for path in models
                if (got := runs(results, path, m, draws))
            ]
            cells.append(" / ".join(f"{v:.3f}" for v in means) or "–")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", required=True, help="comma-separated roseood diffusion checkpoints")
    p.add_argument("--in", dest="in_data", default="fashion_mnist")
    p.add_argument("--ood", default="mnist,notmnist,omniglot")
    p.add_argument("--methods", default="rose-diag,rose-diag:each")
    p.add_argument("--draws", type=int, default=5, help="noise seeds 0 .. draws − 1 of the K pairs")
    p.add_argument("--fit", type=int, default=200)
    p.add_argument("--stats", type=int, default=100)
    p.add_argument("--test", type=int, default=150)
    p.add_argument("--out", required=True, help="JSON results file (resumed when it exists)")
    p.add_argument(
        "--combine",
        default="",
        help="comma-separated A/B method pairs: table rows of their held-out z-scores' mean and max",
    )
    p.add_argument("--table", action="store_true", help="print the table of --out's results, run nothing")
    args = p.parse_args()
    models, methods, oods = args.models.split(","), args.methods.split(","), args.ood.split(",")
    out = Path(args.out)
    saved = json.loads(out.read_text()) if out.exists() else {}
    results: dict = saved.get("results", {})
    settings = vars(args) | machine_description()
    print("settings:", json.dumps(settings), flush=True)
    data: dict[str, torch.Tensor] = {}
    for path in [] if args.table else models:
        model = load_model(path)
        if not data:
            data = {"fit": images(args.in_data, "train", args.fit + args.stats, model)}
            data["in"] = images(args.in_data, "test", args.test, model)
            data |= {o: images(o, "test", args.test, model) for o in oods}
        k = model.k
        for d in range(args.draws):
            for m in methods:
                key = f"{path}|{d}|{m}"
                if "held" in results.get(key, {}) or (d > 0 and m in DRAW_FREE):
                    continue
                set_pairs(model, m, d, k)
                torch.manual_seed(0)
                where = out.parent / f"{out.stem}-layers" / f"{Path(path).stem}-draw{d}-{m}.npz"
                results[key] = run_one(model, m, data, args.fit, where)
                aurocs = " ".join(f"{o} {v:.3f}" for o, v in results[key]["auroc"].items())
                print(
                    f"{Path(path).name} draw {d} {m}: {aurocs}, {results[key]['score_ms_per_image']:.0f} "
                    "ms/image",
                    flush=True,
                )
                write_text(out, json.dumps({"settings": settings, "results": results}, indent=1))
    results |= timestep_means(out, results)
    methods += [f"{m}+tmean" for m in methods if m.endswith(":each")]
    averaged = [f"{m}×{d}" for m in methods if m not in DRAW_FREE for d in (2, 3) if d < args.draws]
    pairs = [f"{pair} {how}" for pair in filter(None, args.combine.split(",")) for how in ("mean", "max")]
    print(table(results, models, methods + averaged + pairs, oods, args.draws))
    print("\neach model's AUROC, the mean over its draws (models in the order of --models):\n")
    print(per_model(results, models, methods + averaged + pairs, oods, args.draws))


if __name__ == "__main__":
    main()
