"""What the DDPM default's AUROC costs (issue 71): AUROC against scoring time for rose-bands-stats over a
subset of the denoiser's layers at K (timestep, noise) pairs per image, on a zoo DDPM.

``collect`` fits the EKFAC Fishers once per (K, pair seed) (rows summed, as rose-bands-stats does) and keeps
every (image, pair, layer) score gᵀF⁻¹g and every pair's ε-MSE for the held-out images and the test sets;
``report`` then scores any layer subset offline (a band per pair: the sum over the subset, with the pair's
ε-MSE, under ``gmm:k=auto``); ``time`` measures the whole ``score`` of chosen (K, layers) candidates beside
DiffPath in one process. The layer subsets: all, the named parts and ``last:N`` (the output side)::

    python -m benchmarks.score_curve collect --model ddpm-fmnist-s0 --k 3 --seed 0 --out fm0_k3_s0.npz
    python -m benchmarks.score_curve report 'fm0_k*_s0.npz'
    python -m benchmarks.score_curve time --model ddpm-fmnist-s0 --candidates 8:all,8:all@diag,3:last:4

``--fisher diag`` (collect) and ``@diag`` (time) take diagonal Fishers instead of the default's EKFAC.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import time
import warnings
from functools import partial

import numpy as np
import torch
from benchmarks.diffusion_cost import best_of, cpu_name

from roseood import load_images, load_model
from roseood.curvature import LayerGrad
from roseood.detectors import ROSE, DiffPath, make_detector
from roseood.detectors.aggregation import make_aggregation
from roseood.detectors.inputs import model_inputs
from roseood.evaluation.metrics import metric_intervals, ood_metrics
from roseood.machine import machine_description
from roseood.models.diffusion import DiffusionModel

# each in-distribution set's OOD sets, CIFAR-10's put through its JPEG history (its images are decoded JPEGs)
SETS = {"fashion_mnist": ("mnist", "omniglot"), "cifar10": ("svhn+jpeg75", "celeba+jpeg75")}
SUBSETS = ("all", "down", "mid", "up", "last:4", "last:8", "last:16", "last:32")


def in_data(model: str) -> str:
    return "fashion_mnist" if "fmnist" in model else "cifar10"


def collect(args: argparse.Namespace) -> None:
    """Fit the Fishers at K pairs (pair seed ``--seed``) and keep every per-(image, pair, layer) score."""
    start = time.time()
    model = load_model(args.model)
    assert isinstance(model, DiffusionModel)
    model.set_denoising(k=args.k, seed=args.seed)
    data = in_data(args.model)
    c, size = model.input_shape[0], model.input_shape[-1]  # every set read as the model reads images
    pool = load_images(f"{data}:train", n=args.fit + args.stats, seed=1, channels=c, size=size).images
    ood = args.ood.split(",") if args.ood else SETS[data]
    sets = {"held": pool[args.fit :]}
    sets |= {s: load_images(s, n=args.test, seed=2, channels=c, size=size).images for s in [data, *ood]}
    det = make_detector("rose-bands-stats", model, progress=False, fisher=args.fisher, layers=args.layers)
    assert isinstance(det, ROSE)
    fishers = det.fit_fisher(pool[: args.fit])
    out: dict[str, np.ndarray] = {
        "layers": np.array(det.layers),
        "fisher": np.array(args.fisher),
        "fit_seconds": np.array(time.time() - start),
    }
    for name, images in sets.items():
        # the detector's own stream, stopped before the layers are summed
        x = model_inputs(images, det.model, det.batch_size)
        step = det.stream.plan(x, fishers.kinds, batch_size=det.batch_size, fishers=fishers).images
        quads, losses = [], []
        for i in range(0, len(x), step):
            layer: dict[str, torch.Tensor] = {}

            def quad(name: str, g: LayerGrad, layer: dict[str, torch.Tensor] = layer) -> None:
                layer[name] = fishers[name].quad(g)

            batch = x[i : i + step]
            loss = det.stream.run(batch, quad)
            quads.append(torch.stack([layer[n] for n in det.layers], 1).view(len(batch), args.k, -1).double())
            losses.append(loss.double().view(len(batch), args.k))
        out[f"q/{name}"], out[f"loss/{name}"] = torch.cat(quads).numpy(), torch.cat(losses).numpy()
    np.savez(args.out, **out)  # type: ignore[arg-type]
    print(f"wrote {args.out} in {time.time() - start:.0f} s")


def subset(model: DiffusionModel, names: list[str], which: str) -> list[int]:
    chosen = set(model.rose_layers(which))
    return [i for i, n in enumerate(names) if n in chosen]


def ood_sets(a: np.lib.npyio.NpzFile, data: str) -> list[str]:
    """The OOD sets a collected file holds: its sets other than the held-out and the in-distribution."""
    return [f[2:] for f in a.files if f.startswith("q/") and f[2:] not in ("held", data)]


def aurocs(a: np.lib.npyio.NpzFile, idx: list[int], data: str) -> dict[str, tuple[float, float, float]]:
    """AUROC [95 % bootstrap] of the band density over layers ``idx`` against each OOD set."""

    def columns(s: str) -> np.ndarray:
        return np.concatenate([a[f"q/{s}"][:, :, idx].sum(2), a[f"loss/{s}"]], 1)

    agg = make_aggregation("gmm:k=auto")
    agg.fit(columns("held"))
    inside, out = agg(columns(data)), {}
    for o in ood_sets(a, data):
        outside = agg(columns(o))
        lo, hi = metric_intervals(inside, outside, resamples=1000)["auroc"]
        out[o] = (ood_metrics(inside, outside)["auroc"], lo, hi)
    return out


def report(args: argparse.Namespace) -> None:
    """AUROC of every layer subset of every collected file (K and pair seed read from the file name)."""
    warnings.filterwarnings("ignore")
    model = load_model(args.model)
    assert isinstance(model, DiffusionModel)
    data = in_data(args.model)
    print("| Fisher | K | pair seed | layers | OOD set: AUROC [95 % interval] |\n|---|---|---|---|---|")
    for path in sorted(glob.glob(args.files)):
        k, seed = (int(v) for v in re.findall(r"_k(\d+)_s(\d+)", path)[0])
        a = np.load(path)
        names = [str(n) for n in a["layers"]]
        fisher = str(a["fisher"]) if "fisher" in a else "ekfac"  # files from before --fisher: EKFAC
        for which in args.subsets.split(","):
            idx = subset(model, names, which)
            r = aurocs(a, idx, data)
            cells = "; ".join(f"{o}: {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" for o, v in r.items())
            print(f"| {fisher} | {k} | {seed} | {which} ({len(idx)}) | {cells} |", flush=True)


def time_candidates(args: argparse.Namespace) -> None:
    """ms per image of the whole rose-bands-stats score of each K:LAYERS candidate, DiffPath timed before
    each candidate and after the last (one process, ``--images`` per batch): each candidate's ratio is to
    the mean of the DiffPath times on either side of it, so that a change of load between candidates
    moves both."""
    model = load_model(args.model)
    assert isinstance(model, DiffusionModel)
    data, n = in_data(args.model), args.images
    fit = load_images(f"{data}:train", n=40, seed=0).images
    test = load_images(data, n=n, seed=0).images
    diffpath = DiffPath(model, progress=False)
    x = model_inputs(test, diffpath.model, diffpath.batch_size)
    own, rows = model.k, []
    before = best_of(2, lambda: diffpath.statistics(x)) / n
    for cand in args.candidates.split(","):
        k, rest = cand.split(":", 1)
        which, _, fisher = rest.partition("@")
        model.set_denoising(k=int(k))
        det = make_detector("rose-bands-stats", model, progress=False, layers=which, fisher=fisher or "ekfac")
        det.fit(fit[:16], held_out=fit[16:])
        seconds = best_of(2, partial(det.score, test)) / n
        model.set_denoising(k=own)
        after = best_of(2, lambda: diffpath.statistics(x)) / n
        rows.append((cand, seconds, before, after))
        before = after
    settings = {"model": args.model, "images": n, "threads": torch.get_num_threads(), "cpu": cpu_name()}
    settings |= machine_description()
    print(f"ms per image, best of 2 warm rounds: {json.dumps(settings)}")
    print("| K:layers@Fisher | ms / image | DiffPath before, after (ms) | × DiffPath |\n|---|---|---|---|")
    for cand, seconds, before, after in rows:
        ratio = seconds / ((before + after) / 2)
        print(f"| {cand} | {1e3 * seconds:.1f} | {1e3 * before:.1f}, {1e3 * after:.1f} | {ratio:.2f}× |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--model", default="ddpm-fmnist-s0")
    c.add_argument("--k", type=int, required=True)
    c.add_argument("--seed", type=int, default=0, help="the pairs' noise seed")
    c.add_argument("--fit", type=int, default=512)
    c.add_argument("--stats", type=int, default=500)
    c.add_argument("--test", type=int, default=300)
    c.add_argument("--fisher", default="ekfac", help="the Fishers' kind: ekfac (the default's) or diag")
    c.add_argument("--ood", help="the OOD sets, comma-separated (unset: the data set's own, SETS)")
    c.add_argument("--layers", help="the layer set fitted and kept (unset: all; report subsets of it)")
    c.add_argument("--out", required=True)
    r = sub.add_parser("report")
    r.add_argument("files", help="a glob of collected files, named ..._kK_sSEED.npz")
    r.add_argument("--model", default="ddpm-fmnist-s0", help="the model the files were collected on")
    r.add_argument("--subsets", default=",".join(SUBSETS), help="the layer subsets scored, comma-separated")
    t = sub.add_parser("time")
    t.add_argument("--model", default="ddpm-fmnist-s0")
    t.add_argument("--candidates", required=True, help="K:LAYERS[@FISHER],... e.g. 8:all,8:all@diag,3:last:4")
    t.add_argument("--images", type=int, default=64)
    args = p.parse_args()
    {"collect": collect, "report": report, "time": time_candidates}[args.command](args)


if __name__ == "__main__":
    main()
