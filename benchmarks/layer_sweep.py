"""ROSE AUROC of every named layer set × every aggregation, from ONE fit on all layers.

Per-layer scores do not depend on which other layers are used, so one ROSE fit on the model's largest
layer set gives every subset's raw layer scores by selecting columns; each aggregation is fitted on the
statistics images' columns (as ``ROSE.fit`` does) and applied to the test columns. Prints the NLL AUROC
beside them, and the settings.

    python benchmarks/layer_sweep.py --model runs/pixelcnn-w32b5.pt --fisher ekfac --ood mnist
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from roseood.data import load_images
from roseood.detectors import NLL, ROSE
from roseood.detectors.aggregation import make_aggregation
from roseood.evaluation.metrics import ood_metrics
from roseood.models import load_model

AGGREGATES = ("relu-norm", "relu-norm:p=2", "relu-norm:p=1", "max-z", "log-z", "gaussian", "gmm")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--in", dest="in_data", default="fashion_mnist")
    parser.add_argument("--ood", default="mnist")
    parser.add_argument("--fisher", default="ekfac")
    parser.add_argument("--layers", default="all", help="the layer set to fit (others must be subsets)")
    parser.add_argument("--fit-samples", type=int, default=2000)
    parser.add_argument("--stats-samples", type=int, default=1000)
    parser.add_argument("--test-samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    args = parser.parse_args()
    model = load_model(args.model)
    channels = model.in_channels
    held = load_images(
        f"{args.in_data}:train", n=args.fit_samples + args.stats_samples, seed=args.seed, channels=channels
    ).images
    test_in = load_images(args.in_data, n=args.test_samples, seed=args.seed, channels=channels).images
    test_out = load_images(args.ood, n=args.test_samples, seed=args.seed, channels=channels).images
    nll = NLL(model).fit(test_in[:2])  # nothing to learn
    results: dict[str, float] = {"nll": ood_metrics(nll.score(test_in), nll.score(test_out))["auroc"]}
    t0 = time.time()
    rose = ROSE(model, fisher=args.fisher, layers=args.layers)
    rose.fit(held[: args.fit_samples], held_out=held[args.fit_samples :])
    raw_stats = rose.layer_scores(held[args.fit_samples :]).numpy()
    raw_in, raw_out = rose.layer_scores(test_in).numpy(), rose.layer_scores(test_out).numpy()
    seconds = time.time() - t0
    for set_name, names in model.layer_sets().items():
        cols = [rose.layers.index(n) for n in names if n in rose.layers]
        if len(cols) != len(names):
            continue
        for spec in AGGREGATES:
            agg = make_aggregation(spec)
            agg.fit(raw_stats[:, cols])
            auroc = ood_metrics(agg(raw_in[:, cols]), agg(raw_out[:, cols]))["auroc"]
            results[f"rose-{args.fisher}/{set_name}/{spec}"] = auroc
    for i, name in enumerate(rose.layers):  # z-normalising a column does not change its AUROC
        results[f"rose-{args.fisher}/layer {name}"] = ood_metrics(raw_in[:, i], raw_out[:, i])["auroc"]
    settings = {
        "model": args.model,
        "model_config": model.config(),
        "in": args.in_data,
        "ood": args.ood,
        "fisher": args.fisher,
        "fit_samples": args.fit_samples,
        "stats_samples": args.stats_samples,
        "test_samples": args.test_samples,
        "seed": args.seed,
        "rose_fit_and_score_seconds": round(seconds, 1),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    print(json.dumps(settings, indent=1))
    for key, value in results.items():
        print(f"{key:<50} AUROC {value:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "auroc": results}, f, indent=1)


if __name__ == "__main__":
    main()
