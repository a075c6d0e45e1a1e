"""Scoring throughput of every method on one model, one batch, one run (the paper's Figure 4 x-axis).

Each detector is fitted on a small in-distribution set (its fit time is printed too), then scores the
same batch of Fashion-MNIST test images. Run:

    python benchmarks/runtime.py [--model vae.pt] [--background bg.pt] [--batch 32]
"""

from __future__ import annotations

import argparse
import time

import torch

from roseood.demo import demo_images, demo_model
from roseood.detectors import METHODS, make_detector
from roseood.machine import machine_description
from roseood.models import load_model
from roseood.models.base import model_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", help="roseood VAE (default: the shipped authors' FMNIST VAE)")
    p.add_argument("--background", help="background model for lratio (skipped without one)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--fit", type=int, default=1000)
    p.add_argument("--methods", default=",".join(METHODS))
    args = p.parse_args()
    model = load_model(args.model) if args.model else demo_model()
    imgs = demo_images()
    fit = torch.from_numpy(imgs["fashion_mnist_train"][: args.fit]).float() / 255
    stats = torch.from_numpy(imgs["fashion_mnist_train"][args.fit : args.fit + 256]).float() / 255
    x = torch.from_numpy(imgs["fashion_mnist_test"][: args.batch]).float() / 255
    print("settings:", vars(args) | {"model_config": model_config(model)} | machine_description())
    print(f"{'method':<12}{'fit s':>8}{'images/s':>10}")
    for method in args.methods.split(","):
        kwargs = {}
        if method == "lratio":
            if not args.background:
                print(f"{method:<12}  skipped (no --background)")
                continue
            kwargs["background"] = load_model(args.background)
        det = make_detector(method, model, **kwargs)
        t0 = time.perf_counter()
        det.fit(fit, held_out=stats)  # as evaluate() fits: ROSE's statistics, the others' extra data
        fit_s = time.perf_counter() - t0
        torch.manual_seed(0)
        t0 = time.perf_counter()
        det.score(x)
        print(f"{method:<12}{fit_s:>8.1f}{args.batch / (time.perf_counter() - t0):>10.2f}", flush=True)


if __name__ == "__main__":
    main()
