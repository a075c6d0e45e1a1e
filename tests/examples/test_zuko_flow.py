"""The zuko MAF example builds, trains, and is scored by ROSE end to end (tiny sizes)."""

from __future__ import annotations

import pytest
import torch

from roseood.errors import RoseError
from tests.examples import load_example


@pytest.fixture(scope="module")
def example():
    module = load_example("zuko_flow")
    return module


def test_build_fit_and_score(example):
    model = example.build(side=4, transforms=1, hidden=8)
    same, other = (example.build(side=4, transforms=1, hidden=8, seed=s).state_dict() for s in (0, 1))
    torch.testing.assert_close(same, model.state_dict())  # the seed decides the initialisation
    assert any(not torch.equal(other[k], v) for k, v in same.items())
    assert len(model.layer_sets()["all"]) == 3 and len(model.layer_sets()["last"]) == 1
    sets = example.build(side=4, transforms=2, hidden=8).layer_sets()
    assert len(sets["all"]) == 6 and sets["late"] == sets["all"][3:]  # the last transform's MADE
    assert sets["hidden"] == sets["late"][:2]  # ... without its output layer
    assert model.rose_layers(None) == model.layer_sets()["hidden"]  # the default set
    gen = torch.Generator().manual_seed(0)
    images = (torch.rand(96, 1, 32, 32, generator=gen) * 255).round().to(torch.uint8).numpy()
    bpd = example.fit(model, images[:64], epochs=2, batch_size=32)
    assert len(bpd) == 2 and bpd[1] < bpd[0]
    x = torch.from_numpy(images[:4]).float() / 255
    nll = model.nll(x)
    assert nll.shape == (4,) and torch.equal(model.rose_loss(x).detach(), nll)  # one code path: exact
    assert 0 < example.bits_per_dim(model, nll).mean().item() < 16
    ood = 255 - images[64:80]
    result = example.evaluate(model, images[:48], images[48:64], images[64:80], ood, adjust="both")
    assert set(result) == {"rose-ekfac", "nll"}
    assert all(0 <= auroc <= 1 and 0 <= low <= high <= 1 for auroc, low, high in result.values())
    other = example.build(side=4, transforms=1, hidden=8, seed=1)
    example.fit(other, images[:64], epochs=1, batch_size=32, seed=1)
    pair = example.evaluate([model, other], images[:48], images[48:64], images[64:80], ood, adjust="both")
    assert set(pair) == {"rose-ekfac ensemble of 2", "rose-ekfac/0", "rose-ekfac/1", "nll/0", "nll/1"}
    assert pair["rose-ekfac/0"][0] == pytest.approx(result["rose-ekfac"][0])  # flow 0 alone, as scored above
    with pytest.raises(RoseError, match="unknown aggregation"):  # --aggregate reaches ROSE
        example.evaluate(model, images[:48], images[48:64], images[64:80], ood, aggregate="nope")
