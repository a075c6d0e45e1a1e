"""ROSE AUROC of every named layer set and a few aggregations, from ONE fit on all layers.

Per-layer scores and their z-normalisation do not depend on which other layers are used, so one ROSE
fit on the model's largest layer set gives every subset's score by selecting columns. Prints the NLL
AUROC beside them, and the settings.

    python benchmarks/layer_sweep.py --model runs/pixelcnn-w32b5.pt --fisher ekfac --ood mnist
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import torch

from roseood.data import load_images
from roseood.detectors import NLL, ROSE
from roseood.evaluation.metrics import ood_metrics
from roseood.models import load_model


def aggregate(z: torch.Tensor, p: float) -> torch.Tensor:
    """``‖ReLU(z)‖_p`` over layers (β = 0), as ROSE does."""
    r = torch.relu(z)
    return r.amax(1) if math.isinf(p) else r.pow(p).sum(1).pow(1.0 / p)


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
    rose.fit(held[: args.fit_samples], stats_images=held[args.fit_samples :])
    z_in, z_out = rose.normalized_layer_scores(test_in), rose.normalized_layer_scores(test_out)
    seconds = time.time() - t0
    for set_name, names in model.layer_sets().items():
        cols = [rose.layers.index(n) for n in names if n in rose.layers]
        if len(cols) != len(names):
            continue
        for p in (math.inf, 2.0, 1.0):
            s_in, s_out = aggregate(z_in[:, cols], p), aggregate(z_out[:, cols], p)
            results[f"rose-{args.fisher}/{set_name}/p={p:g}"] = ood_metrics(s_in.numpy(), s_out.numpy())[
                "auroc"
            ]
    for i, name in enumerate(rose.layers):
        results[f"rose-{args.fisher}/layer {name}"] = ood_metrics(z_in[:, i].numpy(), z_out[:, i].numpy())[
            "auroc"
        ]
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
