"""Per-sample gradients of chosen layers for a whole batch from one backward pass.

For a linear map ``y_t = W a_t`` applied at positions t (the patches of a convolution), the gradient of
sample n's loss is ``G_n = Σ_t δ_{n,t} a_{n,t}ᵀ`` with ``δ = ∂loss_n/∂y``. Forward hooks keep ``a`` and
the layer outputs; ``torch.autograd.grad`` of the summed loss w.r.t. those outputs gives every ``δ`` at
once (samples never mix when the model is in eval mode). Gradients stay in this factored form, which is
what the Kronecker-factored Fishers need and is far cheaper than materialising ``G_n`` for wide layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from roseood.errors import RoseError


@dataclass
class LayerGrad:
    """One layer's per-sample gradients for a batch: ``G_n = d_nᵀ a_n + const`` of shape (Dout, Din)."""

    a: Tensor  # (N, T, Din) inputs at each position (a trailing 1 for the bias)
    d: Tensor  # (N, T, Dout) gradients w.r.t. the outputs at the same positions
    const: Tensor | None = None  # (Dout, Din) gradient shared by every sample (e.g. a log-determinant)
    coords: Callable[[Tensor], Tensor] | None = None  # maps (N, Dout, Din) to (N, P) parameter coordinates
    g: Tensor | None = None  # the (N, Dout, Din) matrices when already formed

    @property
    def n(self) -> int:
        return self.a.shape[0]

    @property
    def _rank_one(self) -> bool:
        return self.g is None and self.const is None and self.a.shape[1] == 1

    def matrix(self) -> Tensor:
        """Per-sample gradient matrices (N, Dout, Din)."""
        if self.g is not None:
            return self.g
        g = torch.einsum("nto,nti->noi", self.d, self.a)
        return g + self.const if self.const is not None else g

    def flat(self) -> Tensor:
        """Per-sample gradients in the layer's parameter coordinates, (N, P)."""
        g = self.matrix()
        return self.coords(g) if self.coords is not None else g.flatten(1)

    def rotated(self, u_out: Tensor, u_in: Tensor) -> LayerGrad:
        """The gradients ``U_outᵀ G_n U_in``, rotating the factors or the matrices, whichever is cheaper."""
        t, d_in, d_out = self.a.shape[1], self.a.shape[2], self.d.shape[2]
        factors_first = t * (d_in * d_in + d_out * d_out)
        matrix_first = t * d_out * d_in + d_out * d_in * (d_in + d_out)
        if self.g is None and factors_first <= matrix_first:
            const = u_out.T @ self.const @ u_in if self.const is not None else None
            return LayerGrad(self.a @ u_in, self.d @ u_out, const)
        return LayerGrad(self.a, self.d, g=u_out.T @ self.matrix() @ u_in)

    def square_sum(self) -> Tensor:
        """``Σ_n G_n ⊙ G_n`` as float64 (Dout, Din); rank-one gradients never form the matrices."""
        if self._rank_one:
            return ((self.d[:, 0] ** 2).T @ self.a[:, 0] ** 2).double()
        return self.matrix().pow(2).sum(0).double()

    def weighted_square(self, w: Tensor) -> Tensor:
        """``Σ_ij w_ij G_n,ij²`` per sample, (N,) float64, for a (Dout, Din) weight ``w``."""
        w = w.to(self.a.dtype)
        if self._rank_one:
            return ((self.d[:, 0] ** 2 @ w) * self.a[:, 0] ** 2).sum(1).double()
        return (self.matrix().pow(2).flatten(1) @ w.flatten()).double()


def _with_bias(a: Tensor, has_bias: bool) -> Tensor:
    return torch.cat([a, a.new_ones(*a.shape[:-1], 1)], -1) if has_bias else a


def _linear(m: nn.Linear, x: Tensor, gy: Tensor) -> LayerGrad:
    return LayerGrad(_with_bias(x.flatten(1)[:, None], m.bias is not None), gy.flatten(1)[:, None])


def _conv(m: nn.Conv2d, x: Tensor, gy: Tensor) -> LayerGrad:
    if m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str):
        raise RoseError(f"per-sample gradients need groups=1, zero, numeric padding (layer {m})")
    a = F.unfold(x, m.kernel_size, m.dilation, m.padding, m.stride).transpose(1, 2)
    return LayerGrad(_with_bias(a, m.bias is not None), gy.flatten(2).transpose(1, 2))


