"""ROSE and the diffusion baselines on Ho et al.'s 35.7 M-parameter CIFAR-10 DDPM architecture, with random
weights (cost and memory only): fit, save, load and score per method, each in its own process, with its
peak resident memory, wall time and detector size, and ROSE's scoring time over the forward + backward
pass of its own K-pair loss on the same images and batches (both timed warm, after scoring one image;
``--repeats N``: N rounds of each, interleaved, the best of each taken, for a machine not idle).
Run:

    nice -n 10 python benchmarks/scale.py --memory 6G [--fit 16 --stats 8 --test 8] [--json out.json]
    python benchmarks/scale.py --device cuda --memory 60G --batch-size 256 --agree 16   # on a GPU

``--arch bench-cpu`` / ``bench-paper`` measure the UNet of ``python -m research diffusion``'s CPU / paper
profile instead (CIFAR-10 shape), ``--arch dit-s2`` a DiT of DiT-S/2's size (35 M parameters) on
CIFAR-10-shaped pixels; ``--folder zoo/dit-fmnist-s0 --data fashion_mnist`` measures a model of any kind
there (trained weights, its own data). On a GPU, peak memory is the GPU's
(``torch.cuda.max_memory_allocated``) and ``--agree N`` scores N test images with the GPU-fitted detector
on the GPU and, loaded from its file, on the CPU: the largest relative difference of the layer scores per
layer kind.

The diffusers folder (random weights, seed 0) is written to ``--folder`` first if it is not there. A
method whose process grows past ``--kill`` resident memory is stopped and reported as such.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from research.profiles import get_profile

from roseood.data import load_images
from roseood.detectors import ROSE, Detector, make_detector
from roseood.machine import machine_description
from roseood.memory import format_size, parse_size, set_memory
from roseood.models.diffusion import DiffusionModel, export_diffusers, is_diffusers_folder, load_diffusers

BENCH_UNETS = ("cpu", "paper")  # the profiles whose diffusion UNet --arch bench-PROFILE measures

# Ho et al. (2020)'s CIFAR-10 UNet as a diffusers UNet2DModel: 35.7 M parameters
CIFAR10_DDPM = {
    "sample_size": 32,
    "in_channels": 3,
    "out_channels": 3,
    "layers_per_block": 2,
    "block_out_channels": [128, 256, 256, 256],
    "down_block_types": ["DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"],
}
ARCHS: dict[str, dict[str, Any]] = {
    "ho-cifar10": {"unet": CIFAR10_DDPM},
    # Peebles & Xie's DiT-S/2 (12 blocks of 6 × 64 attention, 2×2 patches: 33 M parameters), here on 32×32
    # RGB pixels (256 tokens, as DiT-S/2 on a 256² image's 32² latents; 35 M), one label: judged at it
    "dit-s2": {
        "in_channels": 3,
        "image_size": 32,
        "dit": {"layers": 12, "heads": 6, "head_dim": 64, "patch": 2},
    },
    **{f"bench-{p}": {"in_channels": 3, "image_size": 32, **get_profile(p).diffusion} for p in BENCH_UNETS},
}
METHODS = ("rose-diag", "rose-ekfac", "denoising", "diffpath", "msma")


def peak_rss() -> int:
    """This process's peak resident memory (VmHWM), bytes."""
    text = Path("/proc/self/status").read_text()
    return int(next(line for line in text.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024


def rss(pid: int) -> int:
    """A process's resident memory now (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next((x for x in text.splitlines() if x.startswith("VmRSS:")), "VmRSS: 0 kB")
    return int(line.split()[1]) * 1024


def images(args: argparse.Namespace, shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Fit, statistics and test images of ``--data`` (CIFAR-10 by default) at the model's input ``shape``,
    drawn from its training and test splits (seed 0), in [0, 1]."""

    def read(split: str, n: int) -> torch.Tensor:
        found = load_images(args.data, split=split, n=n, channels=shape[0], size=shape[-1])
        return torch.as_tensor(found.images[:n]).float() / 255

    train = read("train", args.fit + args.stats)
    return train[: args.fit], train[args.fit :], read("test", args.test)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so that a wall time covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loss_backward_seconds(model: DiffusionModel, x: torch.Tensor, per_batch: int) -> float:
    """Wall time of the forward and backward pass of the K-pair loss over ``x`` in batches of ``per_batch``
    images, w.r.t. every parameter: the floor a gradient-based score cannot go below."""
    params = [p for p in model.unet.parameters() if p.requires_grad]
    sync(x.device)
    start = time.perf_counter()
    for i in range(0, x.shape[0], per_batch):
        torch.autograd.grad(model.rose_loss(x[i : i + per_batch]).sum(), params)
    sync(x.device)
    return time.perf_counter() - start


def agreement(det: ROSE, path: Path, folder: str, x: torch.Tensor) -> dict[str, float]:
    """Largest relative difference between ``det``'s layer scores of ``x`` on its device and those of its
    saved file loaded on the CPU, per layer kind (the module's class)."""
    cpu = load_diffusers(folder)
    ref = Detector.load(path, cpu)
    assert isinstance(ref, ROSE)
    ours, theirs = det.layer_scores(x).cpu().double(), ref.layer_scores(x.cpu()).double()
    rel = ((ours - theirs).abs() / theirs.abs().clamp_min(1e-30)).amax(0)
    modules = dict(det.model.named_modules())
    worst: dict[str, float] = {}
    for name, r in zip(det.layers, rel.tolist(), strict=True):
        kind = type(modules[name]).__name__ if name in modules else name.rsplit(".", 1)[-1]
        worst[kind] = max(worst.get(kind, 0.0), r)
    return worst


def one(method: str, args: argparse.Namespace) -> dict[str, object]:
    """Fit, save, load and score one method in this process; its numbers."""
    torch.manual_seed(0)
    set_memory(args.memory)
    device = torch.device(args.device)
    model = load_diffusers(args.folder).to(device)
    fit, stats, test = (t.to(device) for t in images(args, model.input_shape))
    start = time.perf_counter()
    extra = {"max_size": args.max_size} if args.max_size and method.startswith("rose") else {}
    det = make_detector(method, model, batch_size=args.batch_size, progress=True, **extra)
    det.fit(fit, held_out=stats)
    sync(device)
    fit_s = time.perf_counter() - start
    agree: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "detector.pt"
        det.save(path)
        size = path.stat().st_size
        start = time.perf_counter()
        loaded = Detector.load(path, model)
        load_s = time.perf_counter() - start
        if args.agree and device.type != "cpu" and isinstance(loaded, ROSE):
            agree = agreement(loaded, path, args.folder, test[: args.agree])
    loaded.score(test[:1])  # warm: ROSE's one-image memory probe and first-call costs are not timed
    fishers = loaded.fishers_ if isinstance(loaded, ROSE) else None
    per_batch = (
        loaded.stream.plan(test, fishers.kinds, batch_size=loaded.batch_size, fishers=fishers).images
        if isinstance(loaded, ROSE) and fishers
        else 0
    )
    times, floors = [], []
    for _ in range(args.repeats):  # interleaved, so that a busy machine slows both alike; the best of each
        sync(device)
        start = time.perf_counter()
        scores = loaded.score(test)
        sync(device)
        times.append(time.perf_counter() - start)
        if fishers is not None:
            floors.append(loss_backward_seconds(model, test, per_batch))
    score_s = min(times)
    row: dict[str, object] = {
        "method": method,
        "fit_s": fit_s,
        "load_s": load_s,
        "score_s": score_s,
        "score_s_per_image": score_s / args.test,
        "images_per_s": args.test / score_s,
        "detector_bytes": size,
        "finite_scores": bool(np.isfinite(scores).all()),
    } | ({"cpu_agreement": agree} if agree else {})
    if fishers is not None:
        kinds = list(fishers.kinds.values())
        row |= {
            "images_per_batch": per_batch,
            "loss_fwd_bwd_s": min(floors),
            "cost_ratio": score_s / min(floors),
            "cost_ratio_per_round": [t / f for t, f in zip(times, floors, strict=True)],
            "fisher_kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
        }
    row["peak_rss_bytes"] = peak_rss()
    if device.type == "cuda":
        row["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(device)
    return row


def run(method: str, args: argparse.Namespace) -> dict[str, object]:
    """``one(method)`` in a child process, stopped if its resident memory passes ``--kill``."""
    cmd = [sys.executable, __file__, "--one", method, *sys.argv[1:]]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = 0
    while child.poll() is None:
        peak = max(peak, rss(child.pid))
        if peak > args.kill:
            child.kill()
            child.wait()
            return {"method": method, "killed_at_bytes": peak, "wall_s": time.perf_counter() - start}
        time.sleep(0.2)
    out = child.stdout.read() if child.stdout else ""
    if child.returncode != 0 or not out.strip():
        return {"method": method, "failed": child.returncode, "wall_s": time.perf_counter() - start}
    return json.loads(out.strip().splitlines()[-1]) | {"wall_s": time.perf_counter() - start}


def table(rows: list[dict[str, object]], weights: int) -> str:
    """The results as a Markdown table."""
    lines = [
        "| method | fit | score, per image | images/s | peak RSS | peak GPU | detector file "
        "| ROSE score / loss fwd+bwd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "killed_at_bytes" in r or "failed" in r:
            killed = r.get("killed_at_bytes")
            what = f"stopped at {format_size(killed)}" if isinstance(killed, int) else "failed"
            lines.append(f"| {r['method']} | {what} | | | | | | |")
            continue
        ratio = f"{r['cost_ratio']:.2f}×" if "cost_ratio" in r else ""
        size = r["detector_bytes"]
        assert isinstance(size, int)
        gpu, rss = r.get("peak_gpu_bytes"), r["peak_rss_bytes"]
        assert isinstance(rss, int)
        lines.append(
            f"| {r['method']} | {r['fit_s']:.1f} s | {r['score_s_per_image']:.3g} s | "
            f"{r['images_per_s']:.3g} | "
            f"{format_size(rss)} | {format_size(gpu) if isinstance(gpu, int) else ''} | "
            f"{format_size(size)} ({size / weights:.2f}× weights) | {ratio} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=sorted(ARCHS), default="ho-cifar10", help="the UNet (random weights)")
    p.add_argument(
        "--folder",
        help="diffusers folder, made if absent (default: runs/scale-ARCH); a zoo "
        "model's folder measures that model",
    )
    p.add_argument("--data", default="cifar10", help="images at the model's input shape (a dataset name)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda[:i]")
    p.add_argument("--agree", type=int, default=0, help="on a GPU: test images for the CPU agreement")
    p.add_argument("--memory", default="6G", help="ROSE's memory budget (--memory of the CLI)")
    p.add_argument("--kill", type=parse_size, default=parse_size("8G"), help="stop a method past this RSS")
    p.add_argument("--fit", type=int, default=16)
    p.add_argument("--stats", type=int, default=8)
    p.add_argument("--test", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64, help="rows per batch (ROSE: before its budget)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of scoring and loss, interleaved (the best of each)",
    )
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--max-size", help="ROSE's bound on its saved Fishers (unset: its default, auto; none)")
    p.add_argument("--json", help="write the rows and settings here")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.folder = args.folder or f"runs/scale-{args.arch}"
    if args.one:
        print(json.dumps(one(args.one, args)))
        return
    if not is_diffusers_folder(args.folder):
        torch.manual_seed(0)
        export_diffusers(DiffusionModel(**ARCHS[args.arch]), args.folder)
    model = load_diffusers(args.folder)
    params = sum(p.numel() for p in model.unet.parameters())
    weights = 4 * params
    settings = {k: v for k, v in vars(args).items() if k != "one"} | {
        "parameters": params,
        "k": model.k,
        "threads": torch.get_num_threads(),
        "card": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
    }
    print("settings:", settings | machine_description(), flush=True)
    rows = []
    for method in args.methods.split(","):
        rows.append(run(method, args))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows, weights))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": settings, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
