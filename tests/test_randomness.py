"""Per-input random numbers: an input's noise depends on the seed, the stream and its bytes only."""

from __future__ import annotations

import torch

from roseood.randomness import per_input_seed, rand, randn


def test_an_inputs_noise_is_the_same_in_any_batch_and_run() -> None:
    x = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    with per_input_seed(3):
        torch.manual_seed(1)
        whole = randn(x, 5, stream="s")
        torch.manual_seed(2)  # the global generator plays no part
        parts = torch.cat([randn(x[4:], 5, stream="s"), randn(x[:4], 5, stream="s")])
        other_stream, other_kind = randn(x, 5, stream="t"), rand(x, 5, stream="s")
    # exact: one input's noise comes from its own generator through the same kernel in any batch
    assert torch.equal(whole, torch.cat([parts[2:], parts[:2]]))
    assert not torch.equal(whole, other_stream) and bool((other_kind >= 0).all())
    with per_input_seed(4):
        assert not torch.equal(randn(x, 5, stream="s"), whole)
    twin = torch.cat([x[:1], x[:1]])
    with per_input_seed(3):
        pair = randn(twin, 5, stream="s")
    assert torch.equal(pair[0], pair[1]) and torch.equal(pair[0], whole[0])  # equal inputs, equal noise


def test_outside_the_context_noise_comes_from_the_global_generator() -> None:
    x = torch.zeros(3, 2)
    torch.manual_seed(0)
    a = randn(x, 4, stream="s")
    torch.manual_seed(0)
    assert torch.equal(a, torch.randn(3, 4))
