"""One pass of a Fisher fit over batches of images: each batch's per-sample layer gradients go to the layers'
Fishers that still want batches (``Fisher.wants``); the first pass's gradients are kept, where memory
allows, for a later pass over the same images to reuse instead of running the model again. ``JointFit``:
the Fishers of several kinds fitted on the same gradients in one set of passes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from torch import Tensor

from roseood.curvature.fisher import FISHERS, FactorCache, Fisher
from roseood.curvature.grads import GradientStore, LayerGrad

Stream = Callable[[Tensor, Callable[[str, LayerGrad], None], set[str]], Tensor]
"""Runs the model on a batch and hands each chosen layer's gradients (name, gradients) to a consumer."""


class Joint:
    """The Fishers of one layer fitted on the same gradients in one set of passes. Each is fed in the last
    of the passes it needs (a one-pass kind in the last pass), so that the longest one's first pass may
    stop early (EKFAC's settled factors) as it would alone; a kind that takes another's first pass
    (``takes``: its Fisher → the one it takes from) is fed from its second pass on."""

    def __init__(self, fitted: Sequence[Fisher], takes: Mapping[Fisher, Fisher]) -> None:
        self.fishers = [*fitted, *takes]
        self.takes = dict(takes)
        self.passes = max(f.passes for f in fitted)
        self._offset = {f: self.passes - f.passes for f in fitted}  # the first joint pass it is fed in
        self._offset |= {f: self._offset[source] for f, source in self.takes.items()}

    def _own(self, pass_index: int) -> list[tuple[Fisher, int]]:
        """The members fed in this pass, each with its own index of it (a taker's first pass is taken)."""
        own = ((f, pass_index - self._offset[f]) for f in self.fishers)
        return [(f, p) for f, p in own if p >= (1 if f in self.takes else 0)]

    def wants(self, pass_index: int) -> bool:
        return any(f.wants(p) for f, p in self._own(pass_index))

    def update(self, g: LayerGrad, pass_index: int) -> None:
        for f, p in self._own(pass_index):
            if f.wants(p):
                f.update(g, p)

    def end_pass(self, pass_index: int, factors: FactorCache) -> None:
        for f, p in self._own(pass_index):
            f.end_pass(p, factors)
        for f, source in self.takes.items():
            if pass_index == self._offset[f] and not f.take_first_pass(source):
                raise RuntimeError(f"a {f.name} Fisher could not take the first pass of a {source.name}")

    def reduce_sums(self, pass_index: int, reduce: Callable[[Tensor], Tensor]) -> None:
        for f, p in self._own(pass_index):
            f.reduce_sums(p, reduce)

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> None:
        for f in self.fishers:
            f.map_tensors(fn)


class JointFit:
    """The Fishers of several fits that differ only in each layer's kind (``kinds``: one mapping from layer
    to kind per fit), on the same gradients in one set of passes (``Joint``): per layer each kind once, a
    kind that can take another's first pass (``Fisher.takes_from``: compact EKFAC EKFAC's, KFAC and
    KFAC-Tikhonov each other's) taking it instead of summing the same factors again. Each fit is the one
    its kind makes alone on the same batches."""

    def __init__(self, kinds: Sequence[Mapping[str, str]], make: Callable[[str], Fisher]) -> None:
        self.kinds = kinds
        self.layers: dict[str, Joint] = {}
        self._made: dict[str, dict[str, Fisher]] = {}  # layer → kind → its Fisher
        for name in kinds[0]:
            wanted = list(dict.fromkeys(k[name] for k in kinds))
            fitted = [k for k in wanted if not set(FISHERS.get(k).takes_from) & set(wanted)]
            sources: dict[str, str] = {}  # a kind taken → the fitted kind it takes from
            for k in (k for k in wanted if k not in fitted):
                source = next((s for s in fitted if s in FISHERS.get(k).takes_from), None)
                if source is None:  # what it takes from is taken itself (KFAC and KFAC-Tikhonov): fit it
                    fitted.append(k)
                else:
                    sources[k] = source
            made = self._made[name] = {k: make(k) for k in wanted}
            takes = {made[k]: made[s] for k, s in sources.items()}
            self.layers[name] = Joint([made[k] for k in fitted], takes)

    @property
    def passes(self) -> int:
        return max(j.passes for j in self.layers.values())

    def fits(self) -> list[dict[str, Fisher]]:
        """After the last pass: each fit's Fisher per layer (a kind two fits share is one Fisher)."""
        return [{name: self._made[name][k[name]] for name in k} for k in self.kinds]


def fisher_pass(
    fishers: Mapping[str, Joint],
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