def _conv_transpose(m: nn.ConvTranspose2d, x: Tensor, gy: Tensor) -> LayerGrad:
    # A transposed conv is the adjoint of a conv with the same weight (Cin, Cout, k, k): its weight
    # gradient is the correlation of the input with the unfolded output gradient.
    if m.groups != 1 or any(m.output_padding) or m.bias is not None:
        raise RoseError(f"per-sample gradients need groups=1, no output padding and no bias (layer {m})")
    patches = F.unfold(gy, m.kernel_size, m.dilation, m.padding, m.stride)  # type: ignore[arg-type]
    patches = patches.transpose(1, 2)
    return LayerGrad(patches, x.flatten(2).transpose(1, 2))


class _WeightOf(nn.Module):
    """Exposes a module's ``weight_matrix()`` as ``forward`` so torch.func can differentiate it."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self) -> Tensor:
        return self.module.weight_matrix()  # type: ignore[operator]


def _weight_matrix_coords(m: nn.Module) -> Callable[[Tensor], Tensor]:
    """Chain rule from ∂loss/∂W to the module's own parameters (e.g. an LU factorisation of W)."""
    wrapper = _WeightOf(m)
    params = {k: v.detach() for k, v in wrapper.named_parameters() if v.requires_grad}
    jac = torch.func.jacrev(lambda p: torch.func.functional_call(wrapper, p, ()))(params)
    full = torch.cat([j.reshape(j.shape[0] * j.shape[1], -1) for j in jac.values()], 1)
    # Entries that never reach W (e.g. the masked triangles of an LU factor) are not free parameters.
    jacobian = full[:, full.abs().sum(0) > 0]

    def coords(g: Tensor) -> Tensor:
        return g.flatten(1) @ jacobian

    return coords


def _invertible_conv(m: nn.Module, x: Tensor, gy: Tensor) -> LayerGrad:
    # y = W x at every pixel, and log p gains +H·W·log|det W|: its gradient −H·W·W⁻ᵀ (for the NLL)
    # is the same for every sample.
    w = m.weight_matrix().detach()  # type: ignore[operator]
    hw = x.shape[2] * x.shape[3]
    const = -hw * torch.linalg.inv(w).T
    return LayerGrad(x.flatten(2).transpose(1, 2), gy.flatten(2).transpose(1, 2), const)


def supports(module: nn.Module) -> bool:
    """Whether per-sample gradients can be taken for this module type."""
    return isinstance(module, nn.Linear | nn.Conv2d | nn.ConvTranspose2d) or hasattr(module, "weight_matrix")


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
        bad = [n for n in layer_names if not supports(modules[n])]
        if bad:
            raise RoseError(f"layers {bad} are not Linear/Conv2d/ConvTranspose2d/invertible 1×1 convs")
        if not layer_names:
            raise RoseError("no layers chosen for ROSE")
        self.names = list(layer_names)
        self.modules = [modules[n] for n in self.names]
        if coords not in ("native", "weight"):
            raise RoseError(f"unknown gradient coordinates {coords!r}; use 'native' or 'weight'")
        # Jacobians of reparameterised weights are fixed while the model is: compute them once.
        self._coords = {
            i: _weight_matrix_coords(m)
            for i, m in enumerate(self.modules)
            if coords == "native" and hasattr(m, "weight_matrix")
        }

    def __call__(self, loss_fn: Callable[[Tensor], Tensor], x: Tensor) -> dict[str, LayerGrad]:
        inputs: dict[int, Tensor] = {}
        outputs: dict[int, Tensor] = {}

        def hook(i: int) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], None]:
            def store(_m: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> None:
                if i in outputs:
                    raise RoseError(f"layer {self.names[i]} is used twice in one forward pass")
                inputs[i], outputs[i] = inp[0].detach(), out

            return store

        handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(self.modules)]
        try:
            with torch.enable_grad():
                loss = loss_fn(x)
                missing = [self.names[i] for i in range(len(self.modules)) if i not in outputs]
                if missing:
                    raise RoseError(f"layers {missing} were not used by the model's forward pass")
                grads = torch.autograd.grad(loss.sum(), [outputs[i] for i in range(len(self.modules))])
        finally:
            for h in handles:
                h.remove()
        result = {}
        for i, (name, m) in enumerate(zip(self.names, self.modules, strict=True)):
            x_i, g_i = inputs[i], grads[i].detach()
            if isinstance(m, nn.Linear):
                result[name] = _linear(m, x_i, g_i)
            elif isinstance(m, nn.Conv2d):
                result[name] = _conv(m, x_i, g_i)
            elif isinstance(m, nn.ConvTranspose2d):
                result[name] = _conv_transpose(m, x_i, g_i)
            else:
                result[name] = _invertible_conv(m, x_i, g_i)
                result[name].coords = self._coords.get(i)
        return result
