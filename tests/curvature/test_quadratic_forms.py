"""The quadratic form of a Kronecker product without per-sample gradients: the double sum over positions
``Σ_{s,s'} (ã_s·ã_s')(δ̃_s·δ̃_s')`` and the transformed matrices, each against the per-sample autograd
loop, and KFAC with factored Tikhonov damping against its dense definition."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from roseood.curvature import FactoredGrad, KFACTikhonov, LayerGrad, LayerGradients, layergrad, make_fisher
from roseood.curvature.layergrad import double_sum_cheaper
from tests.curvature.test_grads import loop_grads

pytestmark = pytest.mark.float_sensitive  # quadratic forms against autograd and dense oracles


class Twice(nn.Module):
    """A 3×3 convolution applied twice (shared weights): its gradient is the sum of two calls."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.tanh(self.conv(x)))


LAYERS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "linear": (lambda: nn.Linear(6, 5), (6,)),
    "conv": (lambda: nn.Conv2d(3, 8, 3, padding=1), (3, 4, 4)),
    "grouped conv": (lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2), (4, 4, 4)),
    "strided conv": (lambda: nn.Conv2d(3, 5, 4, stride=2, bias=False), (3, 8, 8)),
    "whole-input conv": (lambda: nn.Conv2d(3, 5, 4), (3, 4, 4)),  # one position: a linear map
    "called twice": (Twice, (4, 3, 3)),
}


