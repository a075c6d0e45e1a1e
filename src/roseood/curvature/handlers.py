"""Layer handlers: how each module type's per-sample gradient is read off one batched backward pass.

A handler turns a module, its input and the gradient w.r.t. its output into a :class:`LayerGrad`.
``register_layer(module_type, handler)`` adds a type (subclasses inherit it unless they override
``forward``); :func:`resolve` picks the handler for a module, or the ``torch.func`` fallback for any
other module with parameters. Masked weights — a layer's own ``weight_mask()``
(``roseood.contracts.MaskedWeight``), :func:`declare_mask`, a masking ``torch.nn.utils.parametrize``
parametrization, or a third-party module's ``mask`` buffer of the weight's shape used as ``weight * mask``
— reach the handlers as one weight-shaped mask.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm
from torch.nn.utils import parametrize

from roseood.contracts import InvertibleMap, MaskedWeight
from roseood.curvature.layergrad import FactoredGrad, LayerGrad
from roseood.curvature.rowsgrad import RowsGrad
from roseood.errors import RoseError
from roseood.registry import Registry

GradFn = Callable[[nn.Module, Tensor, Tensor, Tensor | None], LayerGrad]


def _usable(_module: nn.Module) -> str | None:
    return None


@dataclass(frozen=True)
class LayerHandler:
    """How to take one module type's per-sample gradients.

    ``grad(module, input, output_grad, weight_mask)`` returns the batch's :class:`LayerGrad`;
    ``check(module)`` says why a particular instance cannot be handled (None when it can);
    ``effective_weight(module)``, for reparameterised weights, gives the weight matrix as a function of
    the module's own parameters (its Jacobian maps gradients to those parameters); ``fishers`` names the
    Fisher structure for the docs and the layer check.
    """

    name: str
    grad: GradFn
    check: Callable[[nn.Module], str | None] = _usable
    effective_weight: Callable[[nn.Module], Tensor] | None = None
    fishers: str = "all (Kronecker factors per group)"


_REGISTRY: Registry[type[nn.Module] | str, LayerHandler] = Registry("layer handler")


def register_layer(module_type: type[nn.Module] | str, handler: LayerHandler | GradFn) -> None:
    """Use ``handler`` (a :class:`LayerHandler`, or just its ``grad`` function) for ``module_type``: a
    class, or its ``"module.QualName"`` so that the class need not be imported."""
    if not isinstance(handler, LayerHandler):
        handler = LayerHandler(getattr(handler, "__name__", "custom").lstrip("_"), handler)
    _REGISTRY.register(module_type, handler, replace=True)


def declare_mask(module: nn.Module, mask: Tensor) -> None:
    """Declare that only the nonzero entries of ``mask`` (the weight's shape) are parameters of
    ``module`` and that its forward uses ``weight * mask``; ROSE then ignores the other entries."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, Tensor) or weight.shape != mask.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match the weight of {module}")
    module.register_buffer("rose_mask", mask.to(weight), persistent=False)


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _weight_shaped(module: nn.Module, name: str) -> Tensor | None:
    m, w = getattr(module, name, None), getattr(module, "weight", None)
    return m if isinstance(m, Tensor) and isinstance(w, Tensor) and m.shape == w.shape else None


def attribute_mask(module: nn.Module) -> Tensor | None:
    """The layer's own mask (``MaskedWeight``), else a declared one (``declare_mask``), else a third-party
    module's ``mask`` buffer/attribute of the weight's shape (forward: weight·mask; zuko's MaskedLinear)."""
    if isinstance(module, MaskedWeight):
        mask, weight = module.weight_mask(), getattr(module, "weight", None)
        if not isinstance(weight, Tensor) or mask.shape != weight.shape:
            raise RoseError(f"{type(module).__name__}.weight_mask() must have its weight's shape")
        return mask
    return (
        _weight_shaped(module, "rose_mask")
        if hasattr(module, "rose_mask")
        else _weight_shaped(module, "mask")
    )


