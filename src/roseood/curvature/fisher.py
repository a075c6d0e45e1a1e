"""Fisher approximations per layer behind one interface: fit from per-sample gradients, then ``sᵀ F⁻¹ s``.

- ``dense``: the exact empirical Fisher E[s sᵀ] (small layers only) — the oracle in tests.
- ``diag``: its diagonal, E[s²] (Kirkpatrick et al. 2017).
- ``kfac``: A ⊗ B with A = E[a aᵀ], B = E[δ δᵀ] (Martens & Grosse 2015; Grosse & Martens 2016 for convs).
- ``ekfac``: the eigenbasis U_A ⊗ U_B of KFAC with the diagonal re-estimated in it,
  Σ = E[(U_Bᵀ G U_A)²] (George et al. 2018), as in the ROSE paper.
The Kronecker-factored ones live in ``roseood.curvature.kronecker``; this module holds the interface,
the dense and diagonal Fishers and the registry.
Statistics are accumulated in float64; ``damping`` is added to the (eigen)values before inverting.
Saved states hold only what scoring needs: eigenbases as float32 Householder reflectors (half of n²
numbers), EKFAC/KFAC eigenvalues as float32 (scoring rotates in float32 anyway), the dense Fisher as
its packed Cholesky factor.
Grouped layers get one Kronecker block per group (block-diagonal KFAC/EKFAC). Masked weights: diag
and dense see only the free entries (exact); KFAC/EKFAC build their factors from the inputs and outputs
that meet a free entry only, eigendecomposed on those coordinates, and apply them to the masked gradient
(zero on masked entries). For a mask that is a Kronecker product (a PixelCNN's "past pixels only") that
is exactly KFAC/EKFAC of the free parameters; the factors of the full weight would mix in the
covariances of inputs the layer never sees (the future pixels), and a worse basis for EKFAC.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from roseood.curvature.grads import LayerGrad
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import count, field, tensor
from roseood.registry import Registry

DENSE_MAX_PARAMS = 4096


@dataclass(frozen=True)
class LayerShape:
    """A layer's gradient matrix as the Fishers see it: ``groups`` blocks of (d_out, d_in) each."""

    d_in: int
    d_out: int
    groups: int = 1

    @classmethod
    def of(cls, g: LayerGrad) -> LayerShape:
        return cls(g.width_in // g.groups, g.width_out // g.groups, g.groups)

    @property
    def params(self) -> int:
        """Entries of the gradient matrix (the layer's parameters, the bias as a column)."""
        return self.groups * self.d_in * self.d_out

    @property
    def factors(self) -> int:
        """Entries of the Kronecker factors (one d_in² and one d_out² matrix per group)."""
        return self.groups * (self.d_in**2 + self.d_out**2)


def pack_tril(m: Tensor, offset: int = 0) -> Tensor:
    """The lower triangle of square matrices (..., n, n) (below diagonal ``offset``), flat per matrix."""
    n = m.shape[-1]
    return m[..., torch.ones(n, n, dtype=torch.bool, device=m.device).tril(offset)]


def unpack_tril(flat: Tensor, n: int, offset: int = 0) -> Tensor:
    """Inverse of ``pack_tril``: (..., n, n) matrices, zero above the triangle."""
    m = flat.new_zeros(*flat.shape[:-1], n, n)
    m[..., torch.ones(n, n, dtype=torch.bool, device=flat.device).tril(offset)] = flat
    return m


def eigh_on(cov: Tensor, support: Tensor | None) -> tuple[Tensor, Tensor]:
    """Eigenvalues and eigenvectors of factors (..., k, k) that are zero outside ``support`` (..., k):
    the supported block's own eigenvectors, and unit vectors with eigenvalue 0 on the other coordinates,
    so that these never mix into the supported ones however close the eigenvalues."""
    if support is None or bool(support.all()):
        return torch.linalg.eigh(cov)
    k = cov.shape[-1]
    covs, supports = cov.reshape(-1, k, k), support.reshape(-1, k)
    values, vectors = covs.new_zeros(covs.shape[:-1]), torch.zeros_like(covs)
    for c, s, vals, vecs in zip(covs, supports, values, vectors, strict=True):
        on, off = s.nonzero().flatten(), (~s).nonzero().flatten()
        vals[on], vecs[on[:, None], on[None, :]] = torch.linalg.eigh(c[on[:, None], on[None, :]])
        vecs[off, off] = 1.0
    return values.view(cov.shape[:-1]), vectors.view(cov.shape)


class FactorCache:
    """Eigendecompositions of the Kronecker factors finished so far in one pass: layers that read the same
    inputs (a VAE's mean and log-variance heads, attention's query/key/value projections) accumulate equal
    input factors, which are then decomposed once instead of once per layer (same numbers either way)."""

    def __init__(self) -> None:
        self._done: list[tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]] = []

    def eigh(self, cov: Tensor, support: Tensor | None) -> tuple[Tensor, Tensor]:
        """``eigh_on(cov, support)``, reusing an earlier result for an equal factor and support."""
        for c, s, result in self._done:
            same_support = (s is None and support is None) or (
                s is not None and support is not None and torch.equal(s, support)
            )
            if same_support and c.shape == cov.shape and torch.equal(c, cov):
                return result
        result = eigh_on(cov, support)
        self._done.append((cov, support, result))
        return result


