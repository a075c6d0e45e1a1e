"""The optional contracts of roseood.contracts hold for the classes that offer them, also as Python 3.12
checks them: ``isinstance`` on a runtime protocol reads each member with ``inspect.getattr_static`` there,
which misses what an ``nn.Module`` keeps in its registries (submodules, buffers). CI runs 3.11, so the
static lookup is checked here directly."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from roseood import contracts, wrap
from roseood.detectors.diffpath import DiffPath
from roseood.models import VAE
from roseood.models.diffusion import DiffusionModel

MISSING = object()


def members(protocol: type) -> list[str]:
    """A protocol's members: its annotations and the names its body defines."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n in vars(protocol) if not n.startswith("_")}
    return sorted(names)


def meets_statically(obj: object, protocol: type) -> bool:
    return all(inspect.getattr_static(obj, m, MISSING) is not MISSING for m in members(protocol))


def diffusion() -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2})


def wrapped() -> nn.Module:
    module = nn.Sequential(nn.Flatten(), nn.Linear(4, 1))
    return wrap(module, lambda x: module(x).squeeze(1), input_shape=(1, 2, 2))


OFFERS = [
    (
        diffusion,
        ["RowsModel", "Trainable", "HeldOutMetrics", "Generates", "Described", "Configured", "ModelInputs"],
    ),
    (lambda: VAE(ngf=4, nz=4), ["Trainable", "Generates", "Described", "Configured", "ModelInputs"]),
    (wrapped, ["Trainable", "Named", "FromFactory", "Described", "Configured", "ModelInputs"]),
    (lambda: DiffPath(diffusion(), steps=2), ["CountsEvaluations"]),
]


@pytest.mark.parametrize(("build", "offered"), OFFERS)
def test_each_class_meets_the_protocols_it_offers_also_by_static_lookup(build, offered):
    obj = build()
    for name in offered:
        protocol = getattr(contracts, name)
        assert isinstance(obj, protocol), name
        assert meets_statically(obj, protocol), name


def test_what_a_class_does_not_offer_is_not_claimed():
    vae = VAE(ngf=4, nz=4)
    assert not isinstance(vae, contracts.RowsModel) and contracts.rows_per_input(vae) == 1
    assert contracts.rows_per_input(diffusion()) == 2
    assert not isinstance(vae, contracts.CountsEvaluations) and not isinstance(vae, contracts.HeldOutMetrics)
