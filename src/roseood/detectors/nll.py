"""The plain likelihood baseline: score = negative log-likelihood (higher = more OOD)."""

from __future__ import annotations

import time
from typing import cast

import torch
from torch import Tensor

from roseood.data.tensors import iter_batches
from roseood.detectors.base import Detector, register_detector
from roseood.detectors.inputs import per_image_count, require_model
from roseood.errors import RoseError
from roseood.models.base import LatentModel, RoseModel, is_latent_model
from roseood.progress import LINE_INTERVAL_S, forecast
from roseood.randomness import per_input_seed
from roseood.validation import check_seed

IWAE_SAMPLES = 20  # posterior samples per image a batch is sized for (nll-iwae's k)
IWAE_CHUNK = 256  # samples a VAE decodes at once (VAE.iwae_nll's chunk): the unit a forecast times


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
        self.model: RoseModel = require_model(model, "the NLL score")
        self.k = per_image_count(k, "k", self.method, model)
        if self.k > 1 and not is_latent_model(model):
            raise RoseError("IWAE (k > 1) applies to latent-variable models (VAEs) only; Glow's is exact")
        self.seed = check_seed(seed)

    def _fit(self, x: Tensor) -> None:
        """The likelihood needs no fitting."""

    def nll(self, x: Tensor) -> Tensor:
        """Per-image NLL in nats (no validation; ``x`` float on any device). An IWAE estimate takes fewer
        images per batch as ``k`` grows (at most ``batch_size × IWAE_SAMPLES`` samples), so a large ``k``
        shows its progress image by image instead of one silent batch."""
        self.model.eval()
        out = []
        images = max(1, self.batch_size * IWAE_SAMPLES // self.k)
        if self.progress and self.k > IWAE_CHUNK and len(x):
            self._forecast(x)
        with torch.no_grad(), per_input_seed(self.seed):
            for batch in iter_batches(x, min(self.batch_size, images), "NLL" if self.progress else None):
                b = batch.to(self.device)
                out.append(
                    (
                        cast(LatentModel, self.model).iwae_nll(b, self.k)
                        if is_latent_model(self.model) and self.k > 1
                        else self.model.nll(b)
                    ).cpu()
                )
        return torch.cat(out)

    def _forecast(self, x: Tensor) -> None:
        """State before a long IWAE run what it will take, from one timed chunk of samples of one image: a
        large ``k`` spends minutes on each image before the first progress line (the samples are drawn
        per image, so the timed chunk changes no score)."""
        start = time.perf_counter()
        with torch.no_grad(), per_input_seed(self.seed):
            cast(LatentModel, self.model).iwae_nll(x[:1].to(self.device), IWAE_CHUNK)
        seconds = (time.perf_counter() - start) * len(x) * self.k / IWAE_CHUNK
        if seconds > LINE_INTERVAL_S:
            forecast(f"NLL (IWAE, k = {self.k:,}) of {len(x):,} images", seconds, "from one timed chunk")

    def _score(self, x: Tensor) -> Tensor:
        return self.nll(x)


def model_nll(
    model: RoseModel, x: Tensor, *, k: int, batch_size: int, progress: bool | None, seed: int
) -> Tensor:
    """Per-image NLL in nats on CPU: IWAE with ``k`` samples for a VAE (per image from ``seed``), the
    exact likelihood otherwise."""
    k = k if is_latent_model(model) else 1
    return NLL(model, k=k, seed=seed, batch_size=batch_size, progress=progress).nll(x)


register_detector(NLL, {"nll": {"k": 1}, "nll-iwae": {"k": 20}})