class Fisher(ABC):
    """Empirical Fisher of one layer. Fed batch by batch for ``passes`` passes over the same data.

    ``sums[p]`` names the attributes accumulated in pass ``p`` (sums and counts); ``reduce_sums`` lets
    several processes add theirs together before ``end_pass``."""

    name: ClassVar[str]
    passes: ClassVar[int] = 1
    sums: ClassVar[dict[int, tuple[str, ...]]]
    coords: ClassVar[str] = "native"  # gradient coordinates it wants: the module's parameters or "weight"
    takes_from: ClassVar[tuple[str, ...]] = ()  # kinds whose first pass ``take_first_pass`` can take

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        self.damping = damping
        self.rcond = rcond  # Kronecker Fishers: see ``KFAC.unspanned_level``
        self.count = 0
        self._device: torch.device | None = None  # where quad last found the gradients

    @abstractmethod
    def update(self, g: LayerGrad, pass_index: int) -> None:
        """Accumulate one batch of per-sample gradients during pass ``pass_index``."""

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        """Hook run after each full pass (e.g. eigendecompositions after the first); ``factors`` shares
        eigendecompositions between the layers of one model."""

    def take_first_pass(self, fitted: Fisher) -> bool:
        """Take the end of ``fitted``'s first pass (a Fisher of a kind in ``takes_from``, fitted in this
        process on the same gradients) as the end of its own, where it is what its own would make
        (``KroneckerFisher.take_first_pass``: the Kronecker factors' eigendecompositions); False, taking
        nothing, elsewhere. Its later passes, if any, it makes itself."""
        return False

    def wants(self, pass_index: int) -> bool:
        """Whether pass ``pass_index`` still needs batches: a Fisher whose estimate of that pass has
        settled (``EKFAC``'s Kronecker factors) takes no more, and the pass stops once none wants any."""
        return True

    def first_pass_images(self) -> int | None:
        """How many images its first pass takes before ``wants`` stops it, extrapolated from what it has
        summed so far (a fit's forecast); None: every image it is given."""
        return None

    @abstractmethod
    def quad(self, g: LayerGrad) -> Tensor:
        """Per-sample ``sᵀ (F + damping)⁻¹ s`` as float64, shape (N,)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """Learned tensors, for saving."""

    @abstractmethod
    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state()`` returned."""

    def reduce_sums(self, pass_index: int, reduce: Callable[[Tensor], Tensor]) -> None:
        """Replace the sums and counts of pass ``pass_index`` by ``reduce`` of them (e.g. over processes)."""
        for key in self.sums[pass_index]:
            value = getattr(self, key)
            if isinstance(value, int):
                setattr(self, key, int(reduce(torch.tensor([value], dtype=torch.float64)).item()))
            elif value is None:
                raise RoseError("every process needs at least one image to fit the Fisher")
            else:
                setattr(self, key, reduce(value))

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> None:
        """Replace every tensor this Fisher holds by ``fn`` of it (e.g. rank 0's copy of an eigenbasis)."""
        for key, value in sorted(vars(self).items()):
            if isinstance(value, Tensor):
                setattr(self, key, fn(value))

    def held_bytes(self) -> int:
        """Bytes of the tensors it holds now (part of the process's memory already), each storage once."""
        storages: dict[int, int] = {}

        def walk(value: object) -> None:
            if isinstance(value, Tensor):
                storage = value.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list | tuple):
                for v in value:
                    walk(v)

        walk(vars(self))
        return sum(storages.values())

    def _follow(self, g: LayerGrad) -> None:
        """Move what this Fisher holds to the gradients' device, once (a saved detector loads onto the
        CPU, its model may be on a GPU), so that scoring never copies it batch by batch."""
        if self._device != g.device:
            self.map_tensors(lambda t: t.to(g.device))
            self._device = g.device

    def _need_data(self) -> None:
        if self.count == 0:
            raise RoseError("the Fisher was fitted on no samples")

    @classmethod
    def takes(cls, shape: LayerShape) -> bool:
        """Whether a layer of this shape can have a Fisher of this kind (else ROSE gives it a ``diag``)."""
        return True

    @classmethod
    @abstractmethod
    def file_bytes(cls, shape: LayerShape) -> int:
        """Bytes its saved state takes for a layer of this shape."""

    @classmethod
    @abstractmethod
    def work_bytes(cls, shape: LayerShape) -> int:
        """Bytes it holds while fitting or scoring such a layer (float64 sums, unpacked bases), at most."""