@dataclass(frozen=True)
class Resolution:
    """How a module's per-sample gradients are taken: a handler, the torch.func fallback, or not at all."""

    handler: LayerHandler | None  # None while usable: the torch.func fallback
    usable: bool
    note: str = ""

    @property
    def label(self) -> str:
        if self.handler is not None:
            return self.handler.name
        return FALLBACK if self.usable else "-"


FALLBACK = "fallback (slow)"


def resolve(module: nn.Module) -> Resolution:
    """The registered handler for this module (its type or a base whose forward it keeps), else the
    torch.func fallback when it has parameters, else unusable; with the reason."""
    if not any(p.requires_grad for p in module.parameters()):
        return Resolution(None, False, "no trainable parameters")
    cls, note = type(module), "no handler registered for its type"
    for base in cls.__mro__:
        handler = _REGISTRY.find(base) or _REGISTRY.find(_type_name(base))
        if handler is None:
            continue
        overrides = getattr(cls, "forward", None) is not getattr(base, "forward", None)
        if base is not cls and overrides and attribute_mask(module) is None:
            note = f"{cls.__name__} overrides {base.__name__}.forward"
            break
        if parametrize.is_parametrized(module) and parametrized_mask(module) is None:
            note = "its parametrization is not an elementwise mask of the weight"
            break
        reason = handler.check(module)
        return Resolution(None, False, reason) if reason else Resolution(handler, True)
    return Resolution(None, True, f"{note}; per-sample gradients by torch.func (correct, slower)")


def parametrized_mask(module: nn.Module) -> Tensor | None:
    """For a weight parametrized as ``original ⊙ M`` (and nothing else parametrized), M; else None."""
    parametrizations = cast(nn.ModuleDict, module.parametrizations)
    if set(parametrizations.keys()) != {"weight"}:
        return None
    plist = cast(parametrize.ParametrizationList, parametrizations["weight"])
    original: Tensor = plist.original

    def apply(w: Tensor) -> Tensor:
        for p in plist:
            w = p(w)
        return w

    with torch.no_grad():
        m = apply(torch.ones_like(original))
        probe = torch.randn_like(original)
        ok = m.shape == original.shape and torch.allclose(apply(probe), probe * m, rtol=1e-5, atol=1e-6)
    return m.detach() if ok else None


def own_parameters(module: nn.Module) -> dict[str, Tensor]:
    """Parameters that belong to the module itself (incl. parametrized originals), by local name."""
    params = dict(module.named_parameters(recurse=False))
    if parametrize.is_parametrized(module):
        params |= dict(cast(nn.ModuleDict, module.parametrizations).named_parameters())
    return {k: v for k, v in params.items() if v.requires_grad}


# --- shared pieces -------------------------------------------------------------------------------------


def _append(a: Tensor, groups: int, value: float) -> Tensor:
    """Append one constant feature to each group's block of the last dim."""
    blocks = a.view(*a.shape[:-1], groups, -1)
    return torch.cat([blocks, blocks.new_full((*blocks.shape[:-1], 1), value)], -1).flatten(-2)


def _with_bias(a: Tensor, has_bias: bool, groups: int = 1) -> Tensor:
    """Append a constant 1 to each group's inputs (the bias column of each block)."""
    return _append(a, groups, 1.0) if has_bias else a


def _matrix_mask(mask: Tensor | None, has_bias: bool) -> Tensor | None:
    """A weight-shaped mask in the (rows, columns [+ bias]) layout of the gradient matrix."""
    if mask is None:
        return None
    m = mask.flatten(1).float()
    return torch.cat([m, m.new_ones(m.shape[0], 1)], 1) if has_bias else m


def _positions(t: Tensor) -> Tensor:
    """(N, C, *spatial) → (N, positions, C)."""
    return t.flatten(2).transpose(1, 2)


