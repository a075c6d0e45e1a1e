"""What a ROSE fit and its scoring take here, timed before the work on one batch of the user's images with
the detector's own code: a forecast from the loss's forward and backward alone missed the Fisher's passes
and the layer statistics (a DDPM's EKFAC fit ran about twice its forecast)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

from torch import Tensor

from roseood.detectors.rose.detector import ROSE


@dataclass(frozen=True)
class StageSeconds:
    """Seconds per image of a ROSE's Fisher passes (``fisher``, all passes together) and of its layer
    scores (``scoring``: the statistics images and every scored image), the seconds its passes' ends
    take whatever the images (``fixed``: the sums reduced, the eigendecompositions), and the images
    they were timed on."""

    fisher: float
    fixed: float
    scoring: float
    images: int

    def fit(self, fisher_images: int, held_out: int) -> float:
        """Seconds of a fit on ``fisher_images`` and ``held_out`` statistics images."""
        return fisher_images * self.fisher + self.fixed + held_out * self.scoring

    def basis(self) -> str:
        """What the forecast rests on, for its line."""
        ms = lambda s: f"{s * 1000:.3g} ms"  # noqa: E731
        return (
            f"timed on {self.images} images: the Fisher {ms(self.fisher)} per image + {self.fixed:.2g} s, "
            f"the layer scores {ms(self.scoring)} per image"
        )


def stage_seconds(det: ROSE, images: Tensor) -> StageSeconds:
    """Time each stage of ``det``'s fit on one of its batches of ``images``: an unfitted copy fits its
    Fishers there (each pass's batches timed apart from its end) and computes their layer scores and
    extra columns, as its statistics and scoring do; ``det`` itself is left as it was."""
    probe = ROSE(det.model, **det.get_params(), progress=False)
    x = probe._check(images)[: probe.images_per_batch]
    with warnings.catch_warnings():  # a fit on one batch may be warned about; the real fit is not this one
        warnings.simplefilter("ignore")
        probe.fit_fisher(x)
        start = time.perf_counter()
        _, rows = probe._scores_and_loss(x)
        probe.extra_features(x, rows.sum(1), rows)
        scoring = time.perf_counter() - start
    batches = sum(seconds for seconds, _ in probe.fisher_seconds_)
    fixed = sum(seconds for _, seconds in probe.fisher_seconds_)
    return StageSeconds(batches / len(x), fixed, scoring / len(x), len(x))
