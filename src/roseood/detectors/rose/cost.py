"""What a ROSE fit and its scoring take here, timed before the work on one batch of the user's images with
the detector's own code (``ROSE.stage_seconds``): a forecast from the loss's forward and backward alone
missed the Fisher's passes and the layer statistics (a DDPM's EKFAC fit ran about twice its forecast)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageSeconds:
    """Seconds per image of each of a ROSE's Fisher passes (``passes``), the images its first pass takes
    at most (``first_pass``: EKFAC's Kronecker factors settle; None: all), the seconds the passes' ends
    take whatever the images (``fixed``: the sums reduced, the eigendecompositions), seconds per image of
    its layer scores (``scoring``: the statistics images and every scored image), and the images timed."""

    passes: tuple[float, ...]
    first_pass: int | None
    fixed: float
    scoring: float
    images: int

    def fit(self, fisher_images: int, held_out: int) -> float:
        """Seconds of a fit on ``fisher_images`` and ``held_out`` statistics images."""
        first = min(fisher_images, self.first_pass or fisher_images)
        passes = sum(s * (first if i == 0 else fisher_images) for i, s in enumerate(self.passes))
        return passes + self.fixed + held_out * self.scoring

    def basis(self) -> str:
        """What the forecast rests on, for its line."""
        passes = " + ".join(_seconds(s) for s in self.passes)
        settled = f" (the first on {self.first_pass} at most)" if self.first_pass is not None else ""
        return (
            f"timed on {self.images} images: the Fisher's passes {passes} per image{settled} + "
            f"{_seconds(self.fixed)}, the layer scores {_seconds(self.scoring)} per image"
        )


def _seconds(s: float) -> str:
    """``0.5`` as "500 ms", ``9.31`` as "9.31 s"."""
    return f"{s * 1000:.3g} ms" if s < 1 else f"{s:.3g} s"
