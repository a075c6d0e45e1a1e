"""What ROSE costs per image on the zoo's diffusion models beside DiffPath and the model's own loss, in one
process on the CPU: the loss's forward + backward over every parameter (the floor of a gradient score),
DiffPath's 10-step DDIM path, the Fisher fit on EKFAC (both passes, every batch run through the model),
compact EKFAC (of the input side; of the wider side) and diagonal Fishers, and scoring with
``rose-ekfac`` (each image's summed gradient; the layer scores) and with the band rows of the diffusion
defaults (``rose-bands-stats``: every pair's gradient, a column per timestep; the whole ``score``, its
statistics and density included) on each Fisher kind; then the model's own default (``rose fit``
without ``--method``) over DiffPath. Each is timed warm, best of ``--repeats`` interleaved rounds. Run it
from a checkout (``PYTHONPATH=src``) to compare two commits on the same machine in one job (a kind an
older checkout lacks is a dash):

    python benchmarks/diffusion_cost.py --models ddpm-fmnist-s0,fm-fmnist-s0 --json before.json

Prints a Markdown table with the settings and the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roseood.data import load_images
from roseood.detectors import ROSE, DiffPath, make_detector
from roseood.detectors.inputs import model_inputs
from roseood.errors import RoseError
from roseood.machine import machine_description
from roseood.models import load_model
from roseood.models.diffusion import DiffusionModel
from roseood.models.zoo import zoo_data

MODELS = "ddpm-fmnist-s0,fm-fmnist-s0,dit-fmnist-s0,ldm-fmnist-s0,cddpm-fmnist-s0,ddpm-cifar10-s0"


def best_of(rounds: int, fn: Callable[[], object]) -> float:
    """The shortest wall time of ``rounds`` calls of ``fn`` (after one untimed call)."""
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# the band methods' Fishers (the defaults' and the options), as the table's cells name them
FISHERS = {"ekfac": "EKFAC", "ekfac-compact": "compact", "ekfac-compact-wide": "wide", "diag": "diag"}


def fit_seconds(model: DiffusionModel, fit: np.ndarray, fisher: str = "ekfac") -> float | None:
    """Seconds of a Fisher fit of ``fit`` with every batch of every pass run through the model: no
    gradients kept between EKFAC's passes, no first pass stopped early (its per-image cost); None for a
    kind this checkout lacks."""
    from roseood.curvature import EKFAC

    try:
        det = ROSE(model, fisher=fisher, progress=False)
    except RoseError:
        return None
    det.grad_cache_bytes = 0
    cap = getattr(EKFAC, "FACTOR_IMAGES", None)  # a checkout from before the first pass could stop
    if cap is not None:
        EKFAC.FACTOR_IMAGES = len(fit) + 1
    try:
        start = time.perf_counter()
        det.fit_fisher(fit)
        return time.perf_counter() - start
    finally:
        if cap is not None:
            EKFAC.FACTOR_IMAGES = cap


def measure(name: str, n: int, rounds: int) -> dict[str, Any]:
    """Seconds per image of each step on model ``name`` with ``n`` test images (and ``n`` fit images)."""
    torch.manual_seed(0)
    model = load_model(name)
    assert isinstance(model, DiffusionModel), f"{name} is not a diffusion model"
    data, c, size = zoo_data(name), model.input_shape[0], model.input_shape[-1]  # read as the model reads
    fit = load_images(f"{data}:train", n=n + max(n, 24), seed=0, channels=c, size=size).images  # ≥ 20 held
    test = load_images(data, n=n, seed=0, channels=c, size=size).images
    rose = ROSE(model, progress=False)
    row: dict[str, Any] = {"model": name, "images": n, "k": rose.stream.rows_per_image}
    x = model_inputs(test, rose.model, rose.batch_size)
    params = [p for p in model.unet.parameters() if p.requires_grad]

    step = rose.stream.images_per_batch(rose.batch_size)

    def loss_backward() -> None:
        for i in range(0, n, step):
            torch.autograd.grad(model.rose_loss(x[i : i + step]).sum(), params)

    model.eval()
    row["loss_fb"] = best_of(rounds, loss_backward) / n
    try:
        diffpath = DiffPath(model, progress=False)
        row["diffpath"] = best_of(rounds, lambda: diffpath.statistics(x)) / n
    except RoseError as exc:
        row["diffpath"] = None
        row["diffpath_refused"] = str(exc)
    for fisher in FISHERS:
        seconds = fit_seconds(model, fit[:n], fisher)
        row[f"fit_{fisher}"] = None if seconds is None else seconds / n
    rose.fit(fit[:n], held_out=fit[n:])
    fishers = rose.fishers_
    assert fishers is not None  # fitted above
    scoring = partial(rose.stream.scores, x, fishers, batch_size=rose.batch_size, progress=False, desc="")
    row["rose_ekfac"] = best_of(rounds, scoring) / n  # the raw scores, never read from a memo
    for fisher in FISHERS:
        try:
            bands = make_detector("rose-bands-stats", model, progress=False, fisher=fisher)
        except RoseError:
            row[f"bands_{fisher}"] = None
            continue
        bands.fit(fit[:n], held_out=fit[n:])  # its own Fishers: shared ones would remember the scores timed
        row[f"bands_{fisher}"] = best_of(rounds, partial(bands.score, test)) / n  # the whole score
    row["default"] = default_of(model)
    return row


def default_of(model: DiffusionModel) -> dict[str, str]:
    """The method ``rose fit`` takes for ``model`` without ``--method``, and its Fisher kind."""
    try:
        from roseood.models.families import default_method
    except ImportError:  # a checkout from before a model's default was its own
        method = "rose-bands-stats"
    else:
        method = default_method(model)
    return {"method": method, "fisher": make_detector(method, model, progress=False).get_params()["fisher"]}


def cpu_name() -> str:
    """The processor's model name (Linux), which the timings belong to."""
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown")


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table: ms per image (one per Fisher kind where a cell holds several; a dash: a kind this
    checkout lacks), and the model's default's scoring over DiffPath's and the loss's."""
    kinds = " / ".join(FISHERS.values())
    lines = [
        f"| model | K | loss f+b | DiffPath | Fisher fit: {kinds} | rose-ekfac | "
        f"rose-bands-stats: {kinds} | the default | over DiffPath | over the loss |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(s: float | None) -> str:
        return "–" if s is None else f"{1e3 * s:.0f}"

    for r in rows:
        dp = r["diffpath"]
        fits = " / ".join(ms(r.get(f"fit_{f}")) for f in FISHERS)
        bands = " / ".join(ms(r.get(f"bands_{f}")) for f in FISHERS)
        default = r["bands_" + r["default"]["fisher"]]
        lines.append(
            f"| {r['model']} | {r['k']} | {ms(r['loss_fb'])} | {ms(dp)} | {fits} | {ms(r['rose_ekfac'])} | "
            f"{bands} | {r['default']['method']} | {f'{default / dp:.2f}×' if dp else 'refused'} | "
            f"{default / r['loss_fb']:.2f}× |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=MODELS, help="zoo model names, comma-separated")
    p.add_argument("--images", type=int, default=64, help="test images (and fit images) per model")
    p.add_argument("--repeats", type=int, default=2, help="timed rounds of each scoring step (the best)")
    p.add_argument("--json", help="write the rows and settings here")
    args = p.parse_args()
    rows = [measure(m, args.images, args.repeats) for m in args.models.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    settings = {
        "images": args.images,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "machine": machine_description(),
        "cpu": cpu_name(),
        "commit": commit.strip(),
        "torch": torch.__version__,
    }
    print(f"ms per image, {args.images} images per model, best of {args.repeats}: {json.dumps(settings)}")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": settings, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
