"""One layer's per-sample gradients for a batch, kept in the factored form the Fishers consume.

For a linear map ``y_t = W a_t`` applied at positions t (the patches of a convolution, the tokens of a
sequence), the gradient of sample n's loss is ``G_n = Σ_t δ_{n,t} a_{n,t}ᵀ`` with ``δ = ∂loss_n/∂y``.
A layer with ``groups`` independent blocks (grouped convolutions, norm affines, per-coordinate
fallback gradients) splits ``a`` and ``δ`` into equal contiguous blocks; ``G_n`` then stacks the blocks'
(Dout/g, Din/g) gradients vertically, which is exactly PyTorch's grouped weight layout. A ``mask``
marks the matrix entries that are parameters (nonzero) and scales the gradient, as ``W ⊙ mask`` does.

``LayerGrad`` is the interface the Fishers read; three kinds meet it honestly: ``FactoredGrad`` keeps the
factors (or, once rotated, the matrices), ``RowsGrad`` (``roseood.curvature.rowsgrad``, subclassed by the
handlers) keeps the layer's input and output gradient and forms the matrices straight from them (the
factors only when read), and ``SummedGrad`` is a layer called several times in one pass, the sum of its
calls, each kept in its own form (``join``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor


class LayerGrad(ABC):
    """Per-sample gradients ``G_n`` of one layer for a batch, block by block; shape (Dout, Din/groups).
    ``groups``, ``mask`` (Dout, Din/groups) and ``coords`` (maps (N, Dout, Din) to (N, P) parameter
    coordinates, or None) are those of the layer."""

    groups: int = 1
    mask: Tensor | None = None
    coords: Callable[[Tensor], Tensor] | None = None

    @property
    @abstractmethod
    def n(self) -> int:
        """Samples."""

    @property
    @abstractmethod
    def positions(self) -> int:
        """Positions per sample (T)."""

    @property
    @abstractmethod
    def width_in(self) -> int:
        """Inputs per position, all groups (Din, bias columns included)."""

    @property
    @abstractmethod
    def width_out(self) -> int:
        """Outputs per position, all groups (Dout)."""

    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @property
    @abstractmethod
    def dtype(self) -> torch.dtype: ...

    @abstractmethod
    def nbytes(self) -> int:
        """Memory held now (whole storages: a view keeps its base alive)."""

    @abstractmethod
    def matrix(self) -> Tensor:
        """Per-sample gradient matrices (N, Dout, Din/groups)."""

    @abstractmethod
    def factored(self) -> FactoredGrad:
        """The same gradients as factors ``a`` (N, T, Din) and ``δ`` (N, T, Dout), for the Kronecker
        factors and factor-first rotations (formed on demand by the kinds that do not keep them)."""

    @abstractmethod
    def per_sample(self, n: int, order: Tensor | None) -> LayerGrad:
        """One row per sample when the batch was expanded inside the loss (K rows per sample, in
        ``order``; None: already image-major, no copy): each sample's rows are folded into its
        positions, so ``G_n`` is the exact sum over its copies."""

    def peak_bytes(self) -> int:
        """Memory these gradients take while a Fisher reads them, at most: what they hold, and three
        products the size of the per-sample gradient matrices (formed, squared, rotated)."""
        return self.nbytes() + 3 * self._matrix_bytes()

    def _matrix_bytes(self) -> int:
        return self.n * self.width_out * self.width_in // self.groups * self.dtype.itemsize

    def free_support(self) -> tuple[Tensor, Tensor] | None:
        """Inputs (Din,) and outputs (Dout,) that meet at least one free weight entry (None without a
        mask). When the mask is a Kronecker product (PixelCNN's spatial masks: the same past pixels for
        every output), the free parameters are exactly these inputs times these outputs."""
        if self.mask is None:
            return None
        free = self.mask != 0
        inputs = free.view(self.groups, -1, free.shape[1]).any(1).flatten()
        return inputs, free.any(1)

    def flat(self) -> Tensor:
        """Per-sample gradients in the layer's parameter coordinates, (N, P)."""
        g = self.matrix()
        if self.coords is not None:
            return self.coords(g)
        g = g.flatten(1)
        return g[:, self.mask.flatten() != 0] if self.mask is not None else g

    def _factors_first(self) -> bool:
        """Whether rotating the factors is cheaper than rotating the matrices (and possible)."""
        return False

    def rotated(self, u_out: Tensor, u_in: Tensor) -> LayerGrad:
        """The gradients ``U_outᵀ G_n U_in`` block by block (``u`` of shape (groups, k, k) when grouped),
        rotating the factors or the matrices, whichever is cheaper. A mask is applied before rotating."""
        if self._factors_first():
            return self.factored().rotated(u_out, u_in)
        g = self.matrix()
        if self.groups == 1:
            return FactoredGrad.formed(u_out.T @ g @ u_in, self.positions, self.width_in)
        d_in, d_out = self.width_in // self.groups, self.width_out // self.groups
        blocks = u_out.mT @ g.view(g.shape[0], self.groups, d_out, d_in) @ u_in
        return FactoredGrad.formed(blocks.flatten(1, 2), self.positions, self.width_in, self.groups)

    def square_sum(self) -> Tensor:
        """``Σ_n G_n ⊙ G_n`` as float64 (Dout, Din/groups)."""
        return self.matrix().pow(2).sum(0).double()

    def _plain(self) -> bool:
        """Whether ``factored()`` gives these gradients as the factors alone (no mask, no shared constant)."""
        return self.mask is None

    def kronecker_square(self, l_out: Tensor, l_in: Tensor) -> Tensor:
        """``‖L_outᵀ G_n L_in‖²_F`` per sample, (N,) float64: the quadratic form of the Kronecker product
        ``(L_out L_outᵀ) ⊗ (L_in L_inᵀ)`` (``l`` of shape (groups, k, k) when grouped). Where it is cheaper
        (``double_sum_cheaper``), the double sum over positions ``Σ_{s,s'} (ã_s·ã_s')(δ̃_s·δ̃_s')`` of the
        transformed factors ``ã = L_inᵀa``, ``δ̃ = L_outᵀδ``, which never forms ``G_n``; else the
        transformed matrices."""
        if self._plain() and double_sum_cheaper(self):
            return self.factored().double_sum(l_out, l_in)
        return torch.cat([rows.pow(2).sum(1) for rows in self.rotated(l_out, l_in).matrix_runs()]).double()

    def matrix_runs(self) -> Iterator[Tensor]:
        """The flattened matrices (rows, Dout·Din/groups) in runs of about ``RUN_BYTES`` (at least one
        sample; on an accelerator, one run), so that elementwise passes over a run stay in the CPU's cache
        instead of streaming the whole batch through memory."""
        g = self.matrix().flatten(1)
        yield from g.split(run_length(g.shape[1] * g.element_size(), g.device))

    def weighted_square(self, w: Tensor) -> Tensor:
        """``Σ_ij w_ij G_n,ij²`` per sample, (N,) float64, for a (Dout, Din/groups) weight ``w``."""
        w = w.to(self.dtype).flatten()
        return torch.cat([rows.pow(2) @ w for rows in self.matrix_runs()]).double()

    def floored_square(self, w: Tensor, floor: Tensor, level: float) -> Tensor:
        """``weighted_square`` where the entries marked in ``floor`` count only what their square has beyond
        ``level·‖G_n‖²``: ``max(G_n,ij² − level·‖G_n‖², 0)`` (the rounding of directions a Fisher does not
        span, ``KFAC.unspanned_level``); (N,) float64."""
        w = w.to(self.dtype).flatten()
        on_floor = w * floor.flatten()
        spanned = w.masked_fill(floor.flatten(), 0.0)
        out = []
        for rows in self.matrix_runs():
            sq = rows.pow(2)
            own = level * sq.sum(1, keepdim=True)
            out.append(sq @ spanned + (sq - own).clamp_min_(0.0) @ on_floor)
        return torch.cat(out).double()


