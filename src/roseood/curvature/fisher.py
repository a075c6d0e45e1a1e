"""Fisher approximations per layer behind one interface: fit from per-sample gradients, then ``sᵀ F⁻¹ s``.

- ``dense``: the exact empirical Fisher E[s sᵀ] (small layers only) — the oracle in tests.
- ``diag``: its diagonal, E[s²] (Kirkpatrick et al. 2017).
- ``kfac``: A ⊗ B with A = E[a aᵀ], B = E[δ δᵀ] (Martens & Grosse 2015; Grosse & Martens 2016 for convs).
- ``ekfac``: the eigenbasis U_A ⊗ U_B of KFAC with the diagonal re-estimated in it,
  Σ = E[(U_Bᵀ G U_A)²] (George et al. 2018), as in the ROSE paper.
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
from roseood.errors import CheckpointError, RoseError, shown
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


def pack_orthogonal(u: Tensor) -> dict[str, Tensor]:
    """Orthogonal matrices (..., n, n) (one per group of a grouped layer) as float32 Householder
    reflectors, n(n+1)/2 numbers each instead of n².

    ``unpack_orthogonal`` returns it up to the sign of each column, which no quadratic form
    ``Σ (Uᵀ g)² / λ`` can see."""
    h, tau = torch.geqrf(u.double())
    return {"reflectors": pack_tril(h, -1).float(), "tau": tau.float()}


def unpack_orthogonal(packed: dict[str, Tensor]) -> Tensor:
    """The float32 orthogonal matrix that ``pack_orthogonal`` stored."""
    n = packed["tau"].shape[-1]
    h = unpack_tril(packed["reflectors"], n, -1)
    return torch.linalg.householder_product(h, packed["tau"])


def _packed_basis(packed: dict[str, Any], label: str) -> dict[str, Tensor]:
    """A stored ``pack_orthogonal`` basis, checked: finite float reflectors of the size ``tau`` implies."""
    tau = tensor(packed.get("tau"), f"{label}.tau")
    if tau.dim() not in (1, 2):
        raise CheckpointError(f"field '{label}.tau' must have 1 or 2 dimensions, found {tuple(tau.shape)}")
    n = tau.shape[-1]
    shape = (*tau.shape[:-1], n * (n - 1) // 2)
    return {"reflectors": tensor(packed.get("reflectors"), f"{label}.reflectors", shape=shape), "tau": tau}


class Fisher(ABC):
    """Empirical Fisher of one layer. Fed batch by batch for ``passes`` passes over the same data.

    ``sums[p]`` names the attributes accumulated in pass ``p`` (sums and counts); ``reduce_sums`` lets
    several processes add theirs together before ``end_pass``."""

    name: ClassVar[str]
    passes: ClassVar[int] = 1
    sums: ClassVar[dict[int, tuple[str, ...]]]
    coords: ClassVar[str] = "native"  # gradient coordinates it wants: the module's parameters or "weight"

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


def default_rcond(g: LayerGrad, dtype: torch.dtype | None = None) -> float:
    """The squared relative rounding of one rotated gradient component of ``g``: rotating by orthogonal
    bases of d_in and d_out coordinates rounds a component by about √(d_in + d_out)·ε of the gradient's
    norm (ε of ``dtype``, by default the gradient's). Relative to the sum of the eigenvalues, it is
    also the level that gradients without a component in a direction leave there."""
    d_in, d_out = g.width_in // g.groups, g.width_out // g.groups
    return torch.finfo(dtype or g.dtype).eps ** 2 * (d_in + d_out)


class KroneckerFisher(Fisher):
    """What the Kronecker-factored Fishers share: the factors A and G, their eigenbases and eigenvalues,
    packed in files; ``KFAC`` and ``KFACTikhonov`` differ in how they invert them."""

    sums: ClassVar[dict[int, tuple[str, ...]]] = {0: ("a_cov", "d_cov", "count")}
    coords = "weight"

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.a_cov: Tensor | None = None
        self.d_cov: Tensor | None = None
        self.u_in: Tensor | None = None
        self.u_out: Tensor | None = None
        self.eig_in: Tensor | None = None
        self.eig_out: Tensor | None = None
        self._packed: dict[str, dict[str, Tensor]] | None = None
        self._cast: tuple[Tensor, Tensor, Tensor, Tensor] | None = None  # the bases in the gradients' dtype
        self.in_support: Tensor | None = None  # inputs and outputs that meet a free entry (masked layers)
        self.out_support: Tensor | None = None

    def _update_factors(self, g: LayerGrad) -> None:
        # Factor scales are irrelevant for EKFAC (only eigenvectors are used); KFAC uses the
        # per-position average for A and the per-position sum for B, whose product matches E[vec G vec Gᵀ]
        # when positions are independent.
        t, factors = g.positions, g.factored()
        a = factors.a.double().flatten(0, 1)
        d = factors.d.double().flatten(0, 1)
        # The mask is fixed for a fit, so its support is read once; eigh_on uses only that block.
        if self.in_support is None and (support := g.free_support()) is not None:
            self.in_support, self.out_support = (s.view(g.groups, -1).squeeze(0) for s in support)
        if g.groups == 1:
            ac, dc = a.T @ a / t, d.T @ d
        else:  # one factor per group: (groups, k, k)
            a, d = a.view(a.shape[0], g.groups, -1), d.view(d.shape[0], g.groups, -1)
            ac, dc = torch.einsum("mgi,mgj->gij", a, a) / t, torch.einsum("mgi,mgj->gij", d, d)
        self.a_cov = ac if self.a_cov is None else self.a_cov + ac
        self.d_cov = dc if self.d_cov is None else self.d_cov + dc
        self.count += g.n

    def update(self, g: LayerGrad, pass_index: int) -> None:
        if pass_index == 0:
            self._update_factors(g)

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        if pass_index == 0:
            self._need_data()
            assert self.a_cov is not None and self.d_cov is not None
            factors = factors or FactorCache()
            self.eig_in, self.u_in = factors.eigh(self.a_cov / self.count, self.in_support)
            self.eig_out, self.u_out = factors.eigh(self.d_cov / self.count, self.out_support)
            self.a_cov = self.d_cov = self.in_support = self.out_support = None  # bases suffice now

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> None:
        super().map_tensors(fn)
        if self._packed is not None:
            self._packed = {k: {n: fn(t) for n, t in v.items()} for k, v in self._packed.items()}

    def _bases(self, g: LayerGrad) -> tuple[Tensor, Tensor]:
        """The eigenbases (output, input) on ``g``'s device, rebuilt from the packed ones once loaded."""
        self._follow(g)
        if self.u_in is None and self._packed is not None:  # loaded: rebuild the bases on first use
            self.u_in, self.u_out = (unpack_orthogonal(self._packed[k]) for k in ("u_in", "u_out"))
        assert self.u_out is not None and self.u_in is not None
        return self.u_out, self.u_in

    def _rotate(self, g: LayerGrad) -> LayerGrad:
        u_out, u_in = self._bases(g)
        c = self._cast
        if c is None or c[0] is not u_out or c[1] is not u_in or c[2].dtype != g.dtype:
            c = self._cast = (u_out, u_in, u_out.to(g.dtype), u_in.to(g.dtype))
        return g.rotated(c[2], c[3])

    def _eigenvalues(self) -> Tensor:
        assert self.eig_out is not None and self.eig_in is not None
        # outer product per group, blocks stacked like the gradient matrix
        return (self.eig_out.clamp_min(0)[..., :, None] * self.eig_in.clamp_min(0)[..., None, :]).flatten(
            0, -2
        )

    def _values(self) -> dict[str, Tensor | None]:
        """The eigenvalues scoring needs, by attribute name."""
        return {"eig_in": self.eig_in, "eig_out": self.eig_out}

    @classmethod
    def file_bytes(cls, shape: LayerShape) -> int:
        # Householder reflectors and tau: n(n+1)/2 float32 numbers per basis, plus the eigenvalues
        bases = shape.groups * (shape.d_in * (shape.d_in + 1) + shape.d_out * (shape.d_out + 1)) // 2
        return 4 * (bases + cls._eigenvalue_count(shape))

    @classmethod
    def _eigenvalue_count(cls, shape: LayerShape) -> int:
        return shape.groups * (shape.d_in + shape.d_out)

    @classmethod
    def work_bytes(cls, shape: LayerShape) -> int:
        # float64 factors, a batch's factors, their bases (and eigh's copy), the float32 cast of the bases
        return 4 * 8 * shape.factors + 4 * shape.factors + 2 * 8 * cls._eigenvalue_count(shape)

    def state(self) -> dict[str, Any]:
        values = {k: v.float() for k, v in self._values().items() if v is not None}
        plain = {"count": self.count, "rcond": self.unspanned_level()}
        if self._packed is not None:
            return self._packed | values | plain
        assert self.u_in is not None and self.u_out is not None
        bases = {"u_in": pack_orthogonal(self.u_in), "u_out": pack_orthogonal(self.u_out)}
        return bases | values | plain

    def load_state(self, state: dict[str, Any]) -> None:
        """Keeps the packed bases; they are rebuilt (≈0.5 s for a 2049-wide layer) when first scored.
        Refuses bases and eigenvalues of inconsistent sizes, non-finite or negative eigenvalues."""
        self._packed = {k: _packed_basis(field(state, k, dict), k) for k in ("u_in", "u_out")}
        self.u_in = self.u_out = None
        for k in self._values():
            setattr(self, k, tensor(field(state, k, Tensor), k, nonnegative=k == "scale").double())
        self.count = count(state, "count")
        self._load_level(state.get("rcond"))  # absent from files saved before it was decided at fit
        self._check_sizes()

    def unspanned_level(self) -> float | None:
        """The level below which directions count as not spanned by the fit (``KFAC.unspanned_level``);
        None: no such floor (the factored damping of ``KFACTikhonov`` bounds every weight)."""
        return None

    def _load_level(self, rcond: Any) -> None:
        """A fitted Fisher's ``unspanned_level`` from its file: a Fisher without a floor keeps none."""

    def _check_sizes(self) -> None:
        """Eigenvalues of one input and one output coordinate per basis column."""
        assert self._packed is not None and self.eig_in is not None and self.eig_out is not None
        for k, eig in (("in", self.eig_in), ("out", self.eig_out)):
            if tuple(eig.shape) != tuple(self._packed[f"u_{k}"]["tau"].shape):
                raise CheckpointError(f"field 'eig_{k}' does not fit its basis u_{k}")


class KFAC(KroneckerFisher):
    """KFAC factors and their eigenbases; the quadratic form uses the Kronecker eigenvalues, less the
    rounding of directions the fit images do not span (``unspanned_level``)."""

    name = "kfac"

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.rcond_: float | None = None  # the unspanned level decided by the fit (``unspanned_level``)
        self._fit_rcond: float | None = None  # ``default_rcond`` of the gradients fitted on
        self._unspanned: Tensor | None = None  # where the eigenvalues are at most that level
        self._decided = False

    def _update_factors(self, g: LayerGrad) -> None:
        super()._update_factors(g)
        self._fit_rcond = default_rcond(g)

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        super().end_pass(pass_index, factors)
        if pass_index == self.passes - 1:
            self.rcond_ = self.rcond if self.rcond is not None else self._fit_rcond

    def _unspanned_directions(self, lam: Tensor, g: LayerGrad) -> Tensor | None:
        """Where ``lam`` is at most ``rcond_`` × its sum (None: nowhere), found once and kept. The saved
        eigenvalues are float32, so the test is made on float32 values whether fitted or loaded."""
        if not self._decided:
            rcond = self.rcond_ if self.rcond_ is not None else default_rcond(g, torch.float32)
            lam = lam.float().double()  # as saved
            floor = lam <= rcond * lam.sum()
            self._unspanned = floor if rcond > 0 and bool(floor.any()) else None
            self._decided = True
        return self._unspanned

    def unspanned_level(self) -> float | None:
        """``rcond``: directions whose eigenvalue is at most ``rcond`` × the sum of the eigenvalues (the
        mean squared gradient norm) are taken as not spanned by the fit images, as ``rcond`` in
        ``numpy.linalg.pinv`` marks singular values as zero. Default (``rcond=None``): the square of the
        fit gradients' rounding, ``(ε·√(d_in + d_out))²`` for their dtype, the level that gradients
        without a component in a direction leave there; 0 keeps every direction. Decided when the Fisher
        is fitted and saved with it.

        A layer whose inputs span fewer directions than it has (a diffusion UNet's time-embedding layers
        see only the embeddings of the K fixed timesteps) has such eigenvalues, and every image's gradient
        components there are rounding too: their quotient is a number of order one per component that
        each device rounds to another value (one layer's score: CPU 113–143 against GPU 50–80). In those
        directions scoring counts only what a component has beyond its gradient's own rounding,
        ``max(r² − (ε·√(d_in + d_out))²·‖r‖², 0) / (λ + damping)`` (ε of the scored gradients' dtype):
        continuous in the gradient, zero for rounding, and nearly ``r² / (λ + damping)`` for a component
        well above it (an input the fit images never had)."""
        return self.rcond_

    def quad(self, g: LayerGrad) -> Tensor:
        """``Σ_ij r_ij² / (λ_ij + damping)`` of the rotated gradient r, less each component's rounding in
        the directions the Fisher does not span (``unspanned_level``)."""
        rot, lam = self._rotate(g), self._eigenvalues()
        floor = self._unspanned_directions(lam, g)
        weight = 1.0 / (lam + self.damping)
        if floor is None:
            return rot.weighted_square(weight)
        return rot.floored_square(weight, floor, default_rcond(g))  # less this gradient's own rounding

    def _load_level(self, rcond: Any) -> None:
        if rcond is not None and (not isinstance(rcond, float) or not 0.0 <= rcond < 1.0):
            raise CheckpointError(f"field 'rcond' must be a number in [0, 1), got {shown(rcond)}")
        self.rcond_, self._unspanned, self._decided = rcond, None, False


class EKFAC(KFAC):
    """KFAC eigenbasis with eigenvalues re-estimated from the true per-sample gradients (second pass)."""

    name = "ekfac"
    passes = 2
    sums: ClassVar[dict[int, tuple[str, ...]]] = KFAC.sums | {1: ("scale", "scale_count")}

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.scale: Tensor | None = None
        self.scale_count = 0

    def update(self, g: LayerGrad, pass_index: int) -> None:
        if pass_index == 0:
            self._update_factors(g)
            return
        s = self._rotate(g).square_sum()
        self.scale = s if self.scale is None else self.scale + s
        self.scale_count += g.n

    def _eigenvalues(self) -> Tensor:
        assert self.scale is not None
        return self.scale / self.scale_count

    def _values(self) -> dict[str, Tensor | None]:
        return {"scale": self.scale}

    @classmethod
    def _eigenvalue_count(cls, shape: LayerShape) -> int:
        return shape.params

    def state(self) -> dict[str, Any]:
        return super().state() | {"scale_count": self.scale_count}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.scale_count = count(state, "scale_count")

    def _check_sizes(self) -> None:
        """The re-estimated eigenvalues: one per (output, input) coordinate pair of every group."""
        assert self._packed is not None and self.scale is not None
        tau_in, tau_out = self._packed["u_in"]["tau"], self._packed["u_out"]["tau"]
        groups = tau_in.shape[0] if tau_in.dim() == 2 else 1
        if tau_in.dim() != tau_out.dim() or tuple(self.scale.shape) != (
            groups * tau_out.shape[-1],
            tau_in.shape[-1],
        ):
            raise CheckpointError("field 'scale' does not fit the bases u_in and u_out")


class KFACTikhonov(KroneckerFisher):
    """KFAC with factored Tikhonov damping (Martens & Grosse 2015, §6.3): ``F⁻¹ ≈ (A + ε_A I)⁻¹ ⊗ (G +
    ε_G I)⁻¹``, each factor damped by √``damping`` × its mean eigenvalue (scale-free; a factor whose
    eigenvalues are all 0 by √``damping``). The inverse is a Kronecker product, so a layer's score is the
    double sum over positions ``Σ_{s,s'} (a_sᵀ(A + ε_A)⁻¹a_s')(δ_sᵀ(G + ε_G)⁻¹δ_s')``, which never forms
    the d_out × d_in gradient; each batch takes it or the transformed gradients, whichever a cost model
    finds cheaper (``LayerGrad.kronecker_square``). The damping bounds every weight, so no direction needs
    a rounding floor: ``rcond`` is not used."""

    name = "kfac-tikhonov"

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, None)  # no rounding floor: the damping bounds every weight
        self._roots: tuple[Tensor, Tensor, Tensor, Tensor] | None = None  # bases, then L_out, L_in

    def _root(self, u: Tensor, eig: Tensor) -> Tensor:
        """``U diag((λ + ε)^-½)``: its outer square is the damped factor's inverse (per group)."""
        eig = eig.clamp_min(0)
        mean = eig.mean(-1, keepdim=True)
        eps = self.damping**0.5 * torch.where(mean > 0, mean, torch.ones_like(mean))
        return u * (eig + eps).rsqrt().unsqueeze(-2)

    def quad(self, g: LayerGrad) -> Tensor:
        """``‖L_outᵀ G_n L_in‖²`` with ``L L ᵀ`` each damped factor's inverse."""
        u_out, u_in = self._bases(g)
        r = self._roots
        if r is None or r[0] is not u_out or r[1] is not u_in or r[2].dtype != g.dtype:
            assert self.eig_out is not None and self.eig_in is not None
            roots = self._root(u_out, self.eig_out).to(g.dtype), self._root(u_in, self.eig_in).to(g.dtype)
            r = self._roots = (u_out, u_in, *roots)
        return g.kronecker_square(r[2], r[3])


FISHERS: Registry[str, type[Fisher]] = Registry("Fisher approximation")
for _fisher in (DenseFisher, DiagFisher, KFACTikhonov, KFAC, EKFAC):
    FISHERS.register(_fisher.name, _fisher)


def make_fisher(kind: str, damping: float = 1e-8, rcond: float | None = None) -> Fisher:
    """A fresh Fisher approximation by name: dense, diag, kfac, kfac-tikhonov or ekfac (``rcond``: KFAC's
    and EKFAC's unspanned level, ``KFAC.unspanned_level``)."""
    return FISHERS.get(kind)(damping, rcond)