def layer_case(name: str) -> tuple[LayerGrad, torch.Tensor, int]:
    """One layer's batched gradients (float64), the autograd loop's matrices, and the layer's groups."""
    torch.manual_seed(0)
    build, shape = LAYERS[name]
    net = nn.Sequential(build()).double()
    x = torch.randn(5, *shape, dtype=torch.float64)

    def loss(b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(net(b)).pow(2).flatten(1).sum(1)

    layer = "0.conv" if name == "called twice" else "0"
    g = LayerGradients(net, [layer])(loss, x)[layer]
    return g, loop_grads(net, loss, x, [layer])[layer], g.groups


def roots(g: LayerGrad, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random full-rank L_out, L_in (one per group), float64."""
    gen = torch.Generator().manual_seed(seed)
    d_out, d_in = g.width_out // g.groups, g.width_in // g.groups

    def one(k: int) -> torch.Tensor:
        m = torch.randn(g.groups, k, k, generator=gen, dtype=torch.float64)
        return m[0] if g.groups == 1 else m

    return one(d_out), one(d_in)


def oracle(matrices: torch.Tensor, groups: int, l_out: torch.Tensor, l_in: torch.Tensor) -> torch.Tensor:
    """``‖L_outᵀ G_n L_in‖²_F`` from the autograd loop's per-sample matrices, block by block."""
    n, d_out = matrices.shape[0], matrices.shape[1] // groups
    blocks = matrices.view(n, groups, d_out, -1)
    lo, li = (l_out, l_in) if groups > 1 else (l_out[None], l_in[None])
    return (lo.mT @ blocks @ li).pow(2).sum((1, 2, 3))


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("double_sum", [True, False])
def test_each_form_of_the_kronecker_quadratic_form_is_the_autograd_loops(name, double_sum, monkeypatch):
    g, matrices, groups = layer_case(name)
    monkeypatch.setattr(layergrad, "double_sum_cheaper", lambda _g: double_sum)
    l_out, l_in = roots(g, 1)
    # float64 throughout: agreement to rounding (measured ≤ 5e-16 relative; AMD AVX2)
    torch.testing.assert_close(
        g.kronecker_square(l_out, l_in), oracle(matrices, groups, l_out, l_in), rtol=1e-9, atol=0
    )


def test_the_double_sum_needs_the_factors_alone():
    a, d = torch.randn(2, 3, 4), torch.randn(2, 3, 5)
    with pytest.raises(ValueError, match="factors alone"):
        FactoredGrad(a, d, mask=torch.ones(5, 4)).double_sum(torch.eye(5), torch.eye(4))
    masked = FactoredGrad(a, d, mask=torch.ones(5, 4))
    # a masked layer always takes the matrices, whatever the cost model says
    torch.testing.assert_close(
        masked.kronecker_square(torch.eye(5), torch.eye(4)),
        masked.matrix().pow(2).sum((1, 2)).double(),
    )


def test_the_cost_model_takes_the_double_sum_at_few_positions_on_wide_layers():
    def shaped(t: int, d_in: int, d_out: int) -> FactoredGrad:
        return FactoredGrad(torch.empty(1, t, d_in), torch.empty(1, t, d_out))

    assert double_sum_cheaper(shaped(1, 512, 512))  # a linear layer: one position
    assert double_sum_cheaper(shaped(16, 9 * 256, 256))  # a 3×3 conv of 256 channels at 4×4
    assert not double_sum_cheaper(shaped(1024, 9 * 32, 32))  # at 32×32 with 32 channels
    assert not double_sum_cheaper(shaped(4096, 27, 64))  # the first conv of a 64×64 RGB model


def tikhonov_oracle(batches: list[LayerGrad], damping: float, test: LayerGrad) -> torch.Tensor:
    """``vec(G_n)ᵀ ((G + ε_G I)⁻¹ ⊗ (A + ε_A I)⁻¹) vec(G_n)`` with KFAC's factors (A: the mean over
    positions of a aᵀ, G: the sum over positions of δ δᵀ, each averaged over samples) built densely."""
    a = torch.cat([b.factored().a.double() for b in batches])
    d = torch.cat([b.factored().d.double() for b in batches])
    n, t = a.shape[0], a.shape[1]
    fa = torch.einsum("nti,ntj->ij", a, a) / t / n
    fg = torch.einsum("nti,ntj->ij", d, d) / n

    def damped_inverse(f: torch.Tensor) -> torch.Tensor:
        eps = damping**0.5 * torch.linalg.eigvalsh(f).clamp_min(0).mean()
        return torch.linalg.inv(f + eps * torch.eye(f.shape[0], dtype=f.dtype))

    m = torch.kron(damped_inverse(fg), damped_inverse(fa))  # row-major vec of (Dout, Din)
    s = test.matrix().double().flatten(1)
    return (s @ m * s).sum(1)


@pytest.mark.parametrize("double_sum", [True, False])
def test_kfac_tikhonov_is_its_dense_definition_by_either_form(double_sum, monkeypatch):
    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.Tanh(), nn.Conv2d(6, 2, 3))
    lg = LayerGradients(net, ["0"])
    batches = [lg(lambda b: net(b).pow(2).flatten(1).sum(1), torch.randn(12, 3, 5, 5))["0"] for _ in range(3)]
    f = make_fisher("kfac-tikhonov", 1e-4)
    for b in batches:
        f.update(b, 0)
    f.end_pass(0)
    monkeypatch.setattr(layergrad, "double_sum_cheaper", lambda _g: double_sum)
    # float32 gradients and transforms: measured ≤ 1.7e-7 relative (AMD AVX2), 60× inside 1e-5
    torch.testing.assert_close(
        f.quad(batches[1]), tikhonov_oracle(batches, 1e-4, batches[1]), rtol=1e-4, atol=0
    )
    assert f.unspanned_level() is None
    loaded = KFACTikhonov(1e-4)
    loaded.load_state(f.state())
    torch.testing.assert_close(loaded.quad(batches[2]), f.quad(batches[2]), rtol=1e-5, atol=0)


def masked_case() -> LayerGrad:
    """Rank-one factored gradients with a mask (a masked linear layer), float64."""
    gen = torch.Generator().manual_seed(3)
    a, d = torch.randn(5, 1, 7, generator=gen, dtype=torch.float64), torch.randn(5, 1, 4, generator=gen)
    mask = (torch.rand(4, 7, generator=gen) > 0.3).double()
    return FactoredGrad(a, d.double(), mask=mask)


@pytest.mark.parametrize("name", [*LAYERS, "rotated", "masked"])
@pytest.mark.parametrize("run_bytes", [1, 200, layergrad.RUN_BYTES])
def test_weighted_and_floored_squares_in_runs_are_those_of_the_whole_matrices(name, run_bytes, monkeypatch):
    """Runs of one sample, of a few and of the whole batch give the squares of the whole matrices:
    ``Σ w G²`` and, on the floor's entries, ``max(G² − level·‖G‖², 0)``."""
    if name == "masked":
        g = masked_case()
    else:
        g, _, _ = layer_case("conv" if name == "rotated" else name)
        if name == "rotated":
            g = g.rotated(*roots(g, 2))
    monkeypatch.setattr(layergrad, "RUN_BYTES", run_bytes)
    matrices = g.matrix().flatten(1)
    assert torch.equal(torch.cat(list(g.matrix_runs())), matrices)
    gen = torch.Generator().manual_seed(4)
    w = torch.rand(g.width_out, g.width_in // g.groups, generator=gen, dtype=torch.float64)
    floor = torch.rand(w.shape, generator=gen) > 0.5
    sq = matrices.pow(2)
    level = 0.01  # far above rounding, so that the floor takes some entries' squares to zero and not others
    floored = torch.where(floor.flatten(), (sq - level * sq.sum(1, keepdim=True)).clamp_min(0.0), sq)
    assert bool((floored[:, floor.flatten()] == 0).any() and (floored[:, floor.flatten()] > 0).any())
    torch.testing.assert_close(g.weighted_square(w), sq @ w.flatten(), rtol=1e-12, atol=0)
    torch.testing.assert_close(g.square_sum().flatten(), sq.sum(0), rtol=1e-12, atol=0)
    torch.testing.assert_close(g.floored_square(w, floor, level), floored @ w.flatten(), rtol=1e-12, atol=0)


def test_runs_are_cache_sized_on_the_cpu_and_whole_batches_elsewhere():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")  # a device object only: nothing runs there
    assert layergrad.run_length(layergrad.RUN_BYTES // 2, cpu) == 2
    assert layergrad.run_length(layergrad.RUN_BYTES * 4, cpu) == 1  # at least one sample
    assert layergrad.run_length(layergrad.RUN_BYTES // 2, gpu) >= 2**31  # one run: no launch per run
