"""The Kronecker-factored Fishers: KFAC (A ⊗ B with A = E[a aᵀ], B = E[δ δᵀ]; Martens & Grosse 2015,
Grosse & Martens 2016 for convs), its Tikhonov-damped form, and EKFAC (the eigenbasis of KFAC with the
diagonal re-estimated in it; George et al. 2018), as in the ROSE paper. Eigenbases are saved as float32
Householder reflectors; see ``roseood.curvature.fisher`` for the interface and the masked layers."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from roseood.curvature.fisher import FISHERS, FactorCache, Fisher, LayerShape, pack_tril, unpack_tril
from roseood.curvature.grads import LayerGrad
from roseood.errors import CheckpointError, shown
from roseood.integrity import count, field, tensor


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


def _unpacked(packed: dict[str, Tensor]) -> Tensor:
    """A stored basis: its kept columns as they are (``CompactEKFAC``'s input basis), else the orthogonal
    matrix of its reflectors."""
    return packed["columns"] if "columns" in packed else unpack_orthogonal(packed)


def _packed_basis(packed: dict[str, Any], label: str, columns: bool = False) -> dict[str, Tensor]:
    """A stored basis, checked: with ``columns``, kept columns (finite floats of 2 or 3 dimensions, fewer
    columns than rows), else ``pack_orthogonal``'s finite float reflectors of the size ``tau`` implies."""
    if columns:
        kept = tensor(packed.get("columns"), f"{label}.columns")
        if kept.dim() not in (2, 3) or kept.shape[-1] >= kept.shape[-2]:
            raise CheckpointError(f"field '{label}.columns' must hold fewer columns than rows, per group")
        return {"columns": kept}
    tau = tensor(packed.get("tau"), f"{label}.tau")
    if tau.dim() not in (1, 2):
        raise CheckpointError(f"field '{label}.tau' must have 1 or 2 dimensions, found {tuple(tau.shape)}")
    n = tau.shape[-1]
    shape = (*tau.shape[:-1], n * (n - 1) // 2)
    return {"reflectors": tensor(packed.get("reflectors"), f"{label}.reflectors", shape=shape), "tau": tau}


def gram(rows: Tensor, groups: int = 1, *, single: bool = False) -> Tensor:
    """``Σ_n rows[n]ᵀ rows[n]`` in float64 (per group: (groups, k, k)) of each sample's rows (N, T, groups·k).
    ``single``: each sample's product in float32 (3× faster than float64 on a CPU; the Kronecker factors
    were 80 % of a diffusion model's Fisher fit), the samples summed in float64: the float32 rounding is
    then each sample's own (about √T·ε₃₂ of its product), so the sum does not depend on how the samples
    were batched or sharded over processes, and does not grow with their number."""
    n, t, width = rows.shape
    k = width // groups
    if not single:
        flat = rows.double().reshape(n * t, groups, k).transpose(0, 1)  # (groups, N·T, k)
        total = torch.bmm(flat.mT, flat)
    else:
        per = rows.reshape(n, t, groups, k).permute(0, 2, 1, 3).reshape(n * groups, t, k)
        total = torch.bmm(per.mT, per).double().view(n, groups, k, k).sum(0)
    return total.squeeze(0) if groups == 1 else total


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
    column_bases: ClassVar[tuple[str, ...]] = ()  # bases saved as kept columns, not orthogonal matrices
    basis_only: ClassVar[bool] = False
    """Whether the factors give only the eigenbasis (EKFAC re-estimates the eigenvalues in float64 from
    the gradients): then their products may be float32 (``gram``); KFAC's eigenvalues are the factors'
    own, whose small ones float32 products move by more than 1e-4 of a score (a test bounds it)."""

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
        self.in_free: int | None = None  # the most free inputs of a group (masked layers; None: all)
        self.out_free: int | None = None  # ... and outputs
        self._fit_rcond: float | None = None  # ``default_rcond`` of the gradients fitted on (None: loaded)

    def _update_factors(self, g: LayerGrad) -> None:
        # Factor scales are irrelevant for EKFAC (only eigenvectors are used); KFAC uses the
        # per-position average for A and the per-position sum for B, whose product matches E[vec G vec Gᵀ]
        # when positions are independent.
        t, factors = g.positions, g.factored()
        # The mask is fixed for a fit, so its support is read once; eigh_on uses only that block.
        if self.in_support is None and (support := g.free_support()) is not None:
            self.in_support, self.out_support = (s.view(g.groups, -1).squeeze(0) for s in support)
        ac, dc = (
            gram(f, g.groups, single=self._single(t, f.shape[2] // g.groups)) for f in (factors.a, factors.d)
        )
        ac = ac / t
        self.a_cov = ac if self.a_cov is None else self.a_cov + ac
        self.d_cov = dc if self.d_cov is None else self.d_cov + dc
        self.count += g.n
        self._fit_rcond = default_rcond(g)

    def _single(self, positions: int, size: int) -> bool:
        """Whether a factor of ``size`` coordinates may take float32 products (``gram``): when the factors
        give only the basis and each image's ``positions`` rows alone span the factor, so that none of its
        eigenvalues is near 0, where float32 rounding would pick the basis (a VAE's 1025-input heads on
        96 images moved seed 1's recorded ROSE-EKFAC scores by 9e-3, 25× the CPUs' own spread)."""
        return self.basis_only and positions >= size

    def update(self, g: LayerGrad, pass_index: int) -> None:
        if pass_index == 0:
            self._update_factors(g)

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        if pass_index == 0:
            self._need_data()
            assert self.a_cov is not None and self.d_cov is not None
            factors = factors or FactorCache()
            if self.in_support is not None and self.out_support is not None:
                self.in_free = int(self.in_support.sum(-1).max())
                self.out_free = int(self.out_support.sum(-1).max())
            self.eig_in, self.u_in = factors.eigh(self.a_cov / self.count, self.in_support)
            self.eig_out, self.u_out = factors.eigh(self.d_cov / self.count, self.out_support)
            self.a_cov = self.d_cov = self.in_support = self.out_support = None  # bases suffice now

    def take_first_pass(self, fitted: Fisher) -> bool:
        """A Kronecker Fisher's first pass ends in its factors' eigendecompositions, which the kinds that
        sum the same factors (``basis_only`` alike: KFAC and KFAC-Tikhonov, EKFAC and compact EKFAC) make
        alike: either takes the other's, fitted in this process (a loaded one has no ``default_rcond`` of
        its fit gradients), instead of a factor pass of its own."""
        if not isinstance(fitted, KroneckerFisher) or fitted.name not in self.takes_from:
            return False
        if fitted.basis_only != self.basis_only or fitted.u_in is None or fitted._fit_rcond is None:
            return False
        for key in ("count", "u_in", "u_out", "eig_in", "eig_out", "in_free", "out_free", "_fit_rcond"):
            setattr(self, key, getattr(fitted, key))
        return True

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> None:
        super().map_tensors(fn)
        if self._packed is not None:
            self._packed = {k: {n: fn(t) for n, t in v.items()} for k, v in self._packed.items()}

    def _bases(self, g: LayerGrad) -> tuple[Tensor, Tensor]:
        """The eigenbases (output, input) on ``g``'s device, rebuilt from the packed ones once loaded."""
        self._follow(g)
        if self.u_in is None and self._packed is not None:  # loaded: rebuild the bases on first use
            self.u_in, self.u_out = (_unpacked(self._packed[k]) for k in ("u_in", "u_out"))
        assert self.u_out is not None and self.u_in is not None
        return self.u_out, self.u_in

    def _typed_bases(self, g: LayerGrad) -> tuple[Tensor, Tensor]:
        """``_bases`` in the gradients' dtype, cast once (not batch by batch)."""
        u_out, u_in = self._bases(g)
        c = self._cast
        if c is None or c[0] is not u_out or c[1] is not u_in or c[2].dtype != g.dtype:
            c = self._cast = (u_out, u_in, u_out.to(g.dtype), u_in.to(g.dtype))
        return c[2], c[3]

    def _rotate(self, g: LayerGrad) -> LayerGrad:
        return g.rotated(*self._typed_bases(g))

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
        return self._packed_bases() | values | plain

    def _packed_bases(self) -> dict[str, dict[str, Tensor]]:
        """The bases as saved: float32 Householder reflectors of each orthogonal matrix."""
        assert self.u_in is not None and self.u_out is not None
        return {"u_in": pack_orthogonal(self.u_in), "u_out": pack_orthogonal(self.u_out)}

    def load_state(self, state: dict[str, Any]) -> None:
        """Keeps the packed bases; they are rebuilt (≈0.5 s for a 2049-wide layer) when first scored.
        Refuses bases and eigenvalues of inconsistent sizes, non-finite or negative eigenvalues."""
        self._packed = {
            k: _packed_basis(field(state, k, dict), k, k in self.column_bases) for k in ("u_in", "u_out")
        }
        self.u_in = self.u_out = None
        for k in self._values():
            setattr(self, k, tensor(field(state, k, Tensor), k, nonnegative=k in ("scale", "rest")).double())
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


def _one_pass(fisher: KroneckerFisher) -> bool:
    """Whether its first pass's factors, eigenbases and eigenvalues alike, are its whole fit (KFAC's)."""
    return fisher.passes == 1 and not fisher.basis_only


class KFAC(KroneckerFisher):
    """KFAC factors and their eigenbases; the quadratic form uses the Kronecker eigenvalues, less the
    rounding of directions the fit images do not span (``unspanned_level``)."""

    name = "kfac"
    takes_from: ClassVar[tuple[str, ...]] = ("kfac-tikhonov",)

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.rcond_: float | None = None  # the unspanned level decided by the fit (``unspanned_level``)
        self._unspanned: Tensor | None = None  # where the eigenvalues are at most that level
        self._decided = False

    def end_pass(self, pass_index: int, factors: FactorCache | None = None) -> None:
        super().end_pass(pass_index, factors)
        if pass_index == self.passes - 1:
            self._decide_level()

    def take_first_pass(self, fitted: Fisher) -> bool:
        taken = super().take_first_pass(fitted)
        if taken and self.passes == 1:  # the first pass was the whole fit
            self._decide_level()
        return taken

    def _decide_level(self) -> None:
        """The fit's ``unspanned_level``: ``rcond``, else the fit gradients' ``default_rcond``."""
        self.rcond_ = self.rcond if self.rcond is not None else self._fit_rcond

    def _unspanned_directions(self, lam: Tensor, g: LayerGrad, dims: Tensor | None = None) -> Tensor | None:
        """Where ``lam`` is at most ``rcond_`` × the eigenvalues' sum (None: nowhere), found once and kept;
        ``dims``: how many directions each entry of ``lam`` stands for (their mean), where not one each.
        The saved eigenvalues are float32, so the test is made on float32 values whether fitted or loaded."""
        if not self._decided:
            rcond = self.rcond_ if self.rcond_ is not None else default_rcond(g, torch.float32)
            lam = lam.float().double()  # as saved
            floor = lam <= rcond * (lam if dims is None else lam * dims).sum()
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
    """KFAC eigenbasis with eigenvalues re-estimated from the true per-sample gradients (second pass).

    Its Kronecker factors give only the basis, and a diffusion model's reach a stable one long before the
    fit images run out (each image adds K rows × every position): a layer's first pass stops taking
    batches once its factors have seen ``FACTOR_IMAGES`` images and ``FACTOR_ROWS`` rows per coordinate
    of the wider factor (so never before they are of full rank, nor for a layer of one row per image and
    more inputs than a fit has images, as a VAE's dense heads); the second pass, which re-estimates the
    eigenvalues, takes every image. On ``ddpm-fmnist-s0`` bases from 256 images gave the AUROCs of bases
    from 512 within 0.002 and layer scores within 0.7 % (median; docs/diffusion.md, "What a fit needs")."""

    name = "ekfac"
    passes = 2
    takes_from: ClassVar[tuple[str, ...]] = ()
    sums: ClassVar[dict[int, tuple[str, ...]]] = KFAC.sums | {1: ("scale", "scale_count")}
    basis_only = True
    FACTOR_IMAGES: ClassVar[int] = 256
    FACTOR_ROWS: ClassVar[int] = 100

    def __init__(self, damping: float = 1e-8, rcond: float | None = None) -> None:
        super().__init__(damping, rcond)
        self.scale: Tensor | None = None
        self.scale_count = 0
        self.factor_rows = 0  # rows (positions, a sample's K rows among them) the factors have summed
        self._width = 0  # coordinates of the wider factor (per group)

    def wants(self, pass_index: int) -> bool:
        enough = self.count >= self.FACTOR_IMAGES and self.factor_rows >= self.FACTOR_ROWS * self._width
        return pass_index > 0 or not enough

    def first_pass_images(self) -> int | None:
        if not self.factor_rows:
            return None
        rows_per_image = self.factor_rows / self.count
        return max(self.FACTOR_IMAGES, math.ceil(self.FACTOR_ROWS * self._width / rows_per_image))

    def take_first_pass(self, fitted: Fisher) -> bool:
        taken = super().take_first_pass(fitted)
        if taken:
            assert isinstance(fitted, EKFAC)
            self.factor_rows, self._width = fitted.factor_rows, fitted._width
        return taken

    def update(self, g: LayerGrad, pass_index: int) -> None:
        if pass_index == 0:
            self._update_factors(g)
            self.factor_rows += g.n * g.positions
            self._width = max(g.width_in, g.width_out) // g.groups
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
    takes_from: ClassVar[tuple[str, ...]] = ("kfac",)

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


for _fisher in (KFACTikhonov, KFAC, EKFAC):
    FISHERS.register(_fisher.name, _fisher)


def settled_line(kind: str, fishers: dict[str, Fisher], total: int) -> str | None:
    """The fit line that says which layers' first pass stopped before the last of ``total`` images and why
    (``EKFAC.FACTOR_IMAGES``, ``FACTOR_ROWS``); None when every layer took them all."""
    ekfac = [f for f in fishers.values() if isinstance(f, EKFAC)]
    stopped = [f for f in ekfac if f.count < total]
    if not stopped:
        return None
    rest, other = len(ekfac) - len(stopped), len(fishers) - len(ekfac)
    others = f"; {rest} took all {total} (fewer rows per coordinate)" if rest else ""
    others += f"; {other} are of another kind (one pass)" if other else ""
    bound = f"≥ {EKFAC.FACTOR_IMAGES} images, ≥ {EKFAC.FACTOR_ROWS} rows per coordinate"
    return (
        f"ROSE-{kind}: the Kronecker factors of {len(stopped)} of {len(fishers)} layers settled after "
        f"{max(f.count for f in stopped)} images ({bound}){others}; the eigenvalue pass takes all {total}"
    )
