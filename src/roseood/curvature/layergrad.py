"""One layer's per-sample gradients for a batch, kept in the factored form the Fishers consume.

For a linear map ``y_t = W a_t`` applied at positions t (the patches of a convolution, the tokens of a
sequence), the gradient of sample n's loss is ``G_n = Σ_t δ_{n,t} a_{n,t}ᵀ`` with ``δ = ∂loss_n/∂y``.
A layer with ``groups`` independent blocks (grouped convolutions, norm affines, per-coordinate
fallback gradients) splits ``a`` and ``δ`` into equal contiguous blocks; ``G_n`` then stacks the blocks'
(Dout/g, Din/g) gradients vertically, which is exactly PyTorch's grouped weight layout. A ``mask``
marks the matrix entries that are parameters (nonzero) and scales the gradient, as ``W ⊙ mask`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LayerGrad:
    """Per-sample gradients ``G_n = (Σ_t d_{n,t}ᵀ a_{n,t} + const) ⊙ mask``, block by block; shape
    (Dout, Din/groups)."""

    a: Tensor  # (N, T, Din) inputs at each position (a trailing 1 per group for the bias)
    d: Tensor  # (N, T, Dout) gradients w.r.t. the outputs at the same positions
    const: Tensor | None = None  # (Dout, Din/groups) gradient shared by every sample (a log-determinant)
    coords: Callable[[Tensor], Tensor] | None = None  # maps (N, Dout, Din) to (N, P) parameter coordinates
    g: Tensor | None = None  # the (N, Dout, Din/groups) matrices when already formed
    groups: int = 1  # independent diagonal blocks of the layer (block-diagonal Kronecker factors)
    mask: Tensor | None = None  # (Dout, Din/groups): 0 where an entry is not a parameter, else its scale

    @property
    def n(self) -> int:
        """Samples."""
        return self.d.shape[0]

    @property
    def positions(self) -> int:
        """Positions per sample (T)."""
        return self.d.shape[1]

    @property
    def width_in(self) -> int:
        """Inputs per position, all groups (Din, bias columns included)."""
        return self.a.shape[2]

    @property
    def width_out(self) -> int:
        """Outputs per position, all groups (Dout)."""
        return self.d.shape[2]

    @property
    def device(self) -> torch.device:
        return self.d.device

    @property
    def dtype(self) -> torch.dtype:
        return self.d.dtype

    def nbytes(self) -> int:
        """Memory held now (whole storages: a view keeps its base alive)."""
        tensors = (self.a, self.d, self.g, self.const, self.mask)
        return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)

    def peak_bytes(self) -> int:
        """Memory these gradients take while a Fisher reads them, at most: what they hold, their factors
        if formed on demand, and three products the size of the per-sample gradient matrices (formed,
        squared, rotated)."""
        params = self.n * self.width_out * self.width_in // self.groups
        return self.nbytes() + 3 * params * self.dtype.itemsize

    def per_sample(self, n: int, order: Tensor | None) -> LayerGrad:
        """One row per sample when the batch was expanded inside the loss (K rows per sample, in
        ``order``; None: already image-major, no copy): each sample's rows are folded into its positions,
        so ``G_n`` is the exact sum over its copies."""
        if self.n == n:
            return self
        if self.g is not None:
            raise ValueError("its handler gives no factors to fold an expanded batch into")
        copies = self.n // n
        a, d = (self.a, self.d) if order is None else (self.a[order], self.d[order])
        return LayerGrad(
            a.reshape(n, copies * a.shape[1], a.shape[2]),
            d.reshape(n, copies * d.shape[1], d.shape[2]),
            const=self.const * copies if self.const is not None else None,
            groups=self.groups,
            mask=self.mask,
        )

    @property
    def _rank_one(self) -> bool:
        return self.g is None and self.const is None and self.positions == 1

    def _blocks(self, t: Tensor) -> Tensor:
        """(N, T, D) → (N, T, groups, D/groups)."""
        return t.view(*t.shape[:2], self.groups, -1)

    def free_support(self) -> tuple[Tensor, Tensor] | None:
        """Inputs (Din,) and outputs (Dout,) that meet at least one free weight entry (None without a
        mask). When the mask is a Kronecker product (PixelCNN's spatial masks: the same past pixels for
        every output), the free parameters are exactly these inputs times these outputs."""
        if self.mask is None:
            return None
        free = self.mask != 0
        inputs = free.view(self.groups, -1, free.shape[1]).any(1).flatten()
        return inputs, free.any(1)

    def matrix(self) -> Tensor:
        """Per-sample gradient matrices (N, Dout, Din/groups)."""
        if self.g is not None:
            return self.g
        if self.groups == 1:
            g = torch.einsum("nto,nti->noi", self.d, self.a)
        else:
            g = torch.einsum("ntgo,ntgi->ngoi", self._blocks(self.d), self._blocks(self.a)).flatten(1, 2)
        if self.const is not None:
            g = g + self.const
        return g * self.mask if self.mask is not None else g

    def flat(self) -> Tensor:
        """Per-sample gradients in the layer's parameter coordinates, (N, P)."""
        g = self.matrix()
        if self.coords is not None:
            return self.coords(g)
        g = g.flatten(1)
        return g[:, self.mask.flatten() != 0] if self.mask is not None else g

    def rotated(self, u_out: Tensor, u_in: Tensor) -> LayerGrad:
        """The gradients ``U_outᵀ G_n U_in`` block by block (``u`` of shape (groups, k, k) when grouped),
        rotating the factors or the matrices, whichever is cheaper. A mask is applied before rotating."""
        t, d_in, d_out = self.positions, self.width_in // self.groups, self.width_out // self.groups
        factors_first = t * self.groups * (d_in * d_in + d_out * d_out)
        matrix_first = t * self.width_out * d_in + self.width_out * d_in * (d_in + d_out)
        factored = self.g is None and self.mask is None and (self.groups == 1 or self.const is None)
        if factored and factors_first <= matrix_first:
            if self.groups == 1:
                const = u_out.T @ self.const @ u_in if self.const is not None else None
                return LayerGrad(self.a @ u_in, self.d @ u_out, const)
            a = torch.einsum("ntgi,gij->ntgj", self._blocks(self.a), u_in).flatten(2)
            d = torch.einsum("ntgo,gop->ntgp", self._blocks(self.d), u_out).flatten(2)
            return LayerGrad(a, d, groups=self.groups)
        g = self.matrix()
        if self.groups == 1:
            return self._formed(u_out.T @ g @ u_in)
        blocks = u_out.mT @ g.view(g.shape[0], self.groups, d_out, d_in) @ u_in
        return self._formed(blocks.flatten(1, 2))

    def _formed(self, g: Tensor) -> LayerGrad:
        """Gradients of this layer's shape given by their matrices alone (the factors are shape-only,
        memory-free views)."""
        empty = g.new_empty(())
        return LayerGrad(
            empty.expand(self.n, self.positions, self.width_in),
            empty.expand(self.n, self.positions, self.width_out),
            g=g,
            groups=self.groups,
        )

    def _rank_one_squares(self) -> tuple[Tensor, Tensor]:
        """Squared single-position factors as (N, groups, Dout/g) and (N, groups, Din/g)."""
        return self._blocks(self.d)[:, 0] ** 2, self._blocks(self.a)[:, 0] ** 2

    def square_sum(self) -> Tensor:
        """``Σ_n G_n ⊙ G_n`` as float64 (Dout, Din/groups); rank-one gradients never form the matrices."""
        if not self._rank_one:
            return self.matrix().pow(2).sum(0).double()
        if self.groups == 1 and self.mask is None:
            return ((self.d[:, 0] ** 2).T @ self.a[:, 0] ** 2).double()
        d2, a2 = self._rank_one_squares()
        s = torch.einsum("ngo,ngi->goi", d2, a2).flatten(0, 1)
        return (s * self.mask**2 if self.mask is not None else s).double()

    def weighted_square(self, w: Tensor) -> Tensor:
        """``Σ_ij w_ij G_n,ij²`` per sample, (N,) float64, for a (Dout, Din/groups) weight ``w``."""
        w = w.to(self.dtype)
        if not self._rank_one:
            return (self.matrix().pow(2).flatten(1) @ w.flatten()).double()
        if self.groups == 1 and self.mask is None:
            return ((self.d[:, 0] ** 2 @ w) * self.a[:, 0] ** 2).sum(1).double()
        if self.mask is not None:
            w = w * self.mask**2
        d2, a2 = self._rank_one_squares()
        return torch.einsum("ngo,goi,ngi->n", d2, w.view(self.groups, d2.shape[2], -1), a2).double()