def _unfold(
    x: Tensor,
    kernel: tuple[int, ...],
    dilation: tuple[int, ...],
    padding: tuple[int, ...],
    stride: tuple[int, ...],
) -> Tensor:
    """Patches of a (N, C, *spatial) tensor as (N, C·prod(kernel), positions), for any number of dims."""
    if x.ndim == 4:
        return F.unfold(x, kernel, dilation, padding, stride)
    x = F.pad(x, [p for p in reversed(padding) for _ in range(2)])
    out = [
        (s - d * (k - 1) - 1) // st + 1
        for s, k, d, st in zip(x.shape[2:], kernel, dilation, stride, strict=True)
    ]
    taps = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        index: tuple[slice, ...] = tuple(
            slice(o * d, o * d + st * (n - 1) + 1, st)
            for o, d, st, n in zip(offsets, dilation, stride, out, strict=True)
        )
        taps.append(x[(slice(None), slice(None), *index)])
    return torch.stack(taps, 2).flatten(3).flatten(1, 2)


# --- handlers ------------------------------------------------------------------------------------------


def _linear(m: nn.Module, x: Tensor, gy: Tensor, mask: Tensor | None) -> LayerGrad:
    # Any leading dims after the batch are positions; a (stack, out, in) weight (zuko) is grouped.
    weight, bias = m.weight, getattr(m, "bias", None)
    assert isinstance(weight, Tensor)
    groups = weight.shape[0] if weight.ndim == 3 else 1
    n, has_bias = x.shape[0], bias is not None
    a = _with_bias(x.reshape(n, -1, groups * weight.shape[-1]), has_bias, groups)
    return FactoredGrad(
        a,
        gy.reshape(n, -1, groups * weight.shape[-2]),
        groups=groups,
        mask=_matrix_mask(mask.flatten(0, -2) if mask is not None and groups > 1 else mask, has_bias),
    )