RUN_BYTES = 2**21  # a run of matrices that stays in a CPU's cache while elementwise passes go over it


def run_length(row_bytes: int, device: torch.device) -> int:
    """How many rows of ``row_bytes`` make a run of about ``RUN_BYTES`` (at least one) on the CPU; on an
    accelerator every row at once (a run more is a kernel launch more, and there is no cache to stay in)."""
    if device.type != "cpu":
        return 2**62
    return max(1, RUN_BYTES // max(row_bytes, 1))


def factors_cheaper(grad: LayerGrad) -> bool:
    """Rotating the factors (T positions of d_in and d_out) is cheaper than forming and rotating the
    matrices."""
    t, d_in, d_out = grad.positions, grad.width_in // grad.groups, grad.width_out // grad.groups
    factors_first = t * grad.groups * (d_in * d_in + d_out * d_out)
    matrix_first = t * grad.width_out * d_in + grad.width_out * d_in * (d_in + d_out)
    return factors_first <= matrix_first


def double_sum_cheaper(grad: LayerGrad) -> bool:
    """The double sum over positions (per block: the factors transformed, T·(d_in² + d_out²), then
    T²·(d_in + d_out)) costs less than the transformed matrices: the factors transformed and the matrices
    formed from them (T·d_in·d_out more), or the matrices formed and transformed (d_in·d_out·(T + d_in +
    d_out)). It wins with few positions on wide layers (a UNet's low resolutions, a linear layer)."""
    t, d_in, d_out = grad.positions, grad.width_in // grad.groups, grad.width_out // grad.groups
    transform = t * (d_in * d_in + d_out * d_out)
    matrices = min(transform + t * d_in * d_out, d_in * d_out * (t + d_in + d_out))
    return transform + t * t * (d_in + d_out) < matrices


@dataclass
class FactoredGrad(LayerGrad):
    """Per-sample gradients ``G_n = (Σ_t d_{n,t}ᵀ a_{n,t} + const) ⊙ mask`` kept as their factors, or
    (``g``, after a rotation) as the matrices themselves."""

    a: Tensor  # (N, T, Din) inputs at each position (a trailing 1 per group for the bias)
    d: Tensor  # (N, T, Dout) gradients w.r.t. the outputs at the same positions
    const: Tensor | None = None  # (Dout, Din/groups) gradient shared by every sample (a log-determinant)
    coords: Callable[[Tensor], Tensor] | None = None  # maps (N, Dout, Din) to (N, P) parameter coordinates
    g: Tensor | None = None  # the (N, Dout, Din/groups) matrices when already formed
    groups: int = 1  # independent diagonal blocks of the layer (block-diagonal Kronecker factors)
    mask: Tensor | None = None  # (Dout, Din/groups): 0 where an entry is not a parameter, else its scale

    @classmethod
    def formed(cls, g: Tensor, positions: int, width_in: int, groups: int = 1) -> FactoredGrad:
        """Gradients given by their matrices alone (the factors are shape-only, memory-free views)."""
        empty = g.new_empty(())
        n, width_out = g.shape[0], g.shape[1]
        return cls(
            empty.expand(n, positions, width_in), empty.expand(n, positions, width_out), g=g, groups=groups
        )

    @property
    def n(self) -> int:
        return self.d.shape[0]

    @property
    def positions(self) -> int:
        return self.d.shape[1]

    @property
    def width_in(self) -> int:
        return self.a.shape[2]

    @property
    def width_out(self) -> int:
        return self.d.shape[2]

    @property
    def device(self) -> torch.device:
        return self.d.device

    @property
    def dtype(self) -> torch.dtype:
        return self.d.dtype

    def nbytes(self) -> int:
        tensors = (self.a, self.d, self.g, self.const, self.mask)
        return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)

    def factored(self) -> FactoredGrad:
        if self.g is not None:
            raise ValueError("its handler gives no factors (a, δ), only the gradient matrices")
        return self

    def per_sample(self, n: int, order: Tensor | None) -> LayerGrad:
        if self.n == n:
            return self
        if self.g is not None:
            raise ValueError("its handler gives no factors to fold an expanded batch into")
        copies = self.n // n
        a, d = (self.a, self.d) if order is None else (self.a[order], self.d[order])
        return FactoredGrad(
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

    def matrix(self) -> Tensor:
        if self.g is not None:
            return self.g
        if self.groups == 1:
            g = torch.einsum("nto,nti->noi", self.d, self.a)
        else:
            g = torch.einsum("ntgo,ntgi->ngoi", self._blocks(self.d), self._blocks(self.a)).flatten(1, 2)
        if self.const is not None:
            g = g + self.const
        return g * self.mask if self.mask is not None else g

    def matrix_runs(self) -> Iterator[Tensor]:
        """Each run formed from its own samples' factors: the whole batch's matrices never exist at once."""
        if self.g is not None:
            yield from super().matrix_runs()
            return
        step = run_length(
            self.width_out * (self.width_in // self.groups) * self.d.element_size(), self.device
        )
        for s in range(0, max(self.n, 1), step):  # an empty batch: one empty run
            yield replace(self, a=self.a[s : s + step], d=self.d[s : s + step]).matrix().flatten(1)

    def _factors_first(self) -> bool:
        factored = self.g is None and self.mask is None and (self.groups == 1 or self.const is None)
        return factored and factors_cheaper(self)

    def rotated(self, u_out: Tensor, u_in: Tensor) -> LayerGrad:
        if not self._factors_first():
            return super().rotated(u_out, u_in)
        if self.groups == 1:
            const = u_out.T @ self.const @ u_in if self.const is not None else None
            return FactoredGrad(self.a @ u_in, self.d @ u_out, const)
        a = torch.einsum("ntgi,gij->ntgj", self._blocks(self.a), u_in).flatten(2)
        d = torch.einsum("ntgo,gop->ntgp", self._blocks(self.d), u_out).flatten(2)
        return FactoredGrad(a, d, groups=self.groups)

    def _plain(self) -> bool:
        return self.g is None and self.const is None and self.mask is None

    def double_sum(self, l_out: Tensor, l_in: Tensor) -> Tensor:
        """``Σ_{s,s'} (ã_s·ã_s')(δ̃_s·δ̃_s')`` per sample (N,) float64, with ``ã = L_inᵀa`` and ``δ̃ = L_outᵀδ``
        block by block: ``‖L_outᵀ G_n L_in‖²_F`` without forming ``G_n`` (plain factors only)."""
        if not self._plain():
            raise ValueError("the double sum over positions needs the factors alone (no mask or constant)")
        if self.groups == 1:
            a, d = (self.a @ l_in)[:, None], (self.d @ l_out)[:, None]
        else:
            a = torch.einsum("ntgi,gij->ngtj", self._blocks(self.a), l_in)
            d = torch.einsum("ntgo,gop->ngtp", self._blocks(self.d), l_out)
        grams = (a @ a.mT).double() * (d @ d.mT).double()  # (N, groups, T, T)
        return grams.sum((1, 2, 3))

    def _rank_one_squares(self) -> tuple[Tensor, Tensor]:
        """Squared single-position factors as (N, groups, Dout/g) and (N, groups, Din/g)."""
        return self._blocks(self.d)[:, 0] ** 2, self._blocks(self.a)[:, 0] ** 2

    def square_sum(self) -> Tensor:
        """``Σ_n G_n ⊙ G_n`` as float64; rank-one gradients never form the matrices."""
        if not self._rank_one:
            return super().square_sum()
        if self.groups == 1 and self.mask is None:
            return ((self.d[:, 0] ** 2).T @ self.a[:, 0] ** 2).double()
        d2, a2 = self._rank_one_squares()
        s = torch.einsum("ngo,ngi->goi", d2, a2).flatten(0, 1)
        return (s * self.mask**2 if self.mask is not None else s).double()

    def weighted_square(self, w: Tensor) -> Tensor:
        if not self._rank_one:
            return super().weighted_square(w)
        w = w.to(self.dtype)
        if self.groups == 1 and self.mask is None:
            return ((self.d[:, 0] ** 2 @ w) * self.a[:, 0] ** 2).sum(1).double()
        if self.mask is not None:
            w = w * self.mask**2
        d2, a2 = self._rank_one_squares()
        return torch.einsum("ngo,goi,ngi->n", d2, w.view(self.groups, d2.shape[2], -1), a2).double()


class SummedGrad(LayerGrad):
    """A layer run several times in one pass: its per-sample gradient is the sum of its calls', each
    kept in its own form (a convolution's calls keep their grouped-convolution matrices); the factors
    are all the calls' positions together."""

    def __init__(self, calls: Sequence[LayerGrad]) -> None:
        self.calls = list(calls)
        first = self.calls[0]
        self.groups, self.mask, self.coords = first.groups, first.mask, first.coords

    @property
    def n(self) -> int:
        return self.calls[0].n

    @property
    def positions(self) -> int:
        return sum(c.positions for c in self.calls)

    @property
    def width_in(self) -> int:
        return self.calls[0].width_in

    @property
    def width_out(self) -> int:
        return self.calls[0].width_out

    @property
    def device(self) -> torch.device:
        return self.calls[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.calls[0].dtype

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.calls)

    def peak_bytes(self) -> int:
        """Each call's own peak while its matrices are formed, beside the others' held memory, plus the
        running sum."""
        held = self.nbytes()
        return held + max(c.peak_bytes() - c.nbytes() for c in self.calls) + self._matrix_bytes()

    def matrix(self) -> Tensor:
        total = self.calls[0].matrix()
        for call in self.calls[1:]:
            total = total + call.matrix()
        return total

    def factored(self) -> FactoredGrad:
        parts = [c.factored() for c in self.calls]
        consts = [p.const for p in parts if p.const is not None]
        return FactoredGrad(
            torch.cat([p.a for p in parts], 1),
            torch.cat([p.d for p in parts], 1),
            const=torch.stack(consts).sum(0) if consts else None,
            groups=self.groups,
            mask=self.mask,
        )

    def per_sample(self, n: int, order: Tensor | None) -> LayerGrad:
        return SummedGrad([c.per_sample(n, order) for c in self.calls])

    def _plain(self) -> bool:
        return all(c._plain() for c in self.calls)


def join(calls: Sequence[LayerGrad]) -> LayerGrad:
    """One layer's gradients over all the calls it had in one pass: the call itself, the factors of all
    the calls' positions together (``FactoredGrad`` calls), or their ``SummedGrad``."""
    if len(calls) == 1:
        return calls[0]
    if all(isinstance(c, FactoredGrad) and c.g is None for c in calls):
        return SummedGrad(calls).factored()
    return SummedGrad(calls)
