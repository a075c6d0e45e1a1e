"""Each Fisher approximation against its definition, computed densely from per-sample gradients."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from roseood.curvature import (
    EKFAC,
    KFAC,
    DenseFisher,
    DiagFisher,
    FactorCache,
    FactoredGrad,
    LayerGrad,
    LayerGradients,
    make_fisher,
)
from roseood.curvature.handlers import declare_mask
from roseood.curvature.kronecker import gram, pack_orthogonal, unpack_orthogonal
from roseood.errors import CheckpointError, RoseError

pytestmark = pytest.mark.float_sensitive  # Fisher quadratic forms against dense oracles


def fitted(kind: str, grads, damping: float = 1e-3):
    f = make_fisher(kind, damping)
    for p in range(f.passes):
        for g in grads:
            f.update(g, p)
        f.end_pass(p)
    return f


@pytest.fixture
def layer_batches(tiny_vae):
    """Per-sample gradients of the VAE's first conv (64 weights, 256 positions) in three batches."""
    torch.manual_seed(3)
    lg = LayerGradients(tiny_vae, ["encoder.conv1"])
    return [lg(tiny_vae.rose_loss, torch.rand(40, 1, 32, 32))["encoder.conv1"] for _ in range(3)]


def dense_fisher(batches) -> torch.Tensor:
    s = torch.cat([g.flat().double() for g in batches])
    return s.T @ s / s.shape[0]


def test_diag_is_the_diagonal_of_the_empirical_fisher(layer_batches):
    f = fitted("diag", layer_batches)
    s = layer_batches[0].flat().double()
    expected = (s.pow(2) / (torch.diagonal(dense_fisher(layer_batches)) + 1e-3)).sum(1)
    torch.testing.assert_close(f.quad(layer_batches[0]), expected, rtol=1e-5, atol=0)


def test_dense_solves_the_damped_fisher(layer_batches):
    f = fitted("dense", layer_batches)
    s = layer_batches[1].flat().double()
    fm = dense_fisher(layer_batches) + 1e-3 * torch.eye(s.shape[1], dtype=torch.float64)
    expected = (s * torch.linalg.solve(fm, s.T).T).sum(1)
    # float64 from the gradients on: measured 4e-16 (AMD AVX2, default and MKL_CBWR=COMPATIBLE)
    torch.testing.assert_close(f.quad(layer_batches[1]), expected, rtol=1e-6, atol=0)


def kron_basis(batches) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.cat([g.factored().a.double().flatten(0, 1) for g in batches])
    d = torch.cat([g.factored().d.double().flatten(0, 1) for g in batches])
    return torch.linalg.eigh(d.T @ d)[1], torch.linalg.eigh(a.T @ a)[1]


def test_ekfac_rescales_the_kfac_eigenbasis_with_true_second_moments(layer_batches):
    f = fitted("ekfac", layer_batches)
    u_out, u_in = kron_basis(layer_batches)
    basis = torch.kron(u_out, u_in)  # vec(U_outᵀ G U_in) = basisᵀ vec(G) for row-major vec
    fm = dense_fisher(layer_batches)
    scale = torch.diagonal(basis.T @ fm @ basis)
    s = layer_batches[2].flat().double()
    expected = ((s @ basis).pow(2) / (scale + 1e-3)).sum(1)
    torch.testing.assert_close(f.quad(layer_batches[2]), expected, rtol=1e-4, atol=0)


def test_ekfac_is_closer_to_the_true_fisher_than_kfac(layer_batches):
    """George et al. 2018: the re-estimated diagonal is optimal in the Kronecker eigenbasis."""
    fm = dense_fisher(layer_batches)
    u_out, u_in = kron_basis(layer_batches)
    basis = torch.kron(u_out, u_in)
    ekfac, kfac = fitted("ekfac", layer_batches), fitted("kfac", layer_batches)
    approx_e = basis @ torch.diag(ekfac._eigenvalues().flatten()) @ basis.T
    approx_k = basis @ torch.diag(kfac._eigenvalues().flatten()) @ basis.T
    err_e, err_k = (approx_e - fm).norm(), (approx_k - fm).norm()
    assert err_e < err_k
    assert err_e < 0.9 * fm.norm()


def test_ekfac_equals_dense_when_the_fisher_is_diagonal_in_the_kronecker_basis():
    """One input feature and one output: the layer has a single weight, EKFAC is exact."""
    seq = nn.Sequential(nn.Linear(1, 1, bias=False))
    grads = LayerGradients(seq, ["0"])(lambda b: seq(b).pow(2).sum(1), torch.randn(50, 1))["0"]
    e, d = fitted("ekfac", [grads], 0.0), fitted("dense", [grads], 0.0)
    torch.testing.assert_close(e.quad(grads), d.quad(grads), rtol=1e-5, atol=0)  # float32 rotation
    # and over the in-distribution samples themselves the mean of sᵀF⁻¹s is the dimension (1)
    torch.testing.assert_close(
        d.quad(grads).mean(), torch.tensor(1.0, dtype=torch.float64), rtol=1e-6, atol=0
    )


