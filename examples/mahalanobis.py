"""A detector of your own in one file: the Mahalanobis distance of a VAE's latent mean to the
in-distribution latents. Importing this module registers it, so ``make_detector("mahalanobis", vae)``,
``Detector.load`` and ``evaluate(..., EvalSpec(methods=["mahalanobis"]))`` know it."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from roseood.detectors import Detector, register_detector
from roseood.detectors.inputs import require_model
from roseood.errors import RoseError
from roseood.models.base import RoseModel
from roseood.validation import check_float


class Mahalanobis(Detector):
    """Score ``(μ(x) − m)ᵀ (Σ + λI)⁻¹ (μ(x) − m)``: ``μ`` the encoder's latent mean, ``m`` and ``Σ`` their
    mean and covariance on in-distribution images, ``λ = shrinkage``."""

    method = "mahalanobis"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        shrinkage: float = 1e-3,
        batch_size: int = 64,
        progress: bool | None = None,
    ) -> None:
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.encoder = getattr(require_model(model, "the Mahalanobis detector"), "encoder", None)
        if not callable(self.encoder):
            raise RoseError("the Mahalanobis detector needs a model with an encoder (a VAE)")
        self.shrinkage = check_float(shrinkage, "shrinkage", low=0.0)
        self.mean_: Tensor | None = None
        self.precision_: Tensor | None = None

    def _latents(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat(
                [
                    self.encoder(b.to(self.device))[0].flatten(1).double().cpu()
                    for b in x.split(self.batch_size)
                ]
            )

    def _fit(self, x: Tensor) -> None:
        z = self._latents(x)
        self.mean_ = z.mean(0)
        cov = torch.cov(z.T) + self.shrinkage * torch.eye(z.shape[1], dtype=z.dtype)
        self.precision_ = torch.linalg.inv(cov)

    def _score(self, x: Tensor) -> Tensor:
        assert self.mean_ is not None and self.precision_ is not None
        d = self._latents(x) - self.mean_
        return ((d @ self.precision_) * d).sum(1)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean_, "precision": self.precision_}

    def load_state(self, state: dict[str, Any]) -> None:
        self.mean_, self.precision_ = state["mean"], state["precision"]


register_detector(Mahalanobis)
