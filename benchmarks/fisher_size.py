"""What a size budget on ROSE's saved Fishers costs in AUROC: the exact EKFAC of every layer against
EKFAC under ``max_size`` (the layers with the largest eigenbases made diagonal until the file fits;
default budget: the model's own weights) and against the diagonal Fisher, on a model where the exact
EKFAC fits. Run:

    python benchmarks/fisher_size.py --model runs/diffusion.pt [--in fashion_mnist --ood mnist]
        [--fit 1000 --stats 200 --test 500] [--max-size weights|SIZE]

Prints, per Fisher, the detector file's size, the layers per Fisher kind and the AUROC against each OOD set.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from roseood.data import load_images
from roseood.detectors import ROSE
from roseood.machine import machine_description
from roseood.models import load_model
from roseood.models.base import RoseModel
from roseood.models.vae import load_authors_vae


def images(name: str, split: str, n: int, model: RoseModel) -> torch.Tensor:
    """The first ``n`` images of a dataset split (by seed 0) in the model's input shape, in [0, 1]."""
    shape = model.input_shape
    assert isinstance(shape, tuple)
    channels, size = shape[0], shape[1]
    x = torch.as_tensor(load_images(name, split=split, n=n, channels=channels, size=size).images)
    return x.float() / 255 if x.dtype == torch.uint8 else x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="roseood model (default: the ROSE authors' seed-1 Fashion-MNIST VAE)")
    p.add_argument("--authors", default="../shared/models/rose-paper-vae/fmnist_ngf16_nz100_seed1")
    p.add_argument("--in", dest="in_data", default="fashion_mnist")
    p.add_argument("--ood", default="mnist")
    p.add_argument("--fit", type=int, default=1000)
    p.add_argument("--stats", type=int, default=200)
    p.add_argument("--test", type=int, default=500)
    p.add_argument("--layers", default=None, help="ROSE layer set (default: the model's)")
    p.add_argument("--max-size", default="weights", help="'weights' (the model's float32 size) or a size")
    args = p.parse_args()
    torch.manual_seed(0)
    model = (
        load_model(args.model)
        if args.model
        else load_authors_vae(f"{args.authors}_netE.pth", f"{args.authors}_netG.pth")
    )
    weights = 4 * sum(q.numel() for q in model.parameters() if q.requires_grad)
    budget = weights if args.max_size == "weights" else args.max_size
    fit = images(args.in_data, "train", args.fit + args.stats, model)
    test_in = images(args.in_data, "test", args.test, model)
    oods = {name: images(name, "test", args.test, model) for name in args.ood.split(",")}
    settings = vars(args) | {"weights_bytes": weights, "max_size_used": budget}
    print("settings:", settings | machine_description(), flush=True)
    print("| Fisher | file | layers (kind: count) | fit s | " + " | ".join(f"AUROC {o}" for o in oods) + " |")
    print("|---|---|---|---|" + "---|" * len(oods))
    for label, fisher, max_size in (
        ("EKFAC, exact", "ekfac", None),
        (f"EKFAC, max_size {budget}", "ekfac", budget),
        ("diag", "diag", None),
    ):
        start = time.perf_counter()
        det = ROSE(model, fisher=fisher, layers=args.layers, max_size=max_size)
        det.fit(fit[: args.fit], held_out=fit[args.fit :])
        fit_s = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            det.save(Path(tmp) / "d.pt")
            size = (Path(tmp) / "d.pt").stat().st_size
        assert det.fishers_ is not None  # fitted above
        kinds = list(det.fishers_.kinds.values())
        counts = ", ".join(f"{k}: {kinds.count(k)}" for k in sorted(set(kinds)))
        s_in = det.score(test_in)
        aurocs = []
        for x in oods.values():
            s_out = det.score(x)
            y = np.r_[np.zeros(len(s_in)), np.ones(len(s_out))]
            aurocs.append(f"{roc_auc_score(y, np.r_[s_in, s_out]):.3f}")
        print(f"| {label} | {size / 2**20:.2f} MB | {counts} | {fit_s:.0f} | " + " | ".join(aurocs) + " |")


if __name__ == "__main__":
    main()
