"""EKFAC in a file no larger than the layer's weights (beyond the paper): the input factor's eigenbasis
keeps only its leading directions, and the rest of the input space is one block per output direction.

A UNet's 3×3 convolutions have input factors of 9·C_in coordinates, whose eigenbases made a DDPM's EKFAC
detector 6.4× its weights. ``CompactEKFAC`` keeps the ``rank`` input eigenvectors of largest eigenvalue
(as many as fit, with the output basis and the eigenvalues, in the layer's d_out·d_in numbers), re-
estimates EKFAC's eigenvalues in that basis, and for each output eigen-direction i one more value: the mean
second moment of the gradient's remainder outside the kept inputs, ``E‖(U_outᵀ G (I − U_r U_rᵀ))_i‖²`` per
remaining input direction. A layer's score is EKFAC's over the kept directions plus, for each i, the
remainder's squared norm over that mean: the quadratic form of a Fisher that is EKFAC's on the kept
directions and isotropic (per output direction) on the rest. Keeping every input direction gives EKFAC.
``WideCompactEKFAC`` truncates the output basis instead where a layer has more outputs than inputs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from roseood.curvature.fisher import FISHERS, FactorCache, Fisher, LayerShape
from roseood.curvature.kronecker import EKFAC, default_rcond, pack_orthogonal
from roseood.curvature.layergrad import LayerGrad, run_length
from roseood.errors import CheckpointError
from roseood.integrity import count


class CompactEKFAC(EKFAC):
    """EKFAC over the input factor's ``rank`` leading eigen-directions, the rest one block per output
    direction (see the module); its saved state is at most the layer's own weights in size."""

    name = "ekfac-compact"
    takes_from: ClassVar[tuple[str, ...]] = ("ekfac",)
    column_bases = ("u_in",)
    sums: ClassVar[dict[int, tuple[str, ...]]] = EKFAC.sums | {1: ("scale", "rest", "scale_count")}

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.rest: Tensor | None = None  # Σ_n the remainder's squared norm, per output eigen-direction
        self.rest_dims = 0  # input directions the remainder spans, per group (a mask's free ones less kept)

    flips_wide: ClassVar[bool] = False  # a layer with more outputs than inputs fitted transposed

    @classmethod
    def flipped(cls, d_in: int, d_out: int) -> bool:
        """Whether a layer of (d_out, d_in) blocks is fitted transposed, its output basis the truncated one
        (``WideCompactEKFAC``: where its outputs outnumber its inputs)."""
        return cls.flips_wide and d_out > d_in

    @classmethod
    def oriented(cls, shape: LayerShape) -> tuple[int, int]:
        """The layer's (d_in, d_out) as this kind truncates it: a flipped layer's traded."""
        flip = cls.flipped(shape.d_in, shape.d_out)
        return (shape.d_out, shape.d_in) if flip else (shape.d_in, shape.d_out)

    @classmethod
    def rank(cls, shape: LayerShape) -> int:
        """Directions kept of the truncated basis: the most whose columns and eigenvalues, with the other
        basis's reflectors and the remainders' values, fit in the d_out·d_in numbers of the layer's weights
        (per group)."""
        d_in, d_out = cls.oriented(shape)
        return max(0, (d_out * d_in - d_out * (d_out + 1) // 2 - d_out) // (d_in + d_out))

    @classmethod
    def takes(cls, shape: LayerShape) -> bool:
        return cls.rank(shape) >= 1

    @classmethod
    def file_bytes(cls, shape: LayerShape) -> int:
        r, (d_in, d_out) = cls.rank(shape), cls.oriented(shape)
        return 4 * shape.groups * (d_in * r + d_out * (d_out + 1) // 2 + d_out * (r + 1))

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        super().end_pass(pass_index, factors)
        if pass_index == 0:
            self._truncate()

    def _truncate(self) -> None:
        """Keep the truncated basis's ``rank`` leading columns (eigh's ascending order: the last ones) and
        their eigenvalues; a flipped layer's bases and eigenvalues trade places first, so that from here
        on the input side is the truncated one."""
        assert self.u_in is not None and self.u_out is not None and self.eig_in is not None
        groups = self.u_in.shape[0] if self.u_in.dim() == 3 else 1
        d_in, d_out = self.u_in.shape[-1], self.u_out.shape[-1]
        keep = self.rank(LayerShape(d_in, d_out, groups))
        if self.flipped(d_in, d_out):
            self.u_in, self.u_out = self.u_out, self.u_in
            self.eig_in, self.eig_out = self.eig_out, self.eig_in
            self.in_free, self.out_free, d_in = self.out_free, self.in_free, d_out
        assert self.u_in is not None and self.eig_in is not None
        self.rest_dims = max((self.in_free or d_in) - keep, 1)
        first = d_in - keep
        self.u_in, self.eig_in = self.u_in[..., first:].clone(), self.eig_in[..., first:].clone()

    def take_first_pass(self, fitted: Fisher) -> bool:
        """EKFAC's first pass (the same factors and bases), of which it keeps the leading input columns."""
        taken = super().take_first_pass(fitted)
        if taken:
            self._truncate()
        return taken

    def _split(self, g: LayerGrad) -> tuple[Tensor, Tensor]:
        """The gradients' components in the kept directions ``U_outᵀ G U_r`` (N, groups·d_out, r) and the
        remainder's squared norm per output direction ``‖(U_outᵀ G (I − U_r U_rᵀ))_i‖²`` (N, groups·d_out),
        in the gradients' dtype; the remainder is formed before it is squared, so no difference of two
        large squares is taken."""
        u_out, u_in = self._typed_bases(g)
        m = g.matrix()
        blocks = m.view(m.shape[0], g.groups, -1, m.shape[-1])
        if self.flipped(blocks.shape[-1], blocks.shape[-2]):
            blocks = blocks.mT
        kept, rest = [], []
        # a few samples at a time: the rotated matrices and their remainder stay in the CPU's cache
        step = run_length(m[0].numel() * m.element_size(), m.device)
        for run in blocks.split(step):
            x = u_out.mT @ run
            k = x @ u_in
            kept.append(k.flatten(1, 2))
            rest.append((x - k @ u_in.mT).pow(2).sum(-1).flatten(1))
        return torch.cat(kept), torch.cat(rest)

    def update(self, g: LayerGrad, pass_index: int) -> None:
        if pass_index == 0:
            super().update(g, pass_index)
            return
        kept, rest = self._split(g)
        s, r = kept.pow(2).sum(0).double(), rest.sum(0).double()
        self.scale = s if self.scale is None else self.scale + s
        self.rest = r if self.rest is None else self.rest + r
        self.scale_count += g.n

    def quad(self, g: LayerGrad) -> Tensor:
        """EKFAC's ``Σ r_ij² / (λ_ij + damping)`` over the kept directions plus ``Σ_i ρ_i / (μ_i + damping)``
        over the remainders ρ_i, μ_i their mean second moment per direction; where a value is at most the
        unspanned level, a component counts only beyond its own rounding (``KFAC.unspanned_level``: the
        remainder's rounding is that of each of its directions)."""
        kept, rest = self._split(g)
        assert self.rest is not None
        lam = torch.cat([self._eigenvalues(), (self.rest / (self.scale_count * self.rest_dims))[:, None]], 1)
        dims = torch.ones_like(lam)
        dims[:, -1] = self.rest_dims
        sq = torch.cat([kept.pow(2), rest[..., None]], -1).flatten(1)
        weight = (1.0 / (lam + self.damping)).to(g.dtype).flatten()
        floor = self._unspanned_directions(lam, g, dims)
        if floor is None:
            return (sq @ weight).double()
        own = default_rcond(g) * sq.sum(1, keepdim=True) * dims.flatten().to(g.dtype)
        on_floor, spanned = weight * floor.flatten(), weight.masked_fill(floor.flatten(), 0.0)
        return (sq @ spanned + (sq - own).clamp_min_(0.0) @ on_floor).double()

    def _values(self) -> dict[str, Tensor | None]:
        return {"scale": self.scale, "rest": self.rest}

    def state(self) -> dict[str, Any]:
        return super().state() | {"rest_dims": self.rest_dims}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.rest_dims = count(state, "rest_dims")
        columns = self._packed["u_in"]["columns"] if self._packed is not None else None
        if columns is not None and not 1 <= self.rest_dims <= columns.shape[-2] - columns.shape[-1]:
            raise CheckpointError("field 'rest_dims' does not fit the kept input columns")

    def _packed_bases(self) -> dict[str, dict[str, Tensor]]:
        """The output basis as EKFAC's reflectors, the kept input columns as they are (float32)."""
        assert self.u_in is not None and self.u_out is not None
        return {"u_in": {"columns": self.u_in.float()}, "u_out": pack_orthogonal(self.u_out)}

    def _check_sizes(self) -> None:
        """The kept input columns, the output basis, one eigenvalue per (output, kept input) pair of each
        group and one remainder value per output direction."""
        assert self._packed is not None and self.scale is not None and self.rest is not None
        columns, tau_out = self._packed["u_in"]["columns"], self._packed["u_out"]["tau"]
        groups = columns.shape[0] if columns.dim() == 3 else 1
        rows = groups * tau_out.shape[-1]
        if tuple(self.scale.shape) != (rows, columns.shape[-1]) or tuple(self.rest.shape) != (rows,):
            raise CheckpointError("fields 'scale' and 'rest' do not fit the bases u_in and u_out")


class WideCompactEKFAC(CompactEKFAC):
    """Compact EKFAC that truncates the wider side (beyond the paper): a layer with more outputs than
    inputs (a transformer's MLP up-projection and adaLN modulation, a time embedding's widening)
    keeps its whole input basis and its output basis's leading directions, the remainder one block per
    input direction: ``CompactEKFAC`` of the transposed gradients. There, layers with more than about twice
    as many outputs as inputs find no rank that fits their weights and get a diagonal Fisher."""

    name = "ekfac-compact-wide"
    flips_wide = True


for _fisher in (CompactEKFAC, WideCompactEKFAC):
    FISHERS.register(_fisher.name, _fisher)
