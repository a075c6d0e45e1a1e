"""Judge ``benchmarks/text_lora.py``'s sneaker LoRA with roseood: Fashion-MNIST test sneakers (in
distribution) against the test images of the other nine classes and against MNIST test, all under the
prompt "a photo of a sneaker", by ROSE over the adapter (the LoRA folder, ``--layers adapter``, the
default), ROSE over the whole UNet of the base (the base folder, no adapter), the denoising loss of the
fine-tune, and DiffPath on the fine-tune; each fitted on sneaker training images the LoRA learned, its
statistics on training sneakers it did not. AUROC with a 95 % bootstrap interval per seed, ms per image of
each score beside the UNet's loss forward + backward, measured in the same process:

    python benchmarks/text_lora_judge.py judge --out runs/text_lora --seed 0   # one LoRA seed
    python benchmarks/text_lora_judge.py table --out runs/text_lora            # the seeds' Markdown table
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from benchmarks.diffusion_cost import best_of
from benchmarks.text_lora import BASE, CHANNELS, SIZE, SNEAKER, prompt, sneakers
from research.diffusion import mean_interval

from roseood.data import load_images
from roseood.detectors import ROSE, make_detector
from roseood.detectors.inputs import model_inputs
from roseood.evaluation.metrics import metric_intervals, ood_metrics
from roseood.machine import machine_description
from roseood.models import load_model
from roseood.models.diffusion import DiffusionModel
from roseood.models.families import default_method

DETECTORS = ("ROSE, adapter", "ROSE, whole UNet (base)", "denoising loss", "DiffPath")
SETS = ("other classes", "MNIST")


def judged_images(seed: int, lora_images: int, fit: int, stats: int, test: int) -> dict[str, np.ndarray]:
    """uint8 16×16 grayscale sets of ``seed``: the fit images (the first of the LoRA's own), the statistics
    images (training sneakers it never saw), ``test`` test sneakers, other-class and MNIST test images."""
    train = load_images("fashion_mnist:train", size=SIZE, channels=CHANNELS)
    assert train.labels is not None
    learned, unseen = sneakers(np.asarray(train.labels), seed, lora_images)
    tests = load_images("fashion_mnist", size=SIZE, channels=CHANNELS)
    labels, rng = np.asarray(tests.labels), np.random.default_rng(seed)
    pick = lambda mask: tests.images[rng.choice(np.flatnonzero(mask), test, replace=False)]  # noqa: E731
    return {
        "fit": train.images[learned[:fit]],
        "stats": train.images[unseen[:stats]],
        "sneakers": pick(labels == SNEAKER),
        "other classes": pick(labels != SNEAKER),
        "MNIST": load_images("mnist", size=SIZE, channels=CHANNELS, n=test, seed=seed).images,
    }


def loss_backward_ms(model: DiffusionModel, x: np.ndarray) -> float:
    """ms per image of the loss's forward + backward over the model's trainable UNet parameters."""
    det = ROSE(model, progress=False)
    t = model_inputs(x, det.model, det.batch_size)
    params = [p for p in model.unet.parameters() if p.requires_grad]
    step = det.stream.images_per_batch(det.batch_size)

    def run() -> None:
        for i in range(0, len(t), step):
            torch.autograd.grad(model.rose_loss(t[i : i + step]).sum(), params)

    model.eval()
    return 1e3 * best_of(2, run) / len(t)


def judge(args: argparse.Namespace) -> None:
    """Fit and score every detector for LoRA seed ``--seed``; write ``judge-sN.json`` in ``--out``."""
    torch.manual_seed(args.seed)
    base = Path(args.out) / BASE
    condition = f"prompt:{prompt(SNEAKER)}"
    tuned, plain = load_model(base / f"sneaker-lora-s{args.seed}"), load_model(base)
    assert isinstance(tuned, DiffusionModel) and isinstance(plain, DiffusionModel)
    for m in (tuned, plain):
        m.set_loss_settings(condition=condition)
    images = judged_images(args.seed, args.lora_images, args.fit, args.stats, args.test)
    method = default_method(tuned)
    chosen = [(tuned, method), (plain, method), (tuned, "denoising"), (tuned, "diffpath")]
    result: dict[str, Any] = {
        "seed": args.seed, "method": method, "condition": condition, "machine": machine_description(),
        "threads": torch.get_num_threads(), "k": tuned.k, "sizes": {k: len(v) for k, v in images.items()},
        "loss_fb_ms": {
            "whole UNet": loss_backward_ms(plain, images["sneakers"][:32]),
            "adapter": loss_backward_ms(tuned, images["sneakers"][:32]),
        },
        "rows": {},
    }  # fmt: skip
    for name, (model, kind) in zip(DETECTORS, chosen, strict=True):
        det = make_detector(kind, model, progress=False)
        start = time.perf_counter()
        det.fit(images["fit"], held_out=images["stats"])
        fitted = time.perf_counter()
        scores = {s: np.asarray(det.score(images[s]), float) for s in ("sneakers", *SETS)}
        scored = time.perf_counter()
        row: dict[str, Any] = {
            "fit_s": fitted - start,
            "score_ms": 1e3 * (scored - fitted) / sum(len(images[s]) for s in scores),
        }
        for s in SETS:
            lo, hi = metric_intervals(scores["sneakers"], scores[s], resamples=1000, seed=0)["auroc"]
            row[s] = {"auroc": ood_metrics(scores["sneakers"], scores[s])["auroc"], "interval": [lo, hi]}
        result["rows"][name] = row
        print(name, json.dumps(row), flush=True)
    (Path(args.out) / f"judge-s{args.seed}.json").write_text(json.dumps(result, indent=1))


def table(args: argparse.Namespace) -> None:
    """The Markdown table of every ``judge-sN.json`` in ``--out``: per seed AUROC [95 % bootstrap], the
    mean ± the 95 % t-interval over seeds, and ms per image beside the whole UNet's loss f+b."""
    runs = [json.loads(p.read_text()) for p in sorted(Path(args.out).glob("judge-s*.json"))]
    seeds = ", ".join(str(r["seed"]) for r in runs)
    lines = [
        f"| detector | {' | '.join(f'{s}: seeds {seeds}; mean' for s in SETS)} | ms / image | × loss f+b |",
        "|---|---|---|---|---|",
    ]
    for name in DETECTORS:
        cells = []
        for s in SETS:
            per = [r["rows"][name][s] for r in runs]
            each = "; ".join(
                f"{c['auroc']:.3f} [{c['interval'][0]:.2f}, {c['interval'][1]:.2f}]" for c in per
            )
            mean, half = mean_interval([c["auroc"] for c in per])
            cells.append(f"{each}; **{mean:.3f} ± {half:.3f}**")
        ms = [r["rows"][name]["score_ms"] for r in runs]
        ratio = [r["rows"][name]["score_ms"] / r["loss_fb_ms"]["whole UNet"] for r in runs]
        lines.append(f"| {name} | {' | '.join(cells)} | {np.mean(ms):.0f} | {np.mean(ratio):.2f}× |")
    fb = {k: np.mean([r["loss_fb_ms"][k] for r in runs]) for k in ("whole UNet", "adapter")}
    lines.append(
        f"\nThe loss f+b (k = {runs[0]['k']} pairs per image): whole UNet {fb['whole UNet']:.0f} ms, adapter "
        f"only {fb['adapter']:.0f} ms per image; sizes {runs[0]['sizes']}; {runs[0]['machine']}, "
        f"{runs[0]['threads']} thread(s)."
    )
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    j, t = sub.add_parser("judge"), sub.add_parser("table")
    for c in (j, t):
        c.add_argument("--out", default="runs/text_lora", help="the run folder of benchmarks/text_lora.py")
    j.add_argument("--seed", type=int, default=0, help="the LoRA's seed (and the data draws')")
    j.add_argument("--lora-images", type=int, default=1000, help="as train-lora's (the fit images' pool)")
    j.add_argument("--fit", type=int, default=192, help="fit images: sneakers the LoRA learned")
    j.add_argument("--stats", type=int, default=96, help="statistics images: sneakers it did not")
    j.add_argument("--test", type=int, default=150, help="images per test set")
    args = p.parse_args()
    torch.set_num_threads(1)
    (judge if args.command == "judge" else table)(args)


if __name__ == "__main__":
    main()
