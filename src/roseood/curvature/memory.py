"""A memory budget for per-sample-gradient work: how many images a batch may hold so that fitting or scoring
stays within it, worked out before the work starts from a one-image probe of the model (the budget
itself: ``roseood.memory.budget``).

The budget bounds the process's peak memory (resident memory on the CPU, PyTorch's allocations on a
GPU): what is already in use (the model, PyTorch itself), the Fishers' own tensors, and per image of a
batch the activations the backward pass keeps plus the largest layer's per-sample gradients (layers are
handled one at a time, see :meth:`~roseood.curvature.LayerGradients.stream`). Default: what is in use
now plus half of what the machine (or the GPU) has available; ``set_memory`` (the CLI's ``--memory``)
sets it for the process, a detector's ``memory=`` for itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from roseood.errors import RoseError
from roseood.memory import format_size


@contextmanager
def saved_bytes(exclude: Collection[int] = ()) -> Iterator[Callable[[], int]]:
    """Count the bytes autograd saves for the backward pass inside the block (each storage once; not
    the storages whose ``data_ptr`` is in ``exclude``, e.g. the weights): ``with saved_bytes() as total:
    ...; total()``."""
    seen: dict[tuple[torch.device, int], int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            seen[(t.device, storage.data_ptr())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield lambda: sum(seen.values())


@dataclass(frozen=True)
class MemoryPlan:
    """Images per batch under a budget, and the peak memory that gives.

    ``fixed``: bytes held whatever the batch (the process now, the Fishers, kept gradients);
    ``per_image``: bytes each image of a batch adds (its activations and the largest layer's per-sample
    gradients)."""

    params: int
    layers: int
    rows: int  # rows of the model's loss per image
    fixed: int
    per_image: int
    wanted: int  # images per batch without a budget
    budget: int | None
    what: str = "ROSE"

    @property
    def images(self) -> int:
        """Images per batch: as many as wanted, fewer if the budget says so (at least one)."""
        if self.budget is None:
            return self.wanted
        return max(1, min(self.wanted, (self.budget - self.fixed) // max(self.per_image, 1)))

    @property
    def peak(self) -> int:
        return self.fixed + self.images * self.per_image

    @property
    def fits(self) -> bool:
        return self.budget is None or self.peak <= self.budget

    def line(self) -> str:
        """The plan in one line, e.g. ``ROSE: 35.7 M parameters in 220 layers (one at a time), 1 image
        (8 rows) per batch, ≈ 3.1 GiB peak (budget 4.0 GiB)``."""
        rows = f" ({self.images * self.rows} rows)" if self.rows > 1 else ""
        images = f"{self.images} image{'s' if self.images != 1 else ''}{rows} per batch"
        limit = f"budget {format_size(self.budget)}" if self.budget is not None else "no budget"
        count = f"{self.params / 1e6:.1f} M" if self.params >= 100_000 else f"{self.params:,}"  # LoRA: 9,984
        return (
            f"{self.what}: {count} parameters in {self.layers} layers (one at a time), "
            f"{images}, ≈ {format_size(self.peak)} peak ({limit})"
        )

    def check(self) -> None:
        """A ``RoseError`` in one line when even one image per batch exceeds the budget."""
        if self.fits:
            return
        assert self.budget is not None
        raise RoseError(
            f"{self.what} needs ≈ {format_size(self.peak)} for one image per batch "
            f"({format_size(self.fixed)} held, {format_size(self.per_image)} per image) but the memory "
            f"budget is {format_size(self.budget)}: raise --memory (memory=), choose fewer layers "
            "or rose-diag, or use a GPU"
        )
