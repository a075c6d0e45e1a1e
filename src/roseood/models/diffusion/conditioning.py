"""What a class-conditional denoiser's score judges. ROSE needs p(x), and a model of p(x | y) gives it as
the marginal over its C classes (uniform p(y)): −log p(x) ≈ −log (1/C) Σ_y exp(−L_y(x)), each image's
loss taken at every class (C× the cost). A model trained with condition dropout has a null class whose
loss is p(x) itself at 1× the cost (``null``, the default where the denoiser has one, as DiT has);
``label:N`` judges p(x | y = N) at that label (a class of interest)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from roseood.errors import RoseError

MARGINAL = "marginal"
NULL = "null"


class Condition:
    """The conditioning of a denoiser of ``classes`` labels (None: unconditional; ``null``: the label of
    condition dropout, None where it has none) and how it is judged: ``spec`` "marginal", "null" or
    "label:N" (None: "null" where there is one, else "marginal"; an unconditional one takes none)."""

    def __init__(self, classes: int | None, spec: str | None = None, null: int | None = None) -> None:
        if classes is None and spec is not None:  # any spec, the marginal too: there are no classes
            raise RoseError(
                f"condition {spec!r}: the model is unconditional (no class labels); leave the condition "
                "unset: its loss judges p(x) itself"
            )
        spec = spec if spec is not None else (NULL if null is not None else MARGINAL)
        self.classes, self.spec, self.null = classes, spec, null
        self.label: int | None = None
        if classes is None:
            return
        if spec == NULL:
            if null is None:
                raise RoseError("condition 'null': this model has no null class (no condition dropout)")
            self.label = null
        elif spec != MARGINAL:
            kind, _, value = spec.partition(":")
            if kind != "label" or not value.strip().isdigit() or not 0 <= int(value) < classes:
                raise RoseError(
                    f"condition must be 'marginal' or 'label:N' with N in 0..{classes - 1}, got {spec!r}"
                )
            self.label = int(value)

    @property
    def recorded(self) -> bool:
        """Whether the condition is a setting of the loss (a class-conditional model's), recorded."""
        return self.classes is not None

    @property
    def copies(self) -> int:
        """Denoiser rows per (image, pair): C for the marginal over the classes, else 1."""
        return self.classes if self.classes is not None and self.label is None else 1

    def labels(self, rows: int, device: torch.device) -> Tensor | None:
        """The class label of each of ``rows`` denoiser rows, each (image, pair) ``copies`` times in a
        row; None for an unconditional denoiser."""
        if self.classes is None:
            return None
        if self.label is not None:
            return torch.full((rows,), self.label, dtype=torch.long, device=device)
        return torch.arange(self.classes, device=device).repeat(rows // self.classes)

    def fixed(self, rows: int, device: torch.device, what: str) -> Tensor | None:
        """Labels for ``what``, which runs one denoiser path per image (sampling, DiffPath, training):
        the fixed label, None when unconditional; the marginal has no one path, a one-line error."""
        if self.copies > 1:
            raise RoseError(
                f"{what} needs one class label per image; this model judges the marginal over its "
                f"{self.classes} classes: set condition='label:N' (e.g. the null class of condition dropout)"
            )
        return self.labels(rows, device)

    def checked(self, labels: Tensor, n: int, device: torch.device) -> Tensor:
        """``n`` given class labels in 0..C − 1 as a long tensor on ``device`` (what training takes); a
        one-line error for an unconditional model, another count or a label out of range."""
        if self.classes is None:
            raise RoseError("class labels given to an unconditional diffusion model (train it with classes)")
        labels = torch.as_tensor(labels).to(device)
        in_range = bool(((labels >= 0) & (labels < self.classes)).all())
        if labels.shape != (n,) or labels.is_floating_point() or not in_range:
            raise RoseError(f"class labels must be {n} integers in 0..{self.classes - 1}")
        return labels.long()

    def combine(self, losses: Tensor) -> Tensor:
        """(M, copies) per-class losses → (M,): the marginal's −log (1/C) Σ_y exp(−L_y), or the one column."""
        if losses.shape[1] == 1:
            return losses[:, 0]
        return -(torch.logsumexp(-losses, 1) - math.log(losses.shape[1]))

    def describe(self) -> str:
        """The conditioning in words, for the line ``rose check-model`` prints."""
        if self.classes is None:
            return "unconditional: the loss judges p(x)"
        if self.label is None:
            return (
                f"class-conditional ({self.classes} classes): the loss judges p(x) as the marginal over "
                f"them, −log mean_y exp(−L_y) ({self.classes}× the cost; condition='label:N' for one label)"
            )
        if self.label == self.null:
            return (
                f"class-conditional ({self.classes} classes and a null label, {self.null}): the loss judges "
                "p(x) at the null label, as condition dropout trained it"
            )
        return f"class-conditional ({self.classes} classes): the loss judges p(x | y = {self.label})"
