"""ROSE AUROC of every named layer set × every aggregation (and the likelihood adjustment), from ONE fit.

Per-layer scores do not depend on which other layers are used, so one ROSE fit on the model's largest
layer set gives every subset's raw layer scores by selecting columns; each aggregation, and each
likelihood adjustment (``ROSE(adjust=...)``, with the paper's relu-norm), is fitted on the statistics
images' columns (as ``ROSE.fit`` does) and applied to the test columns, for every OOD set. Prints the NLL
AUROC beside them, each layer's own AUROC and the Spearman correlation of its score with the loss on the
statistics images, and the settings.

    python benchmarks/layer_sweep.py --model runs/pixelcnn-w32b5.pt --fisher ekfac --ood mnist,omniglot
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from scipy.stats import spearmanr

from roseood.bench.experiments.ablation import variant_label
from roseood.data import load_images
from roseood.detectors import NLL, ROSE
from roseood.detectors.adjustment import LikelihoodTrend, adjusted
from roseood.detectors.aggregation import make_aggregation
from roseood.evaluation.metrics import ood_metrics
from roseood.models import load_model

AGGREGATES = ("relu-norm", "relu-norm:p=2", "relu-norm:p=1", "max-z", "log-z", "gaussian", "gmm")
ADJUSTMENTS = ("nll", "both")  # with relu-norm; "none" is the relu-norm row above


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--in", dest="in_data", default="fashion_mnist")
    parser.add_argument("--ood", default="mnist", help="comma-separated OOD sets, all scored by one fit")
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

    def images(name: str, n: int) -> torch.Tensor:
        return load_images(name, n=n, seed=args.seed, channels=channels).images

    held = images(f"{args.in_data}:train", args.fit_samples + args.stats_samples)
    test_in = images(args.in_data, args.test_samples)
    test_out = {name: images(name, args.test_samples) for name in args.ood.split(",")}
    nll = NLL(model).fit(test_in[:2])  # nothing to learn
    results: dict[str, float] = {
        f"{name}: nll": ood_metrics(nll.score(test_in), nll.score(x))["auroc"] for name, x in test_out.items()
    }
    t0 = time.time()
    rose = ROSE(model, fisher=args.fisher, layers=args.layers)
    rose.fit(held[: args.fit_samples], held_out=held[args.fit_samples :])
    raw_stats, loss_stats = (t.numpy() for t in rose.layer_scores_and_loss(held[args.fit_samples :]))
    raw_in, loss_in = (t.numpy() for t in rose.layer_scores_and_loss(test_in))
    raw_out = {name: [t.numpy() for t in rose.layer_scores_and_loss(x)] for name, x in test_out.items()}
    seconds = time.time() - t0
    for set_name, names in model.layer_sets().items():
        cols = [rose.layers.index(n) for n in names if n in rose.layers]
        if len(cols) != len(names):
            continue
        trend = LikelihoodTrend()
        trend.fit(raw_stats[:, cols], loss_stats)
        variants = [(spec, "none") for spec in AGGREGATES] + [("relu-norm", a) for a in ADJUSTMENTS]
        for spec, adjust in variants:
            agg = make_aggregation(spec)
            agg.fit(adjusted(raw_stats[:, cols], loss_stats, trend, adjust))
            score_in = agg(adjusted(raw_in[:, cols], loss_in, trend, adjust))
            for name, (raw, loss) in raw_out.items():
                score_out = agg(adjusted(raw[:, cols], loss, trend, adjust))
                key = f"{name}: rose-{args.fisher}/{set_name}/{variant_label(spec, adjust)}"
                results[key] = ood_metrics(score_in, score_out)["auroc"]
    for i, layer in enumerate(rose.layers):  # z-normalising a column does not change its AUROC
        rho = float(spearmanr(raw_stats[:, i], loss_stats).statistic)
        for name, (raw, _) in raw_out.items():
            auroc = ood_metrics(raw_in[:, i], raw[:, i])["auroc"]
            results[f"{name}: rose-{args.fisher}/layer {layer} (rho with loss {rho:+.2f})"] = auroc
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
        print(f"{key:<70} AUROC {value:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "auroc": results}, f, indent=1)


if __name__ == "__main__":
    main()
