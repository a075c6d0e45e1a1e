"""``wrap``: make any ``nn.Module`` with a per-sample loss usable by every detector, without subclassing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from roseood.errors import RoseError
from roseood.models.base import INPUT_KINDS, named_layers

LossFn = Callable[[Tensor], Tensor]


class WrappedModel(nn.Module):
    """A user module seen through the :class:`~roseood.models.base.RoseModel` protocol.

    The wrapper shares the module's parameter, buffer and child registries, so layer names and
    ``state_dict`` keys are the module's own (a plain ``module.state_dict()`` file loads into it) and
    moving or switching the wrapper to eval mode acts on the module. ``loss_fn(x)`` is the per-sample
    −log p(x) (or a bound) ROSE differentiates and, by maximum likelihood, the training loss; ``nll``
    (default: ``loss_fn`` without gradients) is the likelihood score. ``layers``: module names for ROSE
    (a list, or named sets ``{"encoder": [...], ...}`` whose first is the default; None: every layer with
    per-sample gradient support); ``input_shape``: one sample's shape, checked on every input;
    ``input_kind``: "image" (uint8 or [0, 1] floats, (C, H, W)), "tensor" (floats) or "tokens".
    """

    kind = "wrapped"
    train_objective = "nll"  # its training loss is its NLL

    def __init__(
        self,
        module: nn.Module,
        loss_fn: LossFn,
        *,
        layers: Sequence[str] | dict[str, list[str]] | None = None,
        nll: LossFn | None = None,
        input_shape: Sequence[int] | None = None,
        input_kind: str = "image",
        name: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise RoseError(f"wrap() needs a torch.nn.Module, got {type(module).__name__}")
        if not callable(loss_fn) or (nll is not None and not callable(nll)):
            raise RoseError("loss_fn (and nll, if given) must be callables mapping a batch to shape (N,)")
        if input_kind not in INPUT_KINDS:
            raise RoseError(f"unknown input_kind {input_kind!r}; choose from {', '.join(INPUT_KINDS)}")
        shape = tuple(int(s) for s in input_shape) if input_shape is not None else None
        if shape is not None and (not shape or min(shape) < 1):
            raise RoseError(f"input_shape must be positive sizes of one sample, got {input_shape}")
        if input_kind == "image" and shape is not None and len(shape) != 3:
            raise RoseError(f"image models take (C, H, W) inputs; got input_shape {shape}")
        self._parameters = module._parameters
        self._buffers = module._buffers
        self._modules = module._modules
        self._non_persistent_buffers_set = module._non_persistent_buffers_set
        self.module_ref = (module,)  # a tuple, so the module is not registered twice
        self.fns = (loss_fn, nll)  # a tuple: a callable nn.Module must not join the module's registry
        self.input_kind = input_kind
        self._input_shape = shape
        self.name = name or type(module).__name__
        self.factory: str | None = None  # "file.py:factory" when built by load_factory (stored on save)
        modules = dict(self.named_modules())
        sets = layers if isinstance(layers, dict) else {"default": list(layers or [])}
        if layers is None:
            from roseood.curvature import resolve  # layers with a fast handler, not the torch.func fallback

            sets = {"default": [n for n, m in modules.items() if n and resolve(m).handler is not None]}
        unknown = sorted({n for names in sets.values() for n in names} - set(modules))
        if unknown:
            raise RoseError(f"{self.name} has no layers {unknown}; it has e.g. {list(modules)[1:6]}")
        self.sets = {k: list(v) for k, v in sets.items()}

    @property
    def module(self) -> nn.Module:
        """The wrapped module."""
        return self.module_ref[0]

    @property
    def input_shape(self) -> tuple[int, ...] | None:
        return self._input_shape

    @property
    def device(self) -> torch.device:
        return next(self.parameters(), torch.empty(0)).device

    def train(self, mode: bool = True) -> WrappedModel:
        super().train(mode)
        self.module.training = mode  # the module's own flag: its children are already ours
        return self

    def config(self) -> dict[str, Any]:
        """What describes the wrapped model in settings and checkpoints."""
        return {"name": self.name, "input_kind": self.input_kind, "input_shape": self._input_shape}

    def _per_sample(self, fn: LossFn, x: Tensor, what: str) -> Tensor:
        out = fn(x)
        if not isinstance(out, Tensor) or tuple(out.shape) != (x.shape[0],):
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise RoseError(
                f"{self.name}: {what} must return one value per sample, shape ({x.shape[0]},), got {got}"
            )
        return out

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """``loss_fn(x)``, checked to be per-sample (``stochastic`` is the loss function's own business)."""
        return self._per_sample(self.fns[0], x, "loss_fn")

    def train_loss(self, x: Tensor) -> Tensor:
        """Maximum likelihood: the per-sample loss itself."""
        return self.rose_loss(x)

    def nll(self, x: Tensor) -> Tensor:
        """The likelihood score: ``nll(x)`` if given, else ``loss_fn(x)``, without gradients."""
        with torch.no_grad():
            return self._per_sample(self.fns[1] or self.fns[0], x, "nll")

    def layer_sets(self) -> dict[str, list[str]]:
        return self.sets

    def rose_layers(self, which: str | None = None) -> list[str]:
        return named_layers(self, self.sets, which)

    def forward(self, x: Tensor) -> Tensor:
        return self.module(x)


wrap = WrappedModel
"""``roseood.wrap(module, loss_fn, *, layers, nll, input_shape, input_kind, name)``: make ``module`` usable
by ROSE and every likelihood detector (the ``WrappedModel`` constructor, under the name users call)."""