class DiagFisher(Fisher):
    name = "diag"
    sums: ClassVar[dict[int, tuple[str, ...]]] = {0: ("sq", "count")}

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.sq: Tensor | None = None

    def update(self, g: LayerGrad, pass_index: int) -> None:
        s = g.square_sum() if g.coords is None else g.flat().double().pow(2).sum(0)
        self.sq = s if self.sq is None else self.sq + s
        self.count += g.n

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        self._need_data()

    def quad(self, g: LayerGrad) -> Tensor:
        self._follow(g)
        assert self.sq is not None
        inverse = 1.0 / (self.sq / self.count + self.damping)
        if g.coords is None:
            return g.weighted_square(inverse)
        return g.flat().double().pow(2) @ inverse

    def state(self) -> dict[str, Any]:
        return {"sq": self.sq.float() if self.sq is not None else None, "count": self.count}

    @classmethod
    def file_bytes(cls, shape: LayerShape) -> int:
        return 4 * shape.params

    @classmethod
    def work_bytes(cls, shape: LayerShape) -> int:
        return 3 * 8 * shape.params  # the sums, one batch's sums and the inverse, float64

    def load_state(self, state: dict[str, Any]) -> None:
        self.sq = tensor(field(state, "sq", Tensor), "sq", nonnegative=True).double()
        self.count = count(state, "count")


class DenseFisher(Fisher):
    name = "dense"
    sums: ClassVar[dict[int, tuple[str, ...]]] = {0: ("outer", "count")}

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.outer: Tensor | None = None
        self.chol: Tensor | None = None

    def update(self, g: LayerGrad, pass_index: int) -> None:
        s = g.flat().double()
        if s.shape[1] > DENSE_MAX_PARAMS:
            raise RoseError(
                f"dense Fisher limited to {DENSE_MAX_PARAMS} parameters per layer, got {s.shape[1]}"
            )
        o = s.T @ s
        self.outer = o if self.outer is None else self.outer + o
        self.count += g.n

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        self._need_data()
        assert self.outer is not None
        f = self.outer / self.count
        eye = torch.eye(f.shape[0], dtype=f.dtype, device=f.device)
        self.chol = torch.linalg.cholesky(f + self.damping * eye)
        self.outer = None

    def quad(self, g: LayerGrad) -> Tensor:
        self._follow(g)
        assert self.chol is not None
        s = g.flat().double()
        y = torch.linalg.solve_triangular(self.chol, s.T, upper=False)
        return y.pow(2).sum(0)

    def state(self) -> dict[str, Any]:
        assert self.chol is not None
        return {"chol": pack_tril(self.chol), "size": self.chol.shape[0], "count": self.count}

    @classmethod
    def file_bytes(cls, shape: LayerShape) -> int:
        return 8 * shape.params * (shape.params + 1) // 2

    @classmethod
    def work_bytes(cls, shape: LayerShape) -> int:
        return 3 * 8 * shape.params**2

    def load_state(self, state: dict[str, Any]) -> None:
        size = count(state, "size")
        chol = tensor(field(state, "chol", Tensor), "chol", shape=(size * (size + 1) // 2,))
        self.chol, self.count = unpack_tril(chol, size), count(state, "count")
        if not bool((self.chol.diagonal() > 0).all()):
            raise CheckpointError("field 'chol' is not a Cholesky factor (its diagonal must be positive)")


FISHERS: Registry[str, type[Fisher]] = Registry("Fisher approximation")
for _fisher in (DenseFisher, DiagFisher):  # then the Kronecker-factored ones (roseood.curvature.kronecker)
    FISHERS.register(_fisher.name, _fisher)


def make_fisher(kind: str, damping: float = 1e-8, rcond: float | None = None) -> Fisher:
    """A fresh Fisher approximation by name: dense, diag, kfac, kfac-tikhonov or ekfac (``rcond``: KFAC's
    and EKFAC's unspanned level, ``KFAC.unspanned_level``)."""
    return FISHERS.get(kind)(damping, rcond)
