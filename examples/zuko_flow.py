"""ROSE on a third-party model: a zuko masked autoregressive flow (MAF) on downsampled Fashion-MNIST.

The flow models 16×16 images (2×2 average pooling of roseood's 32×32 images, re-quantised to 8 bits)
as continuous vectors: uniform dequantisation, a logit transform, then zuko's MAF. Its NLL is in nats of
the discrete 16×16 image. Wrapping it for ROSE takes one small ``GenerativeModel`` subclass (the model
seam of this roseood version): per-sample NLL with gradients, and the layers to score — here every
``zuko.nn.MaskedLinear`` (an ``nn.Linear`` with a ``mask`` buffer, scored like any Linear).

    pip install -e ".[examples]"
    python examples/zuko_flow.py --out runs/zuko-maf.pt      # train a few minutes, then ROSE vs MNIST
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import zuko
from torch import Tensor

from roseood.data import load_images
from roseood.detectors import NLL, ROSE
from roseood.evaluation.metrics import ood_metrics
from roseood.models.base import GenerativeModel

ALPHA = 1e-3  # logit transform of alpha + (1 - 2 alpha) u keeps u = 0 or 1 finite


class ZukoFlow(GenerativeModel):
    """A zuko MAF on ``side``×``side`` 8-bit images, taking roseood's (N, 1, 32, 32) images in [0, 1]."""

    kind = "zuko-maf"

    def __init__(self, side: int = 16, transforms: int = 3, hidden: int = 256) -> None:
        super().__init__(in_channels=1, image_size=32)
        self.side, self.transforms, self.hidden = side, transforms, hidden
        features = side * side
        self.flow = zuko.flows.MAF(features, transforms=transforms, hidden_features=(hidden, hidden))

    def config(self) -> dict[str, Any]:
        return {"side": self.side, "transforms": self.transforms, "hidden": self.hidden}

    def _nll(self, x: Tensor, noise: bool) -> Tensor:
        """−log P(quantised image) in nats: flow density of the logit-dequantised pixels, bins of 1/256."""
        pooled = F.adaptive_avg_pool2d(x, self.side).flatten(1)
        levels = (pooled * 255.0).round()
        u = (levels + (torch.rand_like(levels) if noise else 0.5)) / 256.0
        s = ALPHA + (1 - 2 * ALPHA) * u
        v = s.log() - (-s).log1p()
        log_det = (math.log(1 - 2 * ALPHA) - s.log() - (-s).log1p()).sum(1)  # log |dv/du|
        dims = pooled.shape[1]
        return -(self.flow().log_prob(v) + log_det) + dims * math.log(256.0)

    def nll(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self._nll(x, noise=False)

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        return self._nll(x, noise=stochastic)

    def train_loss(self, x: Tensor) -> Tensor:
        return self._nll(x, noise=True)

    def layer_sets(self) -> dict[str, list[str]]:
        """``all``: every MaskedLinear of every transform's MADE; ``last``: each MADE's output layer."""
        names = [n for n, m in self.named_modules() if isinstance(m, zuko.nn.MaskedLinear)]
        return {"all": names, "last": [n for n in names if n.endswith("hyper.4")]}  # MaskedMLP: 0, 2, 4

    @property
    def dims(self) -> int:
        return self.side * self.side


def fit(
    model: ZukoFlow, images: np.ndarray, epochs: int, batch_size: int = 128, lr: float = 1e-3, seed: int = 0
) -> list[float]:
    """Train with Adam on uint8 images; returns bits/dim per epoch."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    x = torch.from_numpy(images).float() / 255.0
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    model.train()
    for _ in range(epochs):
        total = 0.0
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            loss = model.train_loss(x[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        history.append(total / len(x) / (model.dims * math.log(2)))
    return history


def evaluate(
    model: ZukoFlow,
    fit_images: np.ndarray,
    stats_images: np.ndarray,
    in_test: np.ndarray,
    ood_test: np.ndarray,
    fisher: str = "ekfac",
    layers: str | None = None,
) -> dict[str, float]:
    """AUROC of ROSE and of the plain NLL, in-distribution test vs OOD test images."""
    model.eval()
    rose = ROSE(model, fisher=fisher, layers=layers).fit(fit_images, stats_images=stats_images)
    nll = NLL(model).fit(fit_images)
    return {
        f"rose-{fisher}": ood_metrics(rose.score(in_test), rose.score(ood_test))["auroc"],
        "nll": ood_metrics(nll.score(in_test), nll.score(ood_test))["auroc"],
    }


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--train", type=int, default=60000, help="training images")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fit", type=int, default=2000, help="Fisher images")
    parser.add_argument("--stats", type=int, default=1000, help="layer-statistics images")
    parser.add_argument("--test", type=int, default=2000, help="test images per set")
    parser.add_argument("--layers", default="all", help="all or last")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="save the trained flow's state dict here")
    args = parser.parse_args()
    train = load_images("fashion_mnist:train", n=args.train, seed=args.seed).images
    model = ZukoFlow()
    t0 = time.time()
    bpd = fit(model, train, args.epochs, seed=args.seed)
    print(f"trained {args.epochs} epochs on {len(train)} images in {time.time() - t0:.0f} s; bits/dim {bpd}")
    if args.out:
        torch.save(model.state_dict(), args.out)
    held = load_images("fashion_mnist:train", n=args.fit + args.stats, seed=args.seed + 1).images
    result = evaluate(
        model,
        held[: args.fit],
        held[args.fit :],
        load_images("fashion_mnist", n=args.test, seed=args.seed).images,
        load_images("mnist", n=args.test, seed=args.seed).images,
        layers=args.layers,
    )
    print({k: round(v, 4) for k, v in result.items()})


if __name__ == "__main__":
    main()
