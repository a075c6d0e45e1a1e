"""The plain likelihood baseline: score = negative log-likelihood (higher = more OOD)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from roseood.data.tensors import iter_batches
from roseood.detectors.base import Detector
from roseood.errors import RoseError
from roseood.models.base import RoseModel
from roseood.models.vae import VAE
from roseood.randomness import per_input_seed
from roseood.validation import check_int


class NLL(Detector):
    """Negative log-likelihood in nats. ``k`` > 1 uses the IWAE estimate (VAE only). A sampled estimate
    (a VAE's ELBO or IWAE) draws each image's samples from ``seed`` and the image itself, so its score
    is the same in every run, batch, chunk and process count."""

    method = "nll"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        k: int = 1,
        seed: int = 0,
        batch_size: int = 64,
        progress: bool | None = None,
    ):
        super().__init__(model, batch_size=batch_size, progress=progress)
        if model is None:
            raise RoseError("the NLL score needs a generative model")
        if k > 1 and not isinstance(model, VAE):
            raise RoseError("IWAE (k > 1) applies to VAEs only; the Glow likelihood is exact")
        self.model: RoseModel = model
        self.k = k
        self.seed = check_int(seed, "seed", low=0)

    def params(self) -> dict[str, Any]:
        return {"k": self.k, "seed": self.seed, "batch_size": self.batch_size}

    def _fit(self, x: Tensor) -> None:
        """The likelihood needs no fitting."""

    def nll(self, x: Tensor) -> Tensor:
        """Per-image NLL in nats (no validation; ``x`` float on any device)."""
        self.model.eval()
        out = []
        with torch.no_grad(), per_input_seed(self.seed):
            for batch in iter_batches(x, self.batch_size, "NLL" if self.progress else None):
                b = batch.to(self.device)
                out.append(
                    (
                        self.model.iwae_nll(b, self.k)
                        if isinstance(self.model, VAE) and self.k > 1
                        else self.model.nll(b)
                    ).cpu()
                )
        return torch.cat(out)

    def _score(self, x: Tensor) -> Tensor:
        return self.nll(x)


def model_nll(
    model: RoseModel, x: Tensor, *, k: int, batch_size: int, progress: bool | None, seed: int
) -> Tensor:
    """Per-image NLL in nats on CPU: IWAE with ``k`` samples for a VAE (per image from ``seed``), the
    exact likelihood otherwise."""
    k = k if isinstance(model, VAE) else 1
    return NLL(model, k=k, seed=seed, batch_size=batch_size, progress=progress).nll(x)