class ConvGrad(RowsGrad):
    """A convolution's gradients: the matrices from one grouped convolution (each sample a group, its
    rows the batch), without the unfolded patches (``prod(kernel)`` times the input's size) that the
    factors need."""

    def __init__(self, m: nn.modules.conv._ConvNd, x: Tensor, gy: Tensor, mask: Tensor | None) -> None:
        padding = m.padding
        if m.padding_mode != "zeros" or isinstance(padding, str):
            mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
            x = F.pad(x, m._reversed_padding_repeated_twice, mode=mode)
            padding = (0,) * (x.ndim - 2)
        self.conv, self.padding, self.has_bias = m, tuple(padding), m.bias is not None
        super().__init__(x, gy, m.groups, _matrix_mask(mask, self.has_bias))

    def _inputs(self) -> Tensor:
        m = self.conv
        patches = _unfold(self.x, m.kernel_size, m.dilation, self.padding, m.stride).transpose(1, 2)
        return _with_bias(patches, self.has_bias, self.groups)

    def _outputs(self) -> Tensor:
        return _positions(self.gy)

    @property
    def width_in(self) -> int:
        return self.x.shape[1] * math.prod(self.conv.kernel_size) + self.groups * self.has_bias

    def matrix(self) -> Tensor:
        m, n = self.conv, self.samples

        def rows_first(t: Tensor) -> Tensor:  # (n·rows, C, …) image-major → (rows, n·C, …)
            return self._by_sample(t).transpose(0, 1).flatten(1, 2)

        c_out = self.width_out
        shape = (n * c_out, self.x.shape[1] // self.groups, *m.kernel_size)
        weight = torch.ops.aten.convolution_backward(
            rows_first(self.gy),
            rows_first(self.x),
            self.gy.new_empty(1).expand(shape),
            None,
            m.stride,
            self.padding,
            m.dilation,
            False,
            [0] * (self.x.ndim - 2),
            self.groups * n,
            (False, True, False),
        )[1].reshape(n, c_out, -1)
        if self.has_bias:
            bias = self._by_sample(self.gy).flatten(3).sum((1, 3))
            weight = torch.cat([weight, bias[..., None]], 2)
        return weight * self.mask if self.mask is not None else weight


def _conv(m: nn.Module, x: Tensor, gy: Tensor, mask: Tensor | None) -> LayerGrad:
    assert isinstance(m, nn.modules.conv._ConvNd)
    return ConvGrad(m, x, gy, mask)


def _conv_transpose(m: nn.Module, x: Tensor, gy: Tensor, mask: Tensor | None) -> LayerGrad:
    # A transposed conv is the adjoint of a conv with the same weight (Cin, Cout/g, *k): its weight
    # gradient correlates the input with the unfolded output gradient. The bias becomes one extra row per
    # group, fed by extra "positions" (one per output pixel) that put ∂loss/∂y at kernel offset 0.
    assert isinstance(m, nn.modules.conv._ConvTransposeNd)
    padding = cast(tuple[int, ...], m.padding)  # a conv-transpose takes no "same" padding
    patches = _unfold(gy, m.kernel_size, m.dilation, padding, m.stride).transpose(1, 2)
    d = _positions(x)
    if patches.shape[1] != d.shape[1]:
        raise RoseError(f"layer {m}: {patches.shape[1]} output patches for {d.shape[1]} input positions")
    groups, taps = m.groups, math.prod(m.kernel_size)
    if m.bias is None:
        return FactoredGrad(patches, d, groups=groups, mask=_matrix_mask(mask, False))
    c_in, out = d.shape[2], _positions(gy)
    d_b = _append(out.new_zeros(*out.shape[:2], c_in), groups, 1.0)
    a_b = out.new_zeros(*out.shape, taps)
    a_b[..., 0] = out
    a = torch.cat([patches, a_b.flatten(2)], 1)
    rows = torch.zeros(groups, c_in // groups + 1, patches.shape[2] // groups, device=x.device)
    rows[:, :-1] = 1.0 if mask is None else mask.flatten(1).float().view(groups, c_in // groups, -1)
    rows[:, -1, ::taps] = 1.0
    return FactoredGrad(
        a, torch.cat([_append(d, groups, 0.0), d_b], 1), groups=groups, mask=rows.flatten(0, 1)
    )


def _embedding(m: nn.Module, x: Tensor, gy: Tensor, mask: Tensor | None) -> LayerGrad:
    # Row v of the gradient is the sum of ∂loss/∂y over the tokens equal to v: the "input" is the
    # one-hot token, so KFAC's factor over the vocabulary is diagonal (token frequencies).
    assert isinstance(m, nn.Embedding)
    n = x.shape[0]
    onehot = F.one_hot(x.reshape(n, -1), m.num_embeddings).to(gy.dtype)
    if m.scale_grad_by_freq:  # each sample's own token counts, as a backward on that sample alone
        onehot = onehot / onehot.sum(1, keepdim=True).clamp_min(1)
    if m.padding_idx is not None:
        mask = torch.ones_like(m.weight) if mask is None else mask.clone()
        mask[m.padding_idx] = 0
    return FactoredGrad(gy.reshape(n, -1, m.embedding_dim), onehot, mask=_matrix_mask(mask, False))


def _norm_check(m: nn.Module) -> str | None:
    if getattr(m, "weight", None) is None:
        return "no affine parameters"
    batch_stats = isinstance(m, _BatchNorm) and (m.training or m.running_mean is None)
    if batch_stats:
        return "normalises with batch statistics (samples mix): put the model in eval mode"
    return None


def _normalised(m: nn.Module, x: Tensor) -> Tensor:
    """The norm layer's output before its affine map."""
    if isinstance(m, nn.LayerNorm):
        return F.layer_norm(x, m.normalized_shape, eps=m.eps)
    if isinstance(m, nn.RMSNorm):
        return F.rms_norm(x, m.normalized_shape, eps=m.eps)
    if isinstance(m, nn.GroupNorm):
        return F.group_norm(x, m.num_groups, eps=m.eps)
    assert isinstance(m, _BatchNorm | _InstanceNorm)
    use_batch = isinstance(m, _InstanceNorm) and (m.training or not m.track_running_stats)
    return (
        F.batch_norm(x, m.running_mean, m.running_var, None, None, False, 0.0, m.eps)
        if not use_batch
        else (F.instance_norm(x, eps=m.eps))
    )


class NormGrad(RowsGrad):
    """A norm's affine map ``y = x̂·w + b`` per channel: one block per channel with inputs (x̂, 1) and a
    (1, 2) weight, so every Fisher is block-diagonal over channels (diag: exactly diagonal). The matrices
    are the per-channel sums ``Σ δ·x̂`` and ``Σ δ``; ``x`` holds x̂, channels last: (rows, T, C)."""

    def __init__(self, xhat: Tensor, gy: Tensor, bias: bool, mask: Tensor | None) -> None:
        super().__init__(xhat, gy, xhat.shape[2], mask)
        self.has_bias = bias

    def _inputs(self) -> Tensor:
        return _with_bias(self.x, self.has_bias, self.groups)

    def _outputs(self) -> Tensor:
        return self.gy

    @property
    def width_out(self) -> int:
        return self.gy.shape[2]

    @property
    def width_in(self) -> int:
        return self.groups * (1 + self.has_bias)

    def matrix(self) -> Tensor:
        def per_sample(t: Tensor) -> Tensor:  # (rows, T, C) → (samples, C)
            return self._by_sample(t.sum(1)).sum(1)

        sums = [per_sample(self.gy * self.x), *([per_sample(self.gy)] if self.has_bias else [])]
        g = torch.stack(sums, 2)
        return g * self.mask if self.mask is not None else g


def _norm_affine(m: nn.Module, x: Tensor, gy: Tensor, mask: Tensor | None) -> LayerGrad:
    xhat = _normalised(m, x)
    if isinstance(m, nn.LayerNorm | nn.RMSNorm):
        channels = math.prod(m.normalized_shape)
        xhat, gy = xhat.reshape(x.shape[0], -1, channels), gy.reshape(x.shape[0], -1, channels)
    else:
        xhat, gy = _positions(xhat), _positions(gy)
    bias = getattr(m, "bias", None) is not None
    return NormGrad(xhat, gy, bias, _matrix_mask(mask.reshape(-1, 1) if mask is not None else None, bias))


def _invertible_conv(m: nn.Module, x: Tensor, gy: Tensor, mask: Tensor | None) -> LayerGrad:
    # y = W x at every pixel, and log p gains +H·W·log|det W|: its gradient −H·W·W⁻ᵀ (for the NLL)
    # is the same for every sample.
    w = _weight_matrix(m).detach()
    hw = x.shape[2] * x.shape[3]
    const = -hw * torch.linalg.inv(w).T
    return FactoredGrad(_positions(x), _positions(gy), const)


LINEAR = LayerHandler("linear", _linear)
CONV = LayerHandler("conv", _conv)
CONV_TRANSPOSE = LayerHandler("conv-transpose", _conv_transpose)
EMBEDDING = LayerHandler("embedding", _embedding, fishers="all (KFAC: diagonal vocabulary factor)")
NORM_AFFINE = LayerHandler(
    "norm-affine", _norm_affine, _norm_check, fishers="all, block-diagonal per channel"
)


def _weight_matrix(m: nn.Module) -> Tensor:
    """The matrix of an ``InvertibleMap`` (``_invertible_check`` has refused any other module)."""
    assert isinstance(m, InvertibleMap)
    return m.weight_matrix()


def _invertible_check(m: nn.Module) -> str | None:
    return None if isinstance(m, InvertibleMap) else f"{type(m).__name__} has no weight_matrix()"


INVERTIBLE_1X1 = LayerHandler(
    "invertible-1x1", _invertible_conv, _invertible_check, effective_weight=_weight_matrix
)
"""For an invertible 1×1 convolution whose forward is ``conv2d(x, weight_matrix())`` and whose flow
adds ``H·W·log|det W|``: ``register_layer(MyInvConv, INVERTIBLE_1X1)`` (Glow's InvConv2d does)."""

_BUILT_IN: dict[LayerHandler, tuple[type[nn.Module] | str, ...]] = {
    LINEAR: (nn.Linear, "zuko.nn.Linear"),
    CONV: (nn.Conv1d, nn.Conv2d, nn.Conv3d),
    CONV_TRANSPOSE: (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d),
    EMBEDDING: (nn.Embedding,),
    NORM_AFFINE: (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, _BatchNorm, _InstanceNorm),
}
for _handler, _types in _BUILT_IN.items():
    for _cls in _types:
        register_layer(_cls, _handler)
