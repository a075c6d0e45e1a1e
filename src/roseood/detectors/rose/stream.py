"""ROSE's per-layer gradient stream: the chosen layers' per-sample gradients of the model's loss, handed
over one layer at a time, in batches planned to fit the memory budget from a one-image probe."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property

import torch
from torch import Tensor

from roseood.contracts import RowsModel, rows_per_input
from roseood.curvature import FISHERS, LayerGrad, LayerGradients, LayerShape
from roseood.curvature.memory import MemoryPlan, saved_bytes
from roseood.data.tensors import iter_batches
from roseood.detectors.rose.fitted import FittedFishers
from roseood.memory import budget, in_use
from roseood.models.base import RoseModel
from roseood.progress import note
from roseood.randomness import per_input_seed


class LayerStream:
    """The per-sample gradients of ``model``'s loss (its rows: ``rows`` as ROSE's setting; ``stochastic``
    and ``seed`` as ROSE's) w.r.t. ``layers``, in ``fisher``'s coordinates; the batches planned within
    ``memory`` (``roseood.memory.budget``). The gradient machinery is built on first use, the probe made
    once per device."""

    def __init__(
        self,
        model: RoseModel,
        layers: list[str],
        *,
        fisher: str,
        rows: str,
        stochastic: bool,
        seed: int,
        memory: int | str | None,
    ) -> None:
        self.model, self.layers, self.fisher, self.rows = model, layers, fisher, rows
        self.stochastic, self.seed, self.memory = stochastic, seed, memory
        self._probed: dict[torch.device, tuple[dict[str, LayerShape], int]] = {}
        self._stated: set[int] = set()  # the images per batch stated so far

    @cached_property
    def grads(self) -> LayerGradients:
        """The chosen layers' per-sample gradients (handlers, Jacobians), built on first use."""
        assert isinstance(self.model, torch.nn.Module)  # ROSE refuses other models
        return LayerGradients(self.model, self.layers, coords=FISHERS.get(self.fisher).coords)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are: the batches are moved there."""
        return next(self.model.parameters(), torch.empty(0)).device

    @property
    def rows_per_image(self) -> int:
        """Rows per image of the model's loss (1 for a model that runs each image once)."""
        return rows_per_input(self.model)

    def images_per_batch(self, batch_size: int) -> int:
        """Images per batch: ``batch_size`` rows of the loss over the rows each image becomes (≥ 1)."""
        return max(1, batch_size // self.rows_per_image)

    def run(
        self,
        x: Tensor,
        consume: Callable[[str, LayerGrad], None],
        only: set[str] | None = None,
        rows: str | None = None,
    ) -> Tensor:
        """Hand each chosen layer's per-sample gradients (one layer at a time) to ``consume``; returns
        the per-sample loss they differentiate: per image, or per (image, pair) row, image-major, when
        ``rows`` (default: the stream's) is "each" or "bands"."""
        self.model.eval()
        x = x.to(self.device)
        with per_input_seed(self.seed):
            if (rows or self.rows) != "sum":
                assert isinstance(self.model, RowsModel)  # rows other than "sum" are refused otherwise
                rows_in = x.repeat_interleave(self.rows_per_image, 0)
                return self.grads.stream(self.model.row_loss, rows_in, consume, only)
            loss = lambda b: self.model.rose_loss(b, stochastic=self.stochastic)  # noqa: E731
            return self.grads.stream(loss, x, consume, only)

    def probe(self, x: Tensor) -> tuple[dict[str, LayerShape], int]:
        """The layers' shapes and the bytes one image adds to a batch (the activations the backward pass
        keeps, the largest layer's per-sample gradients and their products), from one image; measured once
        per device, without moving any random number generator."""
        if self.device not in self._probed:
            shapes: dict[str, LayerShape] = {}
            largest = [0]

            def measure(name: str, g: LayerGrad) -> None:
                shapes[name] = LayerShape.of(g)
                largest[0] = max(largest[0], g.peak_bytes())

            held = (*self.grads.model.parameters(), *self.grads.model.buffers())
            weights = {t.untyped_storage().data_ptr() for t in held}
            devices = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), saved_bytes(weights) as saved:
                self.run(x[:1], measure)
            self._probed[self.device] = shapes, int(1.25 * (saved() + largest[0]))
        return self._probed[self.device]

    def plan(
        self,
        x: Tensor,
        kinds: Mapping[str, str],
        *,
        batch_size: int,
        fishers: FittedFishers | None = None,
        progress: bool = False,
        also: Sequence[Mapping[str, str]] = (),
    ) -> MemoryPlan:
        """Images per batch (at most ``batch_size`` rows) within the memory budget for these layers'
        Fishers of ``kinds`` (less what ``fishers`` of them hold already) and those of ``also`` fitted
        beside them (each kind of a layer once), stated once on the progress output; refused in one line
        if even one image does not fit, before any batch runs."""
        limit = budget(self.device, self.memory)
        shapes, per_image = self.probe(x)
        held = fishers.held_bytes if fishers is not None else lambda name, kind: 0
        work = sum(max(0, FISHERS.get(kinds[n]).work_bytes(shapes[n]) - held(n, kinds[n])) for n in kinds)
        work += sum(
            FISHERS.get(k).work_bytes(shapes[n])
            for n in kinds
            for k in {other[n] for other in also} - {kinds[n]}
        )
        beside = sorted({k for other in also for k in other.values()} - set(kinds.values()))
        plan = MemoryPlan(
            params=sum(s.params for s in shapes.values()),
            layers=len(shapes),
            rows=self.rows_per_image,
            fixed=in_use(self.device) + work,
            per_image=per_image,
            wanted=self.images_per_batch(batch_size),
            budget=limit,
            what=f"ROSE-{self.fisher}" + (f" (with {', '.join(beside)} beside)" if beside else ""),
        )
        plan.check()
        if progress and plan.images not in self._stated:  # the process's memory moves the peak a little
            self._stated.add(plan.images)
            note(plan.line())
        return plan

    def scores(
        self, x: Tensor, fishers: FittedFishers, *, batch_size: int, progress: bool, desc: str
    ) -> tuple[Tensor, Tensor]:
        """Raw layer scores ``gᵀ F⁻¹ g`` of ``fishers`` (N, columns: each layer's, per timestep with rows
        "each", each timestep's sum over the layers with "bands") and the loss of each image's rows (N, K;
        K = 1 with rows "sum"), both float64 on the CPU; batches as ``plan`` says."""
        plan = self.plan(x, fishers.kinds, batch_size=batch_size, fishers=fishers, progress=progress)
        k = self.rows_per_image
        scores, losses = [], []
        for batch in iter_batches(x, plan.images, desc if progress else None):
            layer: dict[str, Tensor] = {}

            def quad(name: str, g: LayerGrad, layer: dict[str, Tensor] = layer) -> None:
                layer[name] = fishers[name].quad(g)

            loss = self.run(batch, quad)
            raw = torch.stack([layer[n] for n in self.layers], 1)
            if self.rows == "bands":  # (N·K, L) image-major rows → (N, K), each row's sum over layers
                raw = raw.sum(1, keepdim=True)
            if self.rows != "sum":  # (N·K, C) image-major rows → (N, C·K), column-major
                raw = raw.view(len(batch), k, -1).transpose(1, 2).flatten(1)
            scores.append(raw)
            losses.append(loss.double().view(len(batch), -1))
        return torch.cat(scores).cpu(), torch.cat(losses).cpu()
