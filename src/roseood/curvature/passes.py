"""One pass of a Fisher fit over batches of images: each batch's per-sample layer gradients go to the layers'
Fishers that still want batches (``Fisher.wants``); the first pass's gradients are kept, where memory
allows, for a later pass over the same images to reuse instead of running the model again."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import Tensor

from roseood.curvature.fisher import Fisher
from roseood.curvature.grads import GradientStore, LayerGrad

Stream = Callable[[Tensor, Callable[[str, LayerGrad], None], set[str]], Tensor]
"""Runs the model on a batch and hands each chosen layer's gradients (name, gradients) to a consumer."""


def fisher_pass(
    fishers: dict[str, Fisher],
    batches: Iterable[Tensor],
    pass_index: int,
    store: GradientStore,
    stream: Stream,
) -> None:
    """Pass ``pass_index`` of ``fishers`` over ``batches`` (``stream`` runs the model on one), ending early
    once no Fisher wants more (every ``EKFAC`` whose Kronecker factors have settled)."""
    for i, batch in enumerate(batches):
        wanted = {n for n, f in fishers.items() if f.wants(pass_index)}
        if not wanted:
            break
        kept = store.kept(i) if pass_index > 0 else None
        if kept is not None:
            for name, g in kept.items():
                fishers[name].update(g, pass_index)
        else:
            keeping = pass_index == 0 and store.open  # kept batches hold every layer, for the next pass

            def update(
                name: str, g: LayerGrad, i: int = i, wanted: set[str] = wanted, keeping: bool = keeping
            ) -> None:
                if name in wanted:
                    fishers[name].update(g, pass_index)
                if keeping and fishers[name].passes > 1:
                    store.keep(i, name, g)

            stream(batch, update, set(fishers) if keeping else wanted)
