"""Input Complexity (Serrà et al. 2020), the paper's IC(png) and IC(jp2) baselines.

``S(x) = −log₂ p(x) − L(x)``: the model's NLL in bits minus the length in bits of the image compressed by
a generic lossless compressor, which stands in for a universal "background" model. Higher S = more OOD
(the model finds the image much less likely than its raw complexity explains).

Unit note: the authors' code (Likelihood-Regret's ``test_inputcomplexity.py``, used by the ROSE paper)
subtracts L in *bits* from the NLL in *nats*, which over-weights the compressor by a factor ln 2 relative
to the NLL. We follow Serrà et al.'s definition and use bits for both, so the paper's IC AUROCs may not be
reproduced exactly.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from roseood.detectors.base import Detector, register_detector
from roseood.detectors.compression import CODECS, compressed_bits, to_uint8
from roseood.detectors.inputs import per_image_count, require_images, require_model
from roseood.detectors.nll import model_nll
from roseood.models.base import RoseModel
from roseood.validation import check_choice, check_seed


class InputComplexity(Detector):
    """Input Complexity score in bits. ``compressor``: "png" or "jp2"; ``k``: IWAE samples (VAE only),
    drawn per image from ``seed`` (see ``NLL``)."""

    method = "ic"

    def __init__(
        self,
        model: RoseModel | None,
        *,
        compressor: str = "png",
        k: int = 20,
        seed: int = 0,
        batch_size: int = 64,
        progress: bool | None = None,
    ) -> None:
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.model: RoseModel = require_model(model, "Input Complexity")
        require_images(model, self.method)
        self.compressor = check_choice(compressor, CODECS, "compressor")
        self.k = per_image_count(k, "k", self.method, model)
        self.seed = check_seed(seed)

    def _fit(self, x: Tensor) -> None:
        """Nothing to learn: the model is trained and the compressor fixed."""

    def complexity(self, x: Tensor) -> Tensor:
        """L(x): compressed length of every image in bits (float64)."""
        return torch.from_numpy(compressed_bits(to_uint8(x), self.compressor))

    def _score(self, x: Tensor) -> Tensor:
        nll = model_nll(
            self.model, x, k=self.k, batch_size=self.batch_size, progress=self.progress, seed=self.seed
        )
        return nll.double() / math.log(2.0) - self.complexity(x)


register_detector(InputComplexity, {f"ic-{codec}": {"compressor": codec} for codec in ("png", "jp2")})
