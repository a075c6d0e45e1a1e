"""Likelihood Ratio (Ren et al. 2019), the paper's LRatio baseline: the main model's likelihood corrected
by a background model trained on perturbed in-distribution images (see ``roseood.data.perturbations``;
the paper's Fashion-MNIST VAE background used random pixels with μ = 0.3).

Ren et al.'s statistic LLR(x) = log p_main(x) − log p_bg(x) is high for in-distribution images, so the OOD
score is its negative: ``NLL_main(x) − NLL_bg(x)`` (nats). VAEs use the IWAE estimate with ``k`` = 20
samples as the paper; Glow its exact likelihood.

The background model is a second model, so it is not part of ``params()``. A saved detector records its
fingerprint next to the main model's, and loading needs it again:
``LikelihoodRatio.load(path, model, background=bg)`` (or ``set_background(bg)`` on a detector obtained
from the generic ``Detector.load``, which refuses to score until it has one).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from roseood.detectors.base import Detector, register_detector
from roseood.detectors.inputs import per_image_count, require_images, require_model
from roseood.detectors.nll import model_nll
from roseood.errors import CheckpointError, RoseError, shown
from roseood.integrity import FINGERPRINT, field
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint
from roseood.validation import check_seed


def _describe(shape: tuple[int, ...] | None) -> str:
    """``1-channel 32×32`` for a (C, H, W) image shape."""
    return f"{shape[0]}-channel {shape[1]}×{shape[2]}" if shape and len(shape) == 3 else str(shape)


class LikelihoodRatio(Detector):
    """OOD score ``NLL_main − NLL_background`` (higher = more OOD); ``k``: IWAE samples for VAEs, drawn
    per image from ``seed`` (see ``NLL``)."""

    method = "lratio"
    extra_models = ("background",)

    def __init__(
        self,
        model: RoseModel | None,
        *,
        background: RoseModel | None = None,
        k: int = 20,
        seed: int = 0,
        batch_size: int = 64,
        progress: bool | None = None,
    ) -> None:
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.model: RoseModel = require_model(model, "the likelihood ratio")
        require_images(model, self.method)
        self.k = per_image_count(k, "k", self.method, model)
        self.seed = check_seed(seed)
        self.background: RoseModel | None = None
        self._background_fingerprint: str | None = None
        if background is not None:
            self.set_background(background)

    def set_background(self, background: RoseModel) -> None:
        """Attach the background model; after ``load`` it must be the one the detector was saved with."""
        if not isinstance(background, RoseModel):
            raise RoseError(f"the background must be a generative model, got {type(background).__name__}")
        if background is self.model:
            raise RoseError("the background model must be a different model than the main one")
        shape, main = background.input_shape, self.model.input_shape
        if shape != main:
            raise RoseError(
                f"background model takes {_describe(shape)} images, the main model {_describe(main)}"
            )
        expected = self._background_fingerprint
        if expected is not None and model_fingerprint(background) != expected:
            raise CheckpointError(
                f"this detector was saved with background model {expected}, "
                f"but the given one is {model_fingerprint(background)}"
            )
        self.background = background

    def _require_background(self) -> RoseModel:
        if self.background is None:
            raise RoseError(
                "the likelihood-ratio detector has no background model: pass background= when "
                "constructing or loading it (LikelihoodRatio.load(path, model, background=...))"
            )
        return self.background

    def state(self) -> dict[str, Any]:
        return {"background_fingerprint": model_fingerprint(self._require_background())}

    def load_state(self, state: dict[str, Any]) -> None:
        fp = field(state, "background_fingerprint", str, "state.")
        if not FINGERPRINT.fullmatch(fp):
            raise CheckpointError(f"field 'state.background_fingerprint': {shown(fp)} is not a fingerprint")
        self._background_fingerprint = fp
        if self.background is not None:
            self.set_background(self.background)

    def _fit(self, x: Tensor) -> None:
        """Both models are trained beforehand; fitting only checks that the background is there."""
        self._require_background()

    def _score(self, x: Tensor) -> Tensor:
        background = self._require_background()
        opts: dict[str, Any] = {"k": self.k, "batch_size": self.batch_size, "progress": self.progress}
        opts["seed"] = self.seed
        return model_nll(self.model, x, **opts) - model_nll(background, x, **opts)


register_detector(LikelihoodRatio)
