"""How ROSE's AUROC moves with the number of in-distribution images used for the Fisher (paper Fig. 5).

For each size N (default 10 → 10 000) and repeat r, the Fisher is fitted on N Fashion-MNIST training
images drawn with seed r; layer statistics always come from the same separate 2000 training images,
and the test sets are fixed. Run:

    python benchmarks/fisher_samples.py --model vae.pt --sizes 10,100,1000,10000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from roseood.data import load_images
from roseood.demo import demo_model
from roseood.detectors import ROSE
from roseood.evaluation.evaluate import machine_description
from roseood.evaluation.metrics import ood_metrics
from roseood.models import load_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", help="roseood model (default: the shipped authors' FMNIST VAE)")
    p.add_argument("--fisher", default="ekfac")
    p.add_argument("--sizes", default="10,100,1000,10000")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--stats-samples", type=int, default=2000)
    p.add_argument("--test-samples", type=int, default=2000)
    p.add_argument("--ood", default="mnist,notmnist")
    p.add_argument("--json", help="write the AUROCs here")
    args = p.parse_args()
    model = load_model(args.model) if args.model else demo_model()
    sizes = [int(s) for s in args.sizes.split(",")]
    pool = load_images("fashion_mnist:train", seed=0).images
    rng = np.random.default_rng(0)
    order = rng.permutation(len(pool))
    stats, rest = pool[order[: args.stats_samples]], pool[order[args.stats_samples :]]
    test_in = load_images("fashion_mnist", n=args.test_samples, seed=2021).images
    ood = {name: load_images(name, n=args.test_samples, seed=2022).images for name in args.ood.split(",")}
    print("settings:", vars(args) | {"model": model.config()} | machine_description())
    table: dict[int, dict[str, list[float]]] = {}
    for n in sizes:
        table[n] = {name: [] for name in ood}
        for r in range(args.repeats):
            t0 = time.time()
            pick = np.random.default_rng(r).choice(len(rest), n, replace=False)
            det = ROSE(model, fisher=args.fisher).fit(rest[pick], stats_images=stats)
            s_in = det.score(test_in)
            for name, x in ood.items():
                table[n][name].append(ood_metrics(s_in, det.score(x))["auroc"])
            row = ", ".join(f"{k} {v[-1]:.4f}" for k, v in table[n].items())
            print(f"N={n:>6} repeat {r}: AUROC {row}  ({time.time() - t0:.0f} s)", flush=True)
    print(f"\nROSE-{args.fisher} AUROC vs number of Fisher samples (mean ± std over {args.repeats} repeats)")
    print(f"{'N':>7}" + "".join(f"{k:>18}" for k in ood))
    for n, per in table.items():
        print(f"{n:>7}" + "".join(f"{np.mean(v):>11.4f} ± {np.std(v):.3f}" for v in per.values()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "auroc": table}, f, indent=1)


if __name__ == "__main__":
    main()
