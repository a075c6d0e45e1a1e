"""ROSE on a GPU: the card's name, batched hooks against the per-sample loop, ROSE-EKFAC against NLL at
batch 512, and the CUDA scores against the CPU's, on the shipped FMNIST VAE (or ``--model``).

Measures, on ``--device`` (default ``cuda``; without a CUDA device it says so and exits 0, ``--device cpu``
runs the same code paths on the CPU):
- the per-sample-loop / batched-hooks time ratio for ROSE-EKFAC layer scores of ``--loop`` images
  (goal ≥ 10× on a GPU);
- the ROSE-EKFAC / forward-only NLL scoring time ratio at batch ``--batch`` (512);
- the EKFAC fit time, and the largest relative difference between the device's layer scores and a CPU
  fit's (float32 gradients, float64 Fisher on both);
- with ``--float64 N``: the same on the CPU between a float32 and a float64 copy of the model fitted on
  ``N`` images, i.e. what float32 rounding alone does to the scores, the scale to judge the device's
  difference by (any device; slow: float64 convolutions).

    python -m benchmarks.gpu [--device cuda] [--batch 512] [--fit 2048] [--loop 64] [--repeats 5]
                             [--float64 512]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import cast

import torch
from benchmarks.speed import images, per_sample_loop_scores
from torch import Tensor

from roseood.demo import demo_model
from roseood.detectors import ROSE
from roseood.machine import machine_description
from roseood.models import load_model
from roseood.models.base import GenerativeModel, RoseModel


def fmt(values: Tensor) -> str:
    return ", ".join(f"{float(v):.1e}" for v in values)


def seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Mean wall time of ``fn`` after one warm-up call, waiting for the device to finish."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / repeats


def float64_reference(model: RoseModel, fit: Tensor, x: Tensor) -> Tensor:
    """Largest relative difference per layer between ROSE-EKFAC layer scores of ``model`` and of a
    float64 copy of it, both fitted on ``fit`` on the CPU: the effect of float32 rounding alone."""
    double = cast(GenerativeModel, copy.deepcopy(model)).double()
    loss = type(model).rose_loss
    double.rose_loss = lambda b, stochastic=False: loss(double, b.double(), stochastic)  # type: ignore[method-assign,assignment]
    scores = []
    for m in (model, double):
        det = ROSE(m, fisher="ekfac", batch_size=64, progress=False)
        det.fit_fisher(fit)
        scores.append(det.layer_scores(x))
    return ((scores[0] - scores[1]).abs() / scores[1].abs()).amax(0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="roseood model checkpoint (default: the shipped FMNIST VAE)")
    p.add_argument("--device", default="cuda", help="cuda[:i] (default) or cpu")
    p.add_argument("--batch", type=int, default=512, help="scoring batch for the ROSE/NLL ratio")
    p.add_argument("--fit", type=int, default=2048, help="Fisher images")
    p.add_argument("--loop", type=int, default=64, help="images for the per-sample-loop ratio")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--float64", type=int, default=0, help="images for the float32/float64 CPU reference")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing measured (use --device cpu to run the same code on the CPU)")
        return
    cpu_model = load_model(args.model) if args.model else demo_model()
    model = copy.deepcopy(cpu_model).to(device).eval()
    fit, _, x = images(args.fit, args.batch)
    x = x.to(device)
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {card}; settings: {vars(args)} | {machine_description()}")

    det = ROSE(model, fisher="ekfac", batch_size=args.batch, progress=False)
    t0 = time.perf_counter()
    det.fit_fisher(fit.to(device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    print(f"EKFAC Fisher fit on {args.fit} images: {time.perf_counter() - t0:.2f} s")

    few = x[: args.loop]
    batched = seconds(lambda: det.layer_scores(few), device, args.repeats)
    loop = seconds(lambda: per_sample_loop_scores(det, few), device, 1)
    print(
        f"ROSE-EKFAC layer scores of {args.loop} images: per-sample loop {loop:.3f} s, batched hooks "
        f"{batched:.3f} s, ratio {loop / batched:.1f}x (goal >= 10x)"
    )

    def nll() -> object:
        with torch.no_grad():
            return model.rose_loss(x)

    t_nll = seconds(nll, device, args.repeats)
    t_rose = seconds(lambda: det.layer_scores(x), device, args.repeats)
    print(
        f"batch {args.batch}: forward-only NLL {t_nll:.3f} s, ROSE-EKFAC {t_rose:.3f} s, "
        f"ratio {t_rose / t_nll:.2f}x"
    )

    if device.type != "cpu":
        ref = ROSE(cpu_model, fisher="ekfac", batch_size=args.batch, progress=False)
        ref.fit_fisher(fit)
        ours, theirs = det.layer_scores(x), ref.layer_scores(x.cpu())
        rel = ((ours.cpu() - theirs).abs() / theirs.abs()).amax(0)
        print(f"largest relative difference of the {card} layer scores from the CPU's, per layer: {fmt(rel)}")
    if args.float64:
        rel = float64_reference(cpu_model, fit[: args.float64], x[:64].cpu())
        print(f"float32 vs float64 on the CPU, {args.float64} Fisher images, per layer: {fmt(rel)}")


if __name__ == "__main__":
    main()
