"""A layer run several times per sample (shared weights, or a batch expanded inside the loss) gets the
exact per-sample gradient, the sum over its calls and copies; a loss without one row per input is refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from roseood.curvature import LayerGradients, check_layers
from roseood.errors import RoseError
from tests.curvature.test_grads import loop_grads

torch.manual_seed(0)
NET = nn.Sequential(
    nn.Conv2d(2, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.Tanh(), nn.Conv2d(4, 2, 3, padding=1)
)
NAMES = ["0", "1", "3"]
SHIFTS = torch.randn(3, 2, 5, 5)


def shared_calls(x: torch.Tensor) -> torch.Tensor:
    """K = 3 separate calls of the same layers, summed per sample."""
    return sum(NET(x + s).pow(2).flatten(1).sum(1) for s in SHIFTS)  # type: ignore[return-value]


def interleaved(x: torch.Tensor) -> torch.Tensor:
    """One call on the N·K rows ``x.repeat_interleave(K, 0)``, summed per sample."""
    k = SHIFTS.shape[0]
    rows = x.repeat_interleave(k, 0) + SHIFTS.repeat(x.shape[0], 1, 1, 1)
    return NET(rows).pow(2).flatten(1).sum(1).view(x.shape[0], k).sum(1)


def copy_major(x: torch.Tensor) -> torch.Tensor:
    """One call on the N·K rows ``x.repeat(K, ...)`` (copy-major), summed per sample."""
    k = SHIFTS.shape[0]
    rows = x.repeat(k, 1, 1, 1) + SHIFTS.repeat_interleave(x.shape[0], 0)
    return NET(rows).pow(2).flatten(1).sum(1).view(k, x.shape[0]).sum(0)


@pytest.mark.parametrize("loss", [shared_calls, interleaved, copy_major])
def test_repeated_layer_gradients_are_the_sum_over_calls(loss):
    x = torch.randn(4, 2, 5, 5)
    batched = LayerGradients(NET, NAMES)(loss, x)
    oracle = loop_grads(NET, loss, x, NAMES)
    for n in NAMES:
        torch.testing.assert_close(batched[n].matrix(), oracle[n], rtol=1e-4, atol=1e-4)


def test_check_layers_accepts_shared_weights_with_a_note():
    reports = check_layers(NET, shared_calls, torch.randn(2, 2, 5, 5), NAMES)
    assert all(r.usable for r in reports)
    assert all("called 3 times" in r.note for r in reports)


def test_a_loss_with_one_value_per_copy_is_refused():
    def per_copy(x: torch.Tensor) -> torch.Tensor:
        return NET(x.repeat_interleave(3, 0)).pow(2).flatten(1).sum(1)  # N·K values

    with pytest.raises(RoseError, match=r"returned shape \(12,\) for 4 inputs"):
        LayerGradients(NET, NAMES)(per_copy, torch.randn(4, 2, 5, 5))


def test_rows_in_no_known_layout_are_refused():
    def shuffled(x: torch.Tensor) -> torch.Tensor:
        per_row = NET(torch.cat([x, x])).pow(2).flatten(1).sum(1).view(2, -1)
        return per_row[0] + per_row[1].roll(1, 0)  # sample n's second copy is row N + n - 1

    with pytest.raises(RoseError, match="neither as K copies"):
        LayerGradients(NET, NAMES)(shuffled, torch.randn(4, 2, 5, 5))
