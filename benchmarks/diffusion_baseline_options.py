"""What the options of the diffusion-era baselines change, on one diffusion model: DiffPath with and
without the authors' clamp, its 6-D mixture chosen by cross-validation (the authors') or BIC, its 1-D
KDE; MSMA's mixture by cross-validation or BIC; DDPM-OOD's MSE z-scores alone or with 1 − SSIM.

The images are the ones ``rose bench diffusion`` gives seed ``--seed`` (fit: the profile's fit +
statistics images; 200 test images per set), so the defaults' AUROCs here equal the bench's. Each path
or reconstruction is computed once and every density/error option is fitted on it. Prints one line
per option (AUROC per OOD set) and, with ``--json``, writes them.

    python benchmarks/diffusion_baseline_options.py --seed 0 --model \\
        results/cache/models/diffusion-fashion_mnist-c1-widths16-32-32-layers_per_block1-attention-n3000-s0.pt
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from torch import Tensor

from roseood.bench.experiments.diffusion import DATA_SEED
from roseood.data import load_images
from roseood.data.tensors import check_model_input
from roseood.detectors import MSMA, DiffPath, Reconstruction
from roseood.detectors.diffusion import GaussianKDE, MixtureDensity
from roseood.evaluation import EvalSpec
from roseood.evaluation.evaluate import load_fit_images, load_ood_sets, model_preprocessing
from roseood.evaluation.metrics import ood_metrics
from roseood.models import load_model
from roseood.models.diffusion import as_diffusion_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a diffusion checkpoint or diffusers folder")
    parser.add_argument("--in", dest="in_data", default="fashion_mnist")
    parser.add_argument("--ood", default="mnist,notmnist,omniglot,constant")
    parser.add_argument("--seed", type=int, default=0, help="the bench's training seed (data seed 2021 + it)")
    parser.add_argument("--fit", type=int, default=300)
    parser.add_argument("--stats", type=int, default=100)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--recon-steps", type=int, default=20)
    parser.add_argument("--recon-skip", type=int, default=8)
    parser.add_argument("--parts", default="diffpath,msma,reconstruction", help="which baselines to run")
    parser.add_argument("--json", help="write the AUROCs here")
    args = parser.parse_args()

    model = as_diffusion_model(load_model(args.model), "this benchmark").eval()
    spec = EvalSpec(
        in_data=args.in_data,
        ood=args.ood.split(","),
        methods=["diffpath"],
        fit_samples=args.fit,
        stats_samples=args.stats,
        test_samples=args.test,
        seed=DATA_SEED + args.seed,
    )
    prep = model_preprocessing(model)
    fit = check_model_input(load_fit_images(spec, model).images, model)  # uint8 → floats in [0, 1]
    test = load_images(
        args.in_data, n=args.test, seed=spec.seed, channels=prep.channels, size=prep.size, resize=prep.resize
    )
    sets = {args.in_data: check_model_input(test.images, model)} | {
        k: check_model_input(v.images, model) for k, v in load_ood_sets(spec, model)[0].items()
    }
    sizes = ", ".join(f"{k} {len(v)}" for k, v in sets.items())
    print(f"model {args.model}; fit {len(fit)} images; test {sizes}")
    rows: dict[str, dict[str, float]] = {}

    def report(name: str, fit_v: np.ndarray, set_v: dict[str, np.ndarray], density: Callable) -> None:
        score = density(fit_v)
        s_in = score(set_v[args.in_data])
        rows[name] = {
            k: float(ood_metrics(s_in, score(v))["auroc"]) for k, v in set_v.items() if k != args.in_data
        }
        print(f"{name:40s} " + "  ".join(f"{k} {v:.3f}" for k, v in rows[name].items()), flush=True)

    def stats(fn: Callable[[Tensor], np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        t0 = time.time()
        out = fn(fit), {k: fn(v) for k, v in sets.items()}
        print(f"  ({time.time() - t0:.0f} s)", flush=True)
        return out

    def mixture(selection: str, **kw: Any) -> Callable:
        def build(v: np.ndarray) -> Callable:
            m = MixtureDensity(selection=selection, **kw)
            m.fit(v)
            print(f"  mixture chosen: {m.chosen_}")
            return m

        return build

    def kde(v: np.ndarray) -> Callable:
        k = GaussianKDE(5.0)
        k.fit(v)
        return k

    parts = args.parts.split(",")
    for clip in (True, False) if "diffpath" in parts else ():
        f, s = stats(DiffPath(model, clip=clip).statistics)
        tag = "" if clip else ", no clamp"
        report(f"diffpath 6-D, cv{tag}", f, s, mixture("cv"))
        report(f"diffpath 6-D, bic{tag}", f, s, mixture("bic"))
        # the 1-D statistic √Σ(dε/dt)² is the square root of the fifth 6-D one
        report(
            f"diffpath 1-D, kde 5{tag}",
            np.sqrt(f[:, 4:5]),
            {k: np.sqrt(v[:, 4:5]) for k, v in s.items()},
            kde,
        )

    if "msma" in parts:
        f, s = stats(MSMA(model).statistics)
        grid = {"components": tuple(range(2, 21, 2)), "covariance_types": ("full",), "max_iter": 100}
        report("msma, cv", f, s, mixture("cv", **grid))
        report("msma, bic", f, s, mixture("bic"))
    if "reconstruction" not in parts:
        write(args, rows)
        return
    rec = Reconstruction(model, steps=args.recon_steps, skip=args.recon_skip, errors="mse+ssim")
    f, s = stats(lambda x: rec.reconstruction_errors(x).numpy())
    n = len(rec.starts)

    def zmean(cols: slice) -> Callable:
        def build(v: np.ndarray) -> Callable:
            mean, std = v[:, cols].mean(0), v[:, cols].std(0, ddof=1)
            return lambda w: ((w[:, cols] - mean) / std).mean(1)

        return build

    report(f"reconstruction {rec.starts}, mse", f, s, zmean(slice(0, n)))
    report(f"reconstruction {rec.starts}, mse+ssim", f, s, zmean(slice(0, 2 * n)))
    write(args, rows)


def write(args: argparse.Namespace, rows: dict[str, dict[str, float]]) -> None:
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"settings": vars(args), "auroc": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
