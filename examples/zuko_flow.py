"""ROSE on a third-party model: a zuko masked autoregressive flow (MAF) on downsampled Fashion-MNIST.

The flow models 16×16 images (2×2 average pooling of roseood's 32×32 images, re-quantised to 8 bits)
as continuous vectors: uniform dequantisation, a logit transform, then zuko's MAF. Its NLL is in nats of
the discrete 16×16 image. Wrapping it for ROSE is one ``roseood.wrap`` call: the per-sample NLL with
gradients, and named sets of layers to score, here ``zuko.nn.MaskedLinear`` layers (an ``nn.Linear`` with a
``mask`` buffer of the weight's shape, which the curvature code reads to score only the free entries).

ROSE's AUROC varies with the flow's training seed (0.91-0.99 against MNIST over sixteen flows): ``--ensemble
K`` trains K flows (seeds SEED, SEED+1000, ...) and scores them as one ``roseood.detectors.Ensemble``.

    pip install -e ".[examples]"
    python examples/zuko_flow.py --out runs/zuko-maf.pt      # train a few minutes, then ROSE vs MNIST
    python examples/zuko_flow.py --ensemble 3 --adjust both  # three flows, one detector
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
import zuko
from torch import Tensor, nn

import roseood
from roseood.data import load_images
from roseood.detectors import NLL, ROSE, Ensemble
from roseood.evaluation.metrics import metric_intervals, ood_metrics
from roseood.models import WrappedModel

ALPHA = 1e-3  # logit transform of alpha + (1 - 2 alpha) u keeps u = 0 or 1 finite


class DequantisedMAF(nn.Module):
    """A zuko MAF on ``side``×``side`` 8-bit images, taking roseood's (N, 1, 32, 32) images in [0, 1]."""

    def __init__(self, side: int = 16, transforms: int = 3, hidden: int = 256) -> None:
        super().__init__()
        self.side = side
        self.flow = zuko.flows.MAF(side * side, transforms=transforms, hidden_features=(hidden, hidden))

    def forward(self, x: Tensor, noise: bool = False) -> Tensor:
        """−log P(quantised image) in nats: flow density of the logit-dequantised pixels, bins of 1/256;
        ``noise``: uniform dequantisation (training) instead of bin centres (scores)."""
        pooled = F.adaptive_avg_pool2d(x, self.side).flatten(1)
        levels = (pooled * 255.0).round()
        u = (levels + (torch.rand_like(levels) if noise else 0.5)) / 256.0
        s = ALPHA + (1 - 2 * ALPHA) * u
        v = s.log() - (-s).log1p()
        log_det = (math.log(1 - 2 * ALPHA) - s.log() - (-s).log1p()).sum(1)  # log |dv/du|
        return -(self.flow().log_prob(v) + log_det) + pooled.shape[1] * math.log(256.0)


def build(side: int = 16, transforms: int = 3, hidden: int = 256, seed: int = 0) -> WrappedModel:
    """The flow wrapped for ROSE, initialised from ``seed``. Layer sets: ``hidden`` (the default) the last
    transform's MADE, the one nearest the base distribution, without its output layer; ``late`` that
    MADE's every MaskedLinear; ``all`` those of every transform; ``last`` each MADE's output layer. The
    first transform, which meets the pixels, models local structure that OOD images share (the paper's
    Appendix D), and the output layer (shift and log-scale) tracks the likelihood: both detect MNIST
    worst. But the last MADE alone misses far-OOD images that the likelihood rejects (constant, noise,
    CIFAR-10), which ``all`` catches: use it for unknown inputs. docs/results.md has the per-OOD-set
    results and the sixteen flows behind these choices."""
    torch.manual_seed(seed)
    net = DequantisedMAF(side, transforms, hidden)
    names = [n for n, m in net.named_modules() if isinstance(m, zuko.nn.MaskedLinear)]
    late = [n for n in names if n.startswith(f"flow.transform.transforms.{transforms - 1}.")]
    last = [n for n in names if n.endswith("hyper.4")]  # each MADE's output layer (its MLP: 0, 2, 4)
    sets = {"hidden": [n for n in late if n not in last], "late": late, "all": names, "last": last}
    return roseood.wrap(net, net, layers=sets, input_shape=(1, 32, 32), name="zuko-maf")


def bits_per_dim(model: WrappedModel, nll: Tensor) -> Tensor:
    """Per-sample NLL in nats as bits per dimension of the downsampled image."""
    return nll / (model.module.side**2 * math.log(2))