EMBED = torch.randn(4, 24, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def timestep_layer(n: int, seed: int, dtype: torch.dtype, outside: float = 0.0) -> LayerGrad:
    """Gradients of a 24 → 16 linear layer whose inputs at its 4 positions are 4 fixed vectors (rank 4),
    as a diffusion UNet's time-embedding layers see only the K fixed timesteps' embeddings; large
    output gradients put the rounding of the Fisher's 20 unspanned input directions above the damping.
    ``outside``: each input also gets a component that size outside the 4 vectors' span."""
    gen = torch.Generator().manual_seed(seed)
    a = EMBED.expand(n, 4, 24).clone()
    if outside:
        null = torch.linalg.svd(EMBED)[2][4:]  # (20, 24): orthonormal, orthogonal to the 4 vectors
        a += outside * EMBED.norm(dim=1).mean() * null[0]
    d = 1e3 * torch.randn(n, 4, 16, generator=gen, dtype=torch.float64)
    return FactoredGrad(a.to(dtype), d.to(dtype))


@pytest.mark.parametrize("kind", ["kfac", "ekfac", "ekfac-compact"])
def test_unspanned_directions_score_the_same_in_float32_and_float64(kind):
    """The rotated gradients' components in the 20 directions no input reaches are rounding, and so are
    the Fisher's eigenvalues there: their quotients made float32 scores up to 3.4× (EKFAC) and 7.4×
    (KFAC) the exact ones before scoring dropped them. A component well above the rounding there (an
    input the fit never had) is kept: it is what makes such an input OOD."""
    scores = {}
    for dtype in (torch.float32, torch.float64):
        f = fitted(kind, [timestep_layer(100, seed, dtype) for seed in range(3)], damping=1e-8)
        scores[dtype] = f.quad(timestep_layer(8, 9, dtype)), f.quad(timestep_layer(8, 9, dtype, outside=1e-3))
    # float32 gradients rotated in float32: measured 2e-7 relative (AMD AVX2)
    torch.testing.assert_close(scores[torch.float32][0], scores[torch.float64][0], rtol=1e-4, atol=0)
    for within, outside in scores.values():
        assert outside.min() > 1e3 * within.max()


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_kronecker_masks_give_the_kronecker_fisher_of_the_free_parameters(kind):
    """Masking inputs 1 and 3 for every output (as a PixelCNN masks future pixels) leaves a layer on
    inputs 0, 2, 4: its KFAC/EKFAC scores must be exactly those of that smaller layer, which the
    factors of the full weight (with the unseen inputs' covariances mixed in) are not."""
    torch.manual_seed(0)
    free = [0, 2, 4]
    mask = torch.zeros(3, 5)
    mask[:, free] = 1.0
    masked, small = nn.Linear(5, 3), nn.Linear(3, 3)
    with torch.no_grad():
        masked.weight.mul_(mask)
        small.weight.copy_(masked.weight[:, free]), small.bias.copy_(masked.bias)
    declare_mask(masked, mask)
    x = torch.randn(4, 64, 5) @ torch.randn(5, 5)  # correlated inputs, so the masked ones would matter

    def grads(layer: nn.Linear, inputs: list[torch.Tensor]) -> list:
        net = nn.Sequential(layer)
        lg = LayerGradients(net, ["0"], coords="weight")
        return [lg(lambda b: net(b).tanh().sum(1), xb)["0"] for xb in inputs]

    big, reduced = grads(masked, list(x)), grads(small, [xb[:, free] for xb in x])
    f_big, f_small = fitted(kind, big), fitted(kind, reduced)
    torch.testing.assert_close(f_big.quad(big[0]), f_small.quad(reduced[0]), rtol=1e-4, atol=1e-8)


def test_factor_first_and_matrix_first_rotations_agree(layer_batches):
    g = layer_batches[0]
    u_out = torch.linalg.qr(torch.randn(g.width_out, g.width_out))[0]
    u_in = torch.linalg.qr(torch.randn(g.width_in, g.width_in))[0]
    via_matrix = u_out.T @ g.matrix() @ u_in
    torch.testing.assert_close(g.rotated(u_out, u_in).matrix(), via_matrix, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cls", [DiagFisher, DenseFisher, KFAC, EKFAC])
def test_state_round_trip(cls, layer_batches):
    """Saved states are compact (float32 eigenbases as reflectors) yet score within 1e-5."""
    f = fitted(cls.name, layer_batches, damping=1e-8)
    g = cls(1e-8)
    g.load_state(f.state())
    torch.testing.assert_close(g.quad(layer_batches[0]), f.quad(layer_batches[0]), rtol=1e-5, atol=0)


def test_orthogonal_packing_keeps_the_basis_up_to_column_signs():
    u = torch.linalg.qr(torch.randn(50, 50, dtype=torch.float64))[0]
    packed = pack_orthogonal(u)
    assert packed["reflectors"].numel() == 50 * 49 // 2 and packed["reflectors"].dtype == torch.float32
    back = unpack_orthogonal(packed).double()
    # float32 reflectors: measured 2.4e-7 (AMD AVX2, default and MKL_CBWR=COMPATIBLE), a quarter of 1e-6
    torch.testing.assert_close(back.abs(), u.abs(), rtol=0, atol=1e-6)
    torch.testing.assert_close(back.T @ back, torch.eye(50, dtype=torch.float64), rtol=0, atol=1e-6)


def test_errors():
    with pytest.raises(RoseError, match="unknown Fisher"):
        make_fisher("full")
    with pytest.raises(RoseError, match="no samples"):
        DiagFisher().end_pass(0)


def test_layers_reading_the_same_inputs_share_one_eigendecomposition(tiny_vae, images):
    """The mean and log-variance heads see the same features: one eigh of their input factor, equal to
    what each layer would compute alone."""
    heads = ["encoder.mu", "encoder.logvar"]
    grads = LayerGradients(tiny_vae, heads)(tiny_vae.rose_loss, images)
    factors = FactorCache()
    shared = {}
    for name in heads:
        shared[name] = KFAC()
        shared[name].update(grads[name], 0)
        shared[name].end_pass(0, factors)
    alone = fitted("kfac", [grads["encoder.logvar"]], damping=1e-8)
    assert shared["encoder.logvar"].u_in is shared["encoder.mu"].u_in
    assert shared["encoder.logvar"].u_out is not shared["encoder.mu"].u_out
    # exact: the same gradients through the same float64 eigendecomposition, in one process
    assert torch.equal(shared["encoder.logvar"].u_in, alone.u_in)
    assert torch.equal(shared["encoder.logvar"].u_out, alone.u_out)


def _axis_layer() -> tuple[list[LayerGrad], Callable[[torch.Tensor], LayerGrad]]:
    """A 24 → 1 layer fitted on inputs in coordinates 0–3 only (20 unspanned input directions), and
    test gradients with input 1 in coordinate 0 and ``s`` in coordinate 5, an unspanned one."""
    gen = torch.Generator().manual_seed(0)
    fit = []
    for _ in range(3):
        a = torch.zeros(64, 1, 24)
        a[..., :4] = torch.randn(64, 1, 4, generator=gen)
        fit.append(FactoredGrad(a, 1e3 * torch.randn(64, 1, 1, generator=gen)))

    def test(s: torch.Tensor) -> LayerGrad:
        a = torch.zeros(len(s), 1, 24)
        a[:, 0, 0], a[:, 0, 5] = 1.0, s
        return FactoredGrad(a, torch.full((len(s), 1, 1), 1e3))

    return fit, test


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_a_component_crossing_the_rounding_level_moves_the_score_continuously(kind):
    """Sweeping an unspanned component from 0 to well above its gradient's rounding level: the score
    rises with no jump. A hard cut (weight 0 below the level, 1/damping above) jumps by the level's
    whole weight at the crossing, here about 45× the sweep's last step; the counted excess over the
    level, max(r² − level, 0), is convex in the component, so no step exceeds the last (up to float32
    rounding of the summed score, a few 1e-7 of it)."""
    fit, test = _axis_layer()
    f = fitted(kind, fit, damping=1e-8)
    s = torch.linspace(0.0, 4e-6, 4001)
    scores = f.quad(test(s))
    steps = scores.diff()
    assert scores[-1] > 10 * scores[0]  # the sweep crosses the level by far
    assert steps.min() > -1e-6 * scores[-1]
    assert steps.max() <= 1.5 * steps[-10:].mean()


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_the_unspanned_level_is_decided_at_fit_saved_and_an_option(kind):
    """``rcond`` is decided when the Fisher is fitted (the fit gradients' rounding by default), saved with
    it and read back; 0 counts every direction in full; a bad value in a file is refused."""
    fit, test = _axis_layer()
    s = torch.linspace(0.0, 4e-6, 9)
    f = fitted(kind, fit, damping=1e-8)
    assert f.rcond_ == pytest.approx(torch.finfo(torch.float32).eps ** 2 * 25)
    again = make_fisher(kind, 1e-8)
    again.load_state(f.state())
    assert again.rcond_ == f.rcond_
    torch.testing.assert_close(again.quad(test(s)), f.quad(test(s)), rtol=1e-6, atol=0)
    every = make_fisher(kind, 1e-8, rcond=0.0)
    for p in range(every.passes):
        for g in fit:
            every.update(g, p)
        every.end_pass(p)
    assert every.rcond_ == 0.0
    rot = every._rotate(test(s))  # type: ignore[attr-defined]
    plain = rot.weighted_square(1.0 / (every._eigenvalues() + 1e-8))  # type: ignore[attr-defined]
    torch.testing.assert_close(every.quad(test(s)), plain)
    assert (every.quad(test(s))[1:] > f.quad(test(s))[1:]).all()  # the rounding is counted too
    with pytest.raises(CheckpointError, match="field 'rcond' must be a number"):
        again.load_state(f.state() | {"rcond": -1.0})


def test_gram_sums_each_samples_float32_product_in_float64():
    """``gram``'s float32 products stay within float32's rounding of the float64 product, per group as for
    the whole; being each sample's own, their float64 sum does not depend on how samples are batched
    (nor sharded over processes); without ``single`` it is the float64 product itself."""
    rows = torch.randn(6, 300, 12, generator=torch.Generator().manual_seed(0))
    flat = rows.double().flatten(0, 1)
    exact = flat.T @ flat
    torch.testing.assert_close(gram(rows), exact, rtol=1e-12, atol=0)
    single = gram(rows, single=True)
    assert single.dtype == torch.float64
    assert float((single - exact).abs().max() / exact.abs().max()) < 1e-6
    torch.testing.assert_close(
        gram(rows[:2], single=True) + gram(rows[2:], single=True), single, rtol=1e-14, atol=0
    )
    grouped = gram(rows, 2, single=True)
    for g, half in enumerate(flat.split(6, dim=1)):
        torch.testing.assert_close(grouped[g], half.T @ half, rtol=1e-6, atol=1e-6 * float(exact.abs().max()))


def _factor_batches(seed: int, positions: int, batches: int = 40) -> list[LayerGrad]:
    """Batches of 8 images, each with ``positions`` rows of 4 inputs and 3 outputs, one distribution."""
    g = torch.Generator().manual_seed(seed)
    return [
        FactoredGrad(torch.randn(8, positions, 4, generator=g), torch.randn(8, positions, 3, generator=g))
        for _ in range(batches)
    ]


def test_ekfac_factors_stop_taking_batches_once_settled_and_kfac_never_does():
    """With 64 positions per image, 4- and 3-wide factors have ``FACTOR_ROWS`` rows per coordinate long
    before ``FACTOR_IMAGES`` images, so EKFAC's first pass stops there; KFAC, whose eigenvalues are the
    factors', takes every batch; the second pass always wants all. One row per image of 400 inputs (a
    VAE's dense head) is not of full rank at that count and goes on."""
    ekfac, kfac = EKFAC(), KFAC()
    for g in _factor_batches(0, 64, EKFAC.FACTOR_IMAGES // 8 + 4):
        for f in (ekfac, kfac):
            if f.wants(0):
                f.update(g, 0)
    assert not ekfac.wants(0) and ekfac.wants(1) and kfac.wants(0)
    assert ekfac.count == EKFAC.FACTOR_IMAGES and kfac.count == EKFAC.FACTOR_IMAGES + 32
    wide = EKFAC()
    g = torch.Generator().manual_seed(1)
    for _ in range(EKFAC.FACTOR_IMAGES // 8 + 4):
        wide.update(FactoredGrad(torch.randn(8, 1, 400, generator=g), torch.randn(8, 1, 3, generator=g)), 0)
    assert wide.wants(0) and wide.count == EKFAC.FACTOR_IMAGES + 32


def test_the_fit_line_names_the_layers_whose_factors_settled():
    """Which layers' first pass stopped early and why, and those that took every image; nothing when none
    stopped."""
    from roseood.curvature import settled_line

    early, late = EKFAC(), EKFAC()
    early.count, late.count = EKFAC.FACTOR_IMAGES, 512
    line = settled_line("ekfac", {"a": early, "b": late}, 512)
    assert line is not None and "of 1 of 2 layers settled after 256 images" in line
    assert "1 took all 512" in line and "another kind" not in line
    # a layer given a diagonal Fisher (compact EKFAC's small layers) is not said to have taken them all
    line = settled_line("ekfac-compact", {"a": early, "c": make_fisher("diag")}, 512)
    assert line is not None and "took all" not in line and "1 are of another kind (one pass)" in line
    assert settled_line("ekfac", {"b": late}, 512) is None
