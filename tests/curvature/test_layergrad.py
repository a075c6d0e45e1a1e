"""A layer called more than once in one forward: its gradient is the sum of its calls, each call kept in
its own form, so a convolution keeps its grouped-convolution matrices (no unfolded patches held) and the
memory ``peak_bytes`` plans for is what it holds; its Fishers are those of the summed gradient."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from roseood.curvature import FactoredGrad, LayerGradients, SummedGrad, make_fisher
from roseood.curvature.handlers import ConvGrad
from tests.curvature.test_grads import loop_grads

pytestmark = pytest.mark.float_sensitive  # batched per-sample gradients against an autograd oracle


class Twice(nn.Module):
    """One 3×3 convolution applied twice (shared weights), then a linear read-out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.out = nn.Linear(4 * 8 * 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.conv(torch.tanh(self.conv(x)))).flatten(1)).squeeze(1)


@pytest.fixture
def twice() -> tuple[Twice, torch.Tensor]:
    torch.manual_seed(0)
    return Twice(), torch.randn(6, 4, 8, 8)


def test_a_convolution_called_twice_is_the_sum_of_its_calls_in_their_own_form(twice):
    net, x = twice
    g = LayerGradients(net, ["conv"])(lambda b: net(b).pow(2), x)["conv"]
    assert isinstance(g, SummedGrad) and [type(c) for c in g.calls] == [ConvGrad, ConvGrad]
    oracle = loop_grads(net, lambda b: net(b).pow(2), x, ["conv"])["conv"]
    torch.testing.assert_close(g.matrix(), oracle, rtol=1e-4, atol=1e-5)
    # held: each call's input and output gradient, never the unfolded patches (9× the input)
    held = sum(t.untyped_storage().nbytes() for c in g.calls for t in (c.x, c.gy))  # type: ignore[attr-defined]
    assert g.nbytes() == held
    patches = g.factored().a.untyped_storage().nbytes()
    assert patches > held and g.nbytes() < patches
    # the plan covers what reading it forms: the summed matrices and a call's own products
    assert g.peak_bytes() >= held + g.matrix().untyped_storage().nbytes()
    assert g.peak_bytes() >= max(c.peak_bytes() for c in g.calls)


@pytest.mark.parametrize("kind", ["diag", "kfac", "ekfac", "ekfac-compact"])
def test_the_fishers_of_a_twice_called_layer_are_those_of_its_summed_gradient(twice, kind):
    """Fitted on the calls kept apart or on one gradient holding all their positions, the same Fisher."""
    net, x = twice
    grads = [LayerGradients(net, ["conv"])(lambda b: net(b).pow(2), xb)["conv"] for xb in x.split(3)]
    flat = [g.factored() for g in grads]
    assert all(isinstance(f, FactoredGrad) and f.positions == 2 * 64 for f in flat)
    fitted = []
    for batches in (grads, flat):
        f = make_fisher(kind, 1e-3)
        for p in range(f.passes):
            for g in batches:
                f.update(g, p)
            f.end_pass(p)
        fitted.append(f.quad(grads[0]))
    torch.testing.assert_close(fitted[0], fitted[1], rtol=1e-5, atol=0)