def fit(
    model: WrappedModel,
    images: np.ndarray,
    epochs: int,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """Train with Adam on uint8 images, dequantisation noise on; returns bits/dim per epoch."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x = torch.from_numpy(images).float() / 255.0
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    model.train()
    for _ in range(epochs):
        total = 0.0
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            loss = model.module(x[idx], noise=True).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        history.append(float(bits_per_dim(model, torch.tensor(total / len(x)))))
    return history


def evaluate(
    models: WrappedModel | list[WrappedModel],
    fit_images: np.ndarray,
    stats_images: np.ndarray,
    in_test: np.ndarray,
    ood_test: np.ndarray,
    fisher: str = "ekfac",
    layers: str | None = None,
    adjust: str = "none",
    aggregate: str = "relu-norm",
) -> dict[str, tuple[float, float, float]]:
    """AUROC of ROSE and of the plain NLL, in-distribution test vs OOD test images, each with its 95 %
    bootstrap interval: (AUROC, low, high). Several flows: ROSE on their ensemble (``roseood.detectors.
    Ensemble``: each flow's score z-normalised on the statistics images, then averaged), beside each flow
    alone (``/k``) and each flow's NLL."""
    models = models if isinstance(models, list) else [models]
    roses = [ROSE(m.eval(), fisher=fisher, layers=layers, adjust=adjust, aggregate=aggregate) for m in models]
    scores = {}
    if len(roses) == 1:
        rose = roses[0].fit(fit_images, held_out=stats_images)
        scores[f"rose-{fisher}"] = rose.score(in_test), rose.score(ood_test)
    else:  # each flow's scores once: the ensemble's score combines them
        ensemble = Ensemble(roses).fit(fit_images, held_out=stats_images)
        z_in, z_ood = ensemble.member_scores(in_test), ensemble.member_scores(ood_test)
        scores[f"rose-{fisher} ensemble of {len(roses)}"] = ensemble.combined(z_in), ensemble.combined(z_ood)
        scores |= {f"rose-{fisher}/{k}": (z_in[:, k], z_ood[:, k]) for k in range(len(roses))}
    for k, m in enumerate(models):
        nll = NLL(m).fit(fit_images)
        scores["nll" if len(models) == 1 else f"nll/{k}"] = nll.score(in_test), nll.score(ood_test)
    return {
        name: (ood_metrics(*pair)["auroc"], *metric_intervals(*pair)["auroc"])
        for name, pair in scores.items()
    }


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--train", type=int, default=60000, help="training images")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fit", type=int, default=2000, help="Fisher images")
    parser.add_argument("--stats", type=int, default=1000, help="layer-statistics images")
    parser.add_argument("--test", type=int, default=10000, help="test images per set (10000: all)")
    parser.add_argument("--layers", default="hidden", help="hidden, late, all or last (see build)")
    parser.add_argument("--adjust", default="none", help="ROSE's likelihood adjustment: none, nll or both")
    parser.add_argument("--aggregate", default="relu-norm", help="ROSE aggregation: relu-norm, log-z, ...")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--ensemble",
        type=int,
        default=1,
        help="flows to train (seeds SEED, SEED+1000, ...) and score together",
    )
    parser.add_argument("--out", help="save the trained flow's state dict here (flow k > 0: OUT.k)")
    args = parser.parse_args()
    models = []
    for k in range(args.ensemble):
        seed = args.seed + 1000 * k
        train = load_images("fashion_mnist:train", n=args.train, seed=seed).images
        model = build(seed=seed)
        t0 = time.time()
        bpd = fit(model, train, args.epochs, seed=seed)
        took = time.time() - t0
        print(
            f"flow seed {seed}: {args.epochs} epochs on {len(train)} images in {took:.0f} s; bits/dim {bpd}"
        )
        if args.out:
            torch.save(model.state_dict(), args.out if k == 0 else f"{args.out}.{k}")
        models.append(model)
    held = load_images("fashion_mnist:train", n=args.fit + args.stats, seed=args.seed + 1).images
    result = evaluate(
        models,
        held[: args.fit],
        held[args.fit :],
        load_images("fashion_mnist", n=args.test, seed=args.seed).images,
        load_images("mnist", n=args.test, seed=args.seed).images,
        layers=args.layers,
        adjust=args.adjust,
        aggregate=args.aggregate,
    )
    print(f"ROSE: layers {args.layers}, adjust {args.adjust}, aggregate {args.aggregate}")
    for name, (auroc, low, high) in result.items():
        print(f"{name} AUROC vs MNIST: {auroc:.4f} (95 % bootstrap interval {low:.4f}–{high:.4f})")


if __name__ == "__main__":
    main()
