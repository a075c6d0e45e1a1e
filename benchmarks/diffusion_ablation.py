"""Ablation of ROSE's per-image diffusion loss: K, the timestep range, the noise draw, the layer set.

For every (K, timestep range) and every noise draw (``set_denoising(seed=...)``) ROSE is fitted once on
all the UNet's layers; each named layer set's AUROC comes from the same fit by selecting its columns
(per-layer scores do not depend on the other layers), each aggregation fitted on the statistics
images' columns as ``ROSE.fit`` does: the paper's relu-norm, relu-norm with its ties at 0 ordered
(``ties=max``) and max-z. The denoising loss at the same pairs is scored beside it. The ranges other
than the full one are run at ``--range-k`` only, to keep the grid bounded. Scoring cost (ms of wall
time per image, this process's threads) is measured per K and per layer set on draw 0. Prints the
settings, one line per fit and a summary: mean ± standard deviation over the noise draws.

    python benchmarks/diffusion_ablation.py --model results/cache/models/diffusion-fashion_mnist-...-s0.pt \\
        --ood mnist,omniglot,constant --k 2,4,8 --ranges 0:1,0:0.5,0.5:1 --draws 0,1,2
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

import numpy as np
import torch

from roseood.data import load_images
from roseood.detectors import ROSE
from roseood.detectors.aggregation import make_aggregation
from roseood.evaluation.metrics import ood_metrics
from roseood.models import load_model
from roseood.models.diffusion import as_diffusion_model

AGGREGATES = ("relu-norm", "relu-norm:ties=max", "max-z")  # the paper's, with ties at 0 ordered, no ReLU


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def ranges(text: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in (r.split(":") for r in text.split(","))]


def auroc(score_in: np.ndarray, score_out: np.ndarray) -> float:
    return float(ood_metrics(score_in, score_out)["auroc"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a diffusion checkpoint or diffusers folder")
    parser.add_argument("--in", dest="in_data", default="fashion_mnist")
    parser.add_argument("--ood", default="mnist,omniglot,constant")
    parser.add_argument("--fisher", default="ekfac")
    parser.add_argument("--k", default="2,4,8", help="K values, each on the full timestep range")
    parser.add_argument("--ranges", default="0:1,0:0.5,0.5:1", help="t_min:t_max fractions of T")
    parser.add_argument("--range-k", type=int, default=4, help="the K of the non-full ranges")
    parser.add_argument("--draws", default="0,1,2", help="noise-draw seeds of set_denoising")
    parser.add_argument("--fit-samples", type=int, default=300)
    parser.add_argument("--stats-samples", type=int, default=100)
    parser.add_argument("--test-samples", type=int, default=150)
    parser.add_argument("--timing-samples", type=int, default=64, help="0: no timing")
    parser.add_argument("--seed", type=int, default=0, help="which data images are drawn")
    parser.add_argument("--json")
    args = parser.parse_args()
    model = as_diffusion_model(load_model(args.model), "this ablation")
    channels = model.in_channels

    def images(name: str, n: int) -> torch.Tensor:
        s = load_images(name, n=n, seed=args.seed, channels=channels, size=model.input_shape[-1])
        return torch.as_tensor(s.images)

    held = images(f"{args.in_data}:train", args.fit_samples + args.stats_samples)
    fit, stats = held[: args.fit_samples], held[args.fit_samples :]
    test_in = images(args.in_data, args.test_samples)
    oods = args.ood.split(",")
    test_out = {name: images(name, args.test_samples) for name in oods}
    sets = model.layer_sets()
    draws = ints(args.draws)
    configs = [(k, 0.0, 1.0) for k in ints(args.k)]
    configs += [(args.range_k, lo, hi) for lo, hi in ranges(args.ranges) if (lo, hi) != (0.0, 1.0)]
    rows: list[dict[str, Any]] = []
    cost: dict[str, float] = {}
    for k, lo, hi in configs:
        for draw in draws:
            model.set_denoising(k=k, t_min=lo, t_max=hi, seed=draw)
            t0 = time.time()
            rose = ROSE(model, fisher=args.fisher, layers="all").fit(fit, held_out=stats)
            raw_stats, _ = (t.numpy() for t in rose.layer_scores_and_loss(stats))
            raw_in, loss_in = (t.numpy() for t in rose.layer_scores_and_loss(test_in))
            raw_out = {n: [t.numpy() for t in rose.layer_scores_and_loss(x)] for n, x in test_out.items()}
            config = {"k": k, "t": f"{lo:g}–{hi:g}", "draw": draw, "seconds": round(time.time() - t0, 1)}
            rows.append(
                config
                | {"set": "denoising", "agg": "-"}
                | {n: auroc(loss_in, v[1]) for n, v in raw_out.items()}
            )
            for set_name, names in sets.items():
                cols = [rose.layers.index(n) for n in names]
                for spec in AGGREGATES:
                    agg = make_aggregation(spec)
                    agg.fit(raw_stats[:, cols])
                    score_in = agg(raw_in[:, cols])
                    rows.append(
                        config
                        | {"set": set_name, "agg": spec}
                        | {n: auroc(score_in, agg(v[0][:, cols])) for n, v in raw_out.items()}
                    )
            print(json.dumps(rows[-len(sets) * len(AGGREGATES) - 1 :]), flush=True)
            if args.timing_samples and draw == draws[0] and (lo, hi) == (0.0, 1.0):
                for set_name in sets:  # scoring cost of a detector restricted to the set
                    timed = ROSE(model, fisher=args.fisher, layers=set_name).fit(
                        fit[:32], held_out=stats[:16]
                    )
                    x = test_in[: args.timing_samples]
                    t1 = time.perf_counter()
                    timed.score(x)
                    cost[f"K={k} {set_name}"] = 1000 * (time.perf_counter() - t1) / len(x)
                t1 = time.perf_counter()
                model.nll(test_in[: args.timing_samples])
                cost[f"K={k} denoising"] = 1000 * (time.perf_counter() - t1) / args.timing_samples
    settings = {
        "model": args.model,
        "model_config": model.config(),
        "in": args.in_data,
        "ood": oods,
        "fisher": args.fisher,
        "fit_samples": args.fit_samples,
        "stats_samples": args.stats_samples,
        "test_samples": args.test_samples,
        "data_seed": args.seed,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    print(json.dumps(settings, indent=1))
    head = f"{'K':>2} {'t':<8} {'layers':<10} {'aggregation':<20}"
    print(head + "".join(f"{n:>16}" for n in oods) + f"{'mean':>16}")
    keys = sorted(
        {(r["k"], r["t"], r["set"], r["agg"]) for r in rows}, key=lambda c: (c[1] != "0–1", c[0], c[1])
    )
    summary = []
    for k, t, set_name, spec in keys:
        group = [r for r in rows if (r["k"], r["t"], r["set"], r["agg"]) == (k, t, set_name, spec)]
        values = {n: np.array([r[n] for r in group]) for n in oods}
        values["mean"] = np.mean([values[n] for n in oods], axis=0)
        cells = "".join(
            f"{v.mean():>9.3f} ± {v.std(ddof=1) if len(v) > 1 else 0:.3f}" for v in values.values()
        )
        print(f"{k:>2} {t:<8} {set_name:<10} {spec:<20}{cells}")
        summary.append(
            {"k": k, "t": t, "set": set_name}
            | {n: [float(v.mean()), float(v.std(ddof=1))] for n, v in values.items()}
        )
    for key, ms in cost.items():
        print(f"scoring cost {key:<20} {ms:8.1f} ms/image")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"settings": settings, "fits": rows, "summary": summary, "ms_per_image": cost}, f, indent=1
            )


if __name__ == "__main__":
    main()
