"""User code by name (``file.py:factory``): loaded with one-line errors, and checkpoints that load back."""

from __future__ import annotations

import textwrap

import pytest
import torch

from roseood.errors import CheckpointError, RoseError
from roseood.models import load_factory, load_model, model_fingerprint, save_model

MODEL_FILE = """
import torch
from torch import nn
import roseood


def build():
    net = nn.Sequential(nn.Linear(4, 4))
    loss = lambda x: (net(x) - x).pow(2).sum(1)
    return roseood.wrap(net, loss, layers=["0"], input_kind="tensor", input_shape=(4,))


def broken():
    raise ValueError("no weights here")


def not_a_model():
    return nn.Linear(2, 2)
"""


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "user_model.py"
    path.write_text(textwrap.dedent(MODEL_FILE))
    return path


def test_checkpoint_names_its_factory_but_loads_only_with_model_module(model_file, tmp_path):
    model = load_factory(f"{model_file}:build")
    save_model(model, tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match=f"built by .*pass --model-module {model_file}:build"):
        load_model(tmp_path / "m.pt")  # the file names its code, which is never run from the file
    loaded = load_model(tmp_path / "m.pt", model_module=f"{model_file}:build")
    assert model_fingerprint(loaded) == model_fingerprint(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded.nll(x), model.nll(x))


def test_a_checkpoint_whose_code_is_gone_asks_for_model_module(model_file, tmp_path):
    save_model(load_factory(f"{model_file}:build"), tmp_path / "m.pt")
    moved = tmp_path / "moved.py"
    model_file.rename(moved)
    with pytest.raises(CheckpointError, match="pass --model-module"):
        load_model(tmp_path / "m.pt")
    assert load_model(tmp_path / "m.pt", model_module=f"{moved}:build").input_shape == (4,)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon.py", "must be FILE.py:FACTORY"),
        ("missing.py:build", "missing.py: no such file"),
        ("{file}:nothing", "defines no function 'nothing'"),
        ("{file}:broken", "ValueError: no weights here"),
        ("{file}:not_a_model", "returned a Linear, not a roseood model"),
    ],
)
def test_bad_factories_are_one_line_errors(model_file, spec, message):
    with pytest.raises(RoseError, match=message):
        load_factory(spec.format(file=model_file))
