"""Per-sample gradients of chosen layers for a whole batch from one backward pass.

Forward hooks keep each layer's input and output; ``torch.autograd.grad`` of the summed loss w.r.t. the
outputs gives every ``δ = ∂loss_n/∂y`` at once (samples never mix when the model is in eval mode), and
the layer's handler (:mod:`roseood.curvature.handlers`) turns them into a factored :class:`LayerGrad`.
Layers without a handler take their per-sample gradients from ``torch.func`` (``vmap(grad(...))`` over
the samples, one extra vectorised pass for all such layers together).

A layer may run several times per sample: called again (shared weights, K denoising steps) or once on a
batch expanded inside the loss (K noisy copies of each image in one batch of N·K rows). Its per-sample
gradient is then the exact sum over its calls and copies, ``G_n = Σ_calls Σ_copies Σ_t δ aᵀ``, kept as
one :class:`LayerGrad` whose positions are all of them. The Fishers read it like any other positions:
``diag``, ``dense`` and EKFAC's re-estimated diagonal are exact for it; KFAC's factors average the inputs
over all calls and copies (A = Σ aaᵀ / (calls·copies·T), B = Σ δδᵀ summed over them), the "expand"
approximation of Eschenhagen et al. (NeurIPS 2023) for weight sharing. Which rows of an expanded batch
belong to which sample is found exactly (one more backward pass, on the first such batch); a loss
without one value per input is refused.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Collection, Iterator

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from roseood.curvature.handlers import LayerHandler, attribute_mask, parametrized_mask, resolve
from roseood.curvature.layergrad import FactoredGrad, LayerGrad, join
from roseood.errors import RoseError

__all__ = ["GradientStore", "LayerGrad", "LayerGradients", "full_float32", "supports"]


def supports(module: nn.Module) -> bool:
    """Whether per-sample gradients can be taken for this module (by a registered handler or the
    torch.func fallback)."""
    return resolve(module).usable


@contextlib.contextmanager
def full_float32(device: torch.device) -> Iterator[None]:
    """On CUDA, float32 convolutions and matmuls in full precision (not TF32, cuDNN's default for
    convolutions: its 10-bit mantissa rounds each operand by up to ~5e-4, far above the 1e-4 the scores
    keep otherwise): the gradients, and so the scores, then agree with the CPU's to float32 rounding.
    Elsewhere nothing changes."""
    if device.type != "cuda":
        yield
        return
    settings = (torch.backends.cudnn.conv, torch.backends.cuda.matmul)  # type: ignore[attr-defined]
    before = [s.fp32_precision for s in settings]
    try:
        for s in settings:
            s.fp32_precision = "ieee"
        yield
    finally:
        for s, b in zip(settings, before, strict=True):
            s.fp32_precision = b


class GradientStore:
    """The first pass's layer gradients, batch by batch up to ``budget`` bytes, for later passes over the
    same images (EKFAC's eigenvalue pass) to reuse instead of running the model again. Only valid for a
    deterministic loss, whose recomputed gradients would be the very same numbers."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._kept: list[dict[str, LayerGrad]] = []
        self._used = 0
        self._full = budget <= 0

    @property
    def open(self) -> bool:
        """Whether it still keeps what it is offered (its budget not yet spent)."""
        return not self._full

    def kept(self, index: int) -> dict[str, LayerGrad] | None:
        """Batch ``index``'s kept gradients, by layer; None when that batch was not kept."""
        return self._kept[index] if index < len(self._kept) else None

    def keep(self, index: int, name: str, g: LayerGrad) -> None:
        """Offer layer ``name``'s gradients of batch ``index`` during the first pass: kept while the budget
        lasts (batches whole and in order; a batch that outgrows it is dropped and nothing more is kept)."""
        if self._full:
            return
        if index == len(self._kept):
            self._kept.append({})
        size = g.nbytes()
        self._full = self._used + size > self.budget
        if self._full:
            self._used -= sum(k.nbytes() for k in self._kept.pop().values())
            return
        self._kept[index][name] = g
        self._used += size


class _Call(nn.Module):
    """Holds the model as a submodule so ``functional_call`` can swap its parameters under ``fn``."""

    fn: Callable[..., Tensor]

    def __init__(self, model: nn.Module, fn: Callable[..., Tensor]) -> None:
        super().__init__()
        self.model = model
        self.__dict__["fn"] = fn  # never a submodule, even when fn is the model itself

    def forward(self, *args: Tensor) -> Tensor:
        return self.fn(*args)


def _weight_coords(
    module: nn.Module, effective_weight: Callable[[nn.Module], Tensor]
) -> Callable[[Tensor], Tensor]:
    """Chain rule from ∂loss/∂W to the module's own parameters (e.g. an LU factorisation of W)."""
    wrapper = _Call(module, lambda: effective_weight(module))
    params = {k: v.detach() for k, v in wrapper.named_parameters() if v.requires_grad}
    jac = torch.func.jacrev(lambda p: torch.func.functional_call(wrapper, p, ()))(params)
    full = torch.cat([j.reshape(j.shape[0] * j.shape[1], -1) for j in jac.values()], 1)
    # Entries that never reach W (e.g. the masked triangles of an LU factor) are not free parameters.
    jacobian = full[:, full.abs().sum(0) > 0]

    def coords(g: Tensor) -> Tensor:
        return g.flatten(1) @ jacobian

    return coords


def check_loss_rows(loss: Tensor, n: int) -> None:
    """A per-sample loss has exactly one value per input: anything else (e.g. N·K values for N images
    whose batch was expanded inside the loss) is an error, never N·K gradients or scores."""
    if loss.ndim != 1 or loss.shape[0] != n:
        raise RoseError(
            f"the loss returned shape {tuple(loss.shape)} for {n} inputs; it must return one value per "
            f"input, shape ({n},) (sum the rows of expanded copies per input)"
        )


def _diagonal(g: Tensor) -> LayerGrad:
    """(N, P) per-sample gradients as P independent 1×1 blocks: every Fisher is then (at most) diagonal,
    except ``dense``, which is exact."""
    return FactoredGrad(g.new_ones(g.shape[0], 1, g.shape[1]), g[:, None], groups=g.shape[1])


class LayerGradients:
    """Collects per-sample gradients of ``loss_fn(x)`` (shape (N,)) w.r.t. the named layers.

    ``coords="native"`` reports gradients in each module's own parameters (for an LU-factorised 1×1
    convolution: lower, upper, log-scale), ``"weight"`` in the effective weight matrix.
    """

    def __init__(self, model: nn.Module, layer_names: list[str], coords: str = "native") -> None:
        modules = dict(model.named_modules())
        unknown = [n for n in layer_names if n not in modules]
        if unknown:
            raise RoseError(f"unknown layers {unknown}; the model has e.g. {list(modules)[1:6]}")
        if not layer_names:
            raise RoseError("no layers chosen for ROSE")
        if coords not in ("native", "weight"):
            raise RoseError(f"unknown gradient coordinates {coords!r}; use 'native' or 'weight'")
        self.model = model
        self.names = list(layer_names)
        self.modules = [modules[n] for n in self.names]
        resolved = [resolve(m) for m in self.modules]
        bad = [f"{n} ({r.note})" for n, r in zip(self.names, resolved, strict=True) if not r.usable]
        if bad:
            raise RoseError(f"per-sample gradients cannot be taken for layers {', '.join(bad)}")
        self.handlers: list[LayerHandler | None] = [r.handler for r in resolved]
        # whether a layer's own parameters are not its weight (an LU-factorised 1×1 convolution): then the
        # gradients differ by ``coords``
        self.reparameterised = any(h is not None and h.effective_weight is not None for h in self.handlers)
        for m, h in zip(self.modules, self.handlers, strict=True):
            if h is None:
                warnings.warn(
                    f"{type(m).__name__} layers use the torch.func per-sample fallback: correct but slower "
                    "(one more vectorised forward and backward pass) and a diagonal KFAC/EKFAC",
                    stacklevel=2,
                )
        # Jacobians of reparameterised weights are fixed while the model is: compute them once.
        self._coords = {
            i: _weight_coords(m, h.effective_weight)
            for i, (m, h) in enumerate(zip(self.modules, self.handlers, strict=True))
            if coords == "native" and h is not None and h.effective_weight is not None
        }
        self._orders: dict[tuple[int, int, int, int], Tensor | None] = {}  # see _owners
        self._masks = {
            i: parametrized_mask(m)
            for i, (m, h) in enumerate(zip(self.modules, self.handlers, strict=True))
            if h is not None and parametrize.is_parametrized(m)
        }

    def _mask(self, i: int) -> Tensor | None:
        masks = [m for m in (attribute_mask(self.modules[i]), self._masks.get(i)) if m is not None]
        return masks[0] * masks[1] if len(masks) == 2 else (masks[0].detach() if masks else None)

    def _hooked(
        self,
        loss_fn: Callable[[Tensor], Tensor],
        x: Tensor,
        layers: list[int],
        consume: Callable[[int, LayerGrad], None],
    ) -> Tensor:
        """One forward and backward pass with hooks on the layers that have handlers, handing each
        layer's gradients to ``consume`` as soon as the backward pass has reached all its calls (then
        dropped: one layer's per-sample gradients are alive at a time, whatever the number of layers);
        returns the per-sample loss of that pass. A layer may run several times (shared weights) and on a
        batch expanded inside the loss (rows a multiple of the samples: ``_probe``). Each hooked output
        ``y`` is passed on as ``y + z`` with a zero scalar leaf ``z`` (the same values); differentiating
        w.r.t. the ``z`` runs the backward pass through every layer while tensor hooks read each
        ``∂loss/∂y`` in flight, so no output gradient outlives its layer."""
        n = x.shape[0]
        run = _Pass(self, n, layers, consume)
        handles = [self.modules[i].register_forward_hook(run.hook(i)) for i in layers]
        try:
            with torch.enable_grad():
                loss = loss_fn(x)
                check_loss_rows(loss, n)
                missing = [self.names[i] for i in layers if not run.shapes[i]]
                if missing:
                    raise RoseError(f"layers {missing} were not used by the model's forward pass")
                keys = [(i, c, s[0], n) for i in layers for c, s in enumerate(run.shapes[i])]
                self._probe(loss, run, [k for k in keys if k[2] != n and k not in self._orders])
                torch.autograd.grad(loss.sum(), run.zeros, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        for i in layers:  # calls whose output the loss never reached: a zero gradient
            for c, shape in enumerate(run.shapes[i]):
                if run.inputs[i][c] is not None:
                    run.layer_grad(i, c, x.new_zeros(shape))
        return loss.detach()

    def _probe(self, loss: Tensor, run: _Pass, probe: list[tuple[int, int, int, int]]) -> None:
        """Learn which sample owns each row of the expanded calls ``probe`` (new batch shapes): one
        backward pass of the first sample's loss alone, its hooks recording the rows it reaches."""
        if not probe:
            return
        first = torch.zeros_like(loss)
        first[0] = 1.0
        with run.probing():
            torch.autograd.grad(loss, run.zeros, first, retain_graph=True, allow_unused=True)
        self._orders |= self._owners(probe, run.reached, loss.device)

    def _owners(
        self,
        expanded: list[tuple[int, int, int, int]],
        reached: dict[tuple[int, int, int, int], Tensor],
        device: torch.device,
    ) -> dict[tuple[int, int, int, int], Tensor | None]:
        """For each (layer, call, rows, samples) whose rows are not the samples: the row order grouping
        each sample's rows, None when they already are (cached: the loss expands every batch of that size
        the same way).

        Read off one more backward pass of the first sample's loss alone (``reached``: the rows it
        reaches): gradients are exactly zero on the rows it does not reach (no rounding: autograd
        propagates exact zeros), so its rows tell whether the batch was expanded image-major
        (``repeat_interleave``) or copy-major (``repeat``). A layer whose rows follow neither (e.g. mix
        samples) is a ``RoseError``."""
        owners: dict[tuple[int, int, int, int], Tensor | None] = {}
        for key in expanded:
            rows, n = key[2], key[3]
            hit = reached.get(key)
            layouts = [torch.arange(rows) // max(rows // n, 1), torch.arange(rows) % n]
            fits = [
                lay
                for lay in layouts
                if rows % n == 0 and (hit is None or not bool(hit.cpu()[lay != 0].any()))
            ]
            if not fits:
                raise RoseError(
                    f"layer {self.names[key[0]]} runs on {rows} rows for {n} samples, neither as K copies "
                    "per sample (x.repeat_interleave(K, 0)) nor as K copies of the batch (x.repeat(K, ...)): "
                    "per-sample gradients cannot be read off its outputs"
                )
            owners[key] = None if fits[0] is layouts[0] else torch.argsort(fits[0], stable=True).to(device)
        return owners

    def _vmapped(
        self, loss_fn: Callable[[Tensor], Tensor], x: Tensor, layers: list[int]
    ) -> dict[int, LayerGrad]:
        """Per-sample gradients of the fallback layers' parameters: ``vmap(grad(loss of one sample))``."""
        wrapper = _Call(self.model, loss_fn)
        keys = {
            i: [
                f"model.{self.names[i]}.{k}" for k, p in self.modules[i].named_parameters() if p.requires_grad
            ]
            for i in layers
        }
        params = {k: wrapper.get_parameter(k).detach() for ks in keys.values() for k in ks}

        def one(p: dict[str, Tensor], xi: Tensor) -> Tensor:
            return torch.func.functional_call(wrapper, p, (xi[None],)).sum()

        try:
            grads = torch.func.vmap(torch.func.grad(one), in_dims=(None, 0), randomness="different")(
                params, x
            )
        except RuntimeError as e:
            names = [self.names[i] for i in layers]
            raise RoseError(
                f"torch.func could not take per-sample gradients of {names}: {str(e).splitlines()[0]}"
            ) from e
        return {
            i: _diagonal(torch.cat([grads[k].flatten(1) for k in ks], 1).detach()) for i, ks in keys.items()
        }

    def __call__(self, loss_fn: Callable[[Tensor], Tensor], x: Tensor) -> dict[str, LayerGrad]:
        return self.with_loss(loss_fn, x)[0]

    def with_loss(
        self, loss_fn: Callable[[Tensor], Tensor], x: Tensor
    ) -> tuple[dict[str, LayerGrad], Tensor]:
        """The layers' per-sample gradients and the per-sample loss (N,) they are gradients of."""
        result: dict[str, LayerGrad] = {}
        loss = self.stream(loss_fn, x, result.__setitem__)
        return {n: result[n] for n in self.names}, loss

    def stream(
        self,
        loss_fn: Callable[[Tensor], Tensor],
        x: Tensor,
        consume: Callable[[str, LayerGrad], None],
        only: Collection[str] | None = None,
    ) -> Tensor:
        """Hand each layer's per-sample gradients to ``consume(name, grads)`` as soon as they are formed,
        keeping none of them (the memory of one layer at a time); returns the per-sample loss (N,).
        ``only``: just these layers (the others are not hooked)."""
        chosen = [i for i, n in enumerate(self.names) if only is None or n in only]
        fast = [i for i in chosen if self.handlers[i] is not None]
        slow = [i for i in chosen if self.handlers[i] is None]
        with full_float32(x.device):
            if fast:
                loss = self._hooked(loss_fn, x, fast, lambda i, g: consume(self.names[i], g))
            else:
                with torch.no_grad():
                    loss = loss_fn(x)
            if slow:
                for i, g in self._vmapped(loss_fn, x, slow).items():
                    consume(self.names[i], g)
        return loss


class _Pass:
    """One hooked forward and backward pass of ``LayerGradients._hooked``: each layer call's input and
    output shape, the zero leaves its outputs pass through, the gradients that have arrived per call, and
    (while ``probing``) the rows the first sample's loss reaches instead of gradients."""

    def __init__(
        self, grads: LayerGradients, n: int, layers: list[int], consume: Callable[[int, LayerGrad], None]
    ) -> None:
        self.grads, self.n, self.consume = grads, n, consume
        self.zeros: list[Tensor] = []
        self.inputs: dict[int, list[Tensor | None]] = {i: [] for i in layers}
        self.shapes: dict[int, list[torch.Size]] = {i: [] for i in layers}
        self.arrived: dict[int, dict[int, LayerGrad]] = {i: {} for i in layers}
        self.reached: dict[tuple[int, int, int, int], Tensor] = {}  # rows the first sample's loss reaches
        self._probing = False

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Inside the block the output-gradient hooks record the rows reached, not gradients."""
        self._probing = True
        try:
            yield
        finally:
            self._probing = False

    def layer_grad(self, i: int, c: int, gy: Tensor) -> None:
        """Call ``c`` of layer ``i`` has its output gradient: its per-sample gradients, handed on once
        every call of the layer has arrived."""
        g = self.grads
        handler, inp = g.handlers[i], self.inputs[i][c]
        assert handler is not None and inp is not None
        grad = handler.grad(g.modules[i], inp, gy, g._mask(i))
        try:
            self.arrived[i][c] = grad.per_sample(self.n, g._orders.get((i, c, gy.shape[0], self.n)))
        except ValueError as e:
            raise RoseError(f"layer {g.names[i]}: {e}") from None
        self.inputs[i][c] = None
        if len(self.arrived[i]) == len(self.shapes[i]):
            done = join([self.arrived[i].pop(k) for k in sorted(self.arrived[i])])
            done.coords = g._coords.get(i)
            self.consume(i, done)

    def grad_hook(self, i: int, c: int) -> Callable[[Tensor], None]:
        def read(gy: Tensor) -> None:
            if self._probing:
                self.reached[(i, c, gy.shape[0], self.n)] = gy.detach().flatten(1).ne(0).any(1)
            else:
                self.layer_grad(i, c, gy.detach())

        return read

    def hook(self, i: int) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], Tensor]:
        """Layer ``i``'s forward hook: keep its input, pass its output on through a zero leaf whose
        gradient hook reads ``∂loss/∂y``."""

        def store(_m: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> Tensor:
            self.inputs[i].append(inp[0].detach())
            self.shapes[i].append(out.shape)
            self.zeros.append(out.new_zeros((), requires_grad=True))
            passed = out + self.zeros[-1]
            passed.register_hook(self.grad_hook(i, len(self.shapes[i]) - 1))
            return passed

        return store
