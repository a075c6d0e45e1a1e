"""The model contracts: the narrow protocol every detector needs, and the base of the built-in families.

``RoseModel`` is all a detector asks of a model: an ``nn.Module`` with a per-sample differentiable loss
(``rose_loss``: −log p(x) or a bound), a per-sample NLL score, named layer sets and the shape/kind of one
input. Any module meets it through :func:`roseood.wrap`; ``GenerativeModel`` adds what is saved and
trained (``kind``, ``config``, ``train_loss``) for the families in this package.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import torch
from torch import Tensor, nn

from roseood.contracts import Configured, Described, OrderedLayers
from roseood.errors import RoseError

INPUT_KINDS = ("image", "tensor", "tokens")


@runtime_checkable
class RoseModel(Protocol):
    """What detectors use of a model (besides the ``nn.Module`` methods ``eval``, ``to``, ``state_dict``).

    ``input_kind``: "image" (uint8 or [0, 1] float, (C, H, W)), "tensor" (finite floats) or "tokens"
    (integers); ``input_shape``: the shape of one sample, None for any.
    """

    @property
    def input_kind(self) -> str: ...

    @property
    def input_shape(self) -> tuple[int, ...] | None: ...

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """Per-sample differentiable −log p(x|θ) (or a bound), shape (N,)."""
        ...

    def nll(self, x: Tensor) -> Tensor:
        """Per-sample negative log-likelihood used as a score, shape (N,)."""
        ...

    def rose_layers(self, which: str | None = None) -> list[str]:
        """Module names of a named layer set (the default set when ``which`` is None)."""
        ...

    def layer_sets(self) -> dict[str, list[str]]:
        """Named sets of submodule names ROSE can use; the first key is the default."""
        ...

    # The ``nn.Module`` methods detectors call (every RoseModel is an nn.Module).
    def eval(self) -> Self: ...

    def train(self, mode: bool = True) -> Self: ...

    def to(self, *args: Any, **kwargs: Any) -> Self: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def named_modules(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, nn.Module]]: ...

    def state_dict(self, *args: Any, **kwargs: Any) -> Any: ...


ADAPTER_SET = "adapter"  # the layer set of a model's LoRA adapter, where it has one


def named_layers(model: Any, sets: dict[str, list[str]], which: str | None) -> list[str]:
    """Pick one of ``sets`` by name (the first when ``which`` is None), with a clear error if unknown;
    ``last:N``: the last N layers of ``all`` (else of the first set) in the order the forward pass runs
    them (``forward_order``, where the model has one): the output side, which a backward pass reaches
    first and stops after."""
    if which is not None and which.startswith("last:"):
        every = sets.get("all", next(iter(sets.values())))
        n = which.removeprefix("last:")
        if not n.isdigit() or not 1 <= int(n) <= len(every):
            raise RoseError(f"layer set {which!r}: last:N takes N from 1 to the model's {len(every)} layers")
        ordered = model.forward_order(every) if isinstance(model, OrderedLayers) else every
        kept = set(ordered[-int(n) :])
        return [name for name in every if name in kept]
    key = which or next(iter(sets))
    if key not in sets:
        name = model_name(model)
        if key == ADAPTER_SET:  # a set some models of the family have: why this one has not
            raise RoseError(
                f"layer set 'adapter' takes a LoRA adapter's layers, and this {name} model has none: name "
                "the folder holding one (--model MODEL/ADAPTER, as sd-fmnist-s0/sneaker-lora)"
            )
        raise RoseError(f"unknown layer set {key!r} for {name}; choose from {sorted(sets)}")
    return sets[key]


def model_name(model: Any) -> str:
    """A short description of a model for settings and messages: its family kind or its given name."""
    return str(model.kind if isinstance(model, Described) and model.kind else type(model).__name__)


def model_config(model: Any) -> dict[str, Any]:
    """The model's architecture config when it has one (built-in families and wrapped models)."""
    return model.config() if isinstance(model, Configured) else {}


def input_dims(model: RoseModel) -> int:
    """Number of values in one input (C·H·W for images); 1 when the shape is not declared."""
    return math.prod(model.input_shape or (1,))


class LatentModel(Protocol):
    """A model with an encoder q(z|x) and a decoder: it offers the importance-weighted NLL (IWAE) and
    the parts Likelihood Regret fine-tunes (the paper's VAE is one)."""

    encoder: nn.Module
    decoder: nn.Module
    nz: int

    def iwae_nll(self, x: Tensor, k: int) -> Tensor: ...

    def reconstruction_nll(self, logits: Tensor, x: Tensor) -> Tensor: ...


LATENT_ATTRIBUTES = ("encoder", "decoder", "nz", "iwae_nll", "reconstruction_nll")  # LatentModel's


def is_latent_model(model: object) -> bool:
    """Whether ``model`` offers the IWAE NLL and an encoder to fine-tune (``LatentModel``). Looked up with
    ``hasattr``, not ``isinstance`` on the protocol: from Python 3.12 that looks attributes up statically,
    and an ``nn.Module`` keeps its submodules (``encoder``) in ``_modules``, so no VAE would count."""
    return all(hasattr(model, name) for name in LATENT_ATTRIBUTES)


class GenerativeModel(nn.Module, ABC):
    """A likelihood model on images ``x`` of shape (N, C, H, W) with values in [0, 1].

    Subclasses define the loss whose per-sample gradient ROSE preconditions (``rose_loss``), the
    NLL used as a score and for evaluation (``nll``), the training loss, and named layer sets.
    """

    kind: ClassVar[str]
    input_kind: ClassVar[str] = "image"
    # what ``train_loss`` is: "nll" (nats, reported in bits per dimension too) or the name of another
    # objective, reported per dimension under that name (a DDPM's ε-MSE: "eps_mse")
    # (a class default: a model whose objective depends on its config sets its own)
    train_objective: str = "nll"

    def __init__(self, in_channels: int, image_size: int = 32) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.image_size = image_size

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this architecture."""

    @abstractmethod
    def nll(self, x: Tensor) -> Tensor:
        """Per-sample negative log-likelihood in nats, shape (N,)."""

    @abstractmethod
    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """Per-sample differentiable −log p(x|θ) (or its bound) used for ROSE gradients, shape (N,).

        Deterministic unless ``stochastic`` (sampled latent / dequantisation noise); must couple no two
        samples in eval mode, so that one backward pass of the summed loss yields every sample's gradient.
        """

    @abstractmethod
    def train_loss(self, x: Tensor) -> Tensor:
        """Per-sample stochastic training objective (nats), shape (N,)."""

    @abstractmethod
    def layer_sets(self) -> dict[str, list[str]]:
        """Named sets of submodule names ROSE can use; the first key is the default."""

    def rose_layers(self, which: str | None = None) -> list[str]:
        """Module names of a named layer set (the default set when ``which`` is None)."""
        return named_layers(self, self.layer_sets(), which)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one image, (C, H, W)."""
        return (self.in_channels, self.image_size, self.image_size)

    @property
    def dims(self) -> int:
        """Number of dimensions of one image (C·H·W)."""
        return self.in_channels * self.image_size * self.image_size

    def bits_per_dim(self, nll: Tensor) -> Tensor:
        """Convert per-sample NLL in nats to bits per dimension."""
        return nll / (self.dims * math.log(2.0))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device
