"""Model checkpoints read from files (``roseood.models.checkpoint``): a resealed config whose value is
of the wrong type is refused in one line that names the field, before anything is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from roseood.errors import CheckpointError
from roseood.models import VAE, Glow, load_model, save_model
from roseood.serialization import save_file


@pytest.mark.parametrize(
    ("model", "field", "value", "phrase"),
    [
        ("vae", "ngf", "abc", "ngf must be an integer, got 'abc'"),
        ("vae", "nz", 2.5, "nz must be an integer, got 2.5"),
        ("vae", "ngf", True, "ngf must be an integer, got True"),
        ("vae", "ngf", [4], "ngf must be an integer, got [4]"),
        ("glow", "lu", "yes", "lu must be true or false, got 'yes'"),
        ("glow", "levels", "two", "levels must be an integer or null, got 'two'"),
    ],
)
def test_a_resealed_config_of_the_wrong_type_names_the_field(
    tmp_path: Path, model: str, field: str, value: Any, phrase: str
) -> None:
    """``ngf='abc'`` failed deep in the build ("not all arguments converted during string formatting")."""
    built = VAE(ngf=4, nz=4) if model == "vae" else Glow(image_size=8, levels=1, steps=1, hidden=4)
    save_model(built, tmp_path / "m.pt")
    obj = torch.load(tmp_path / "m.pt", weights_only=True)
    save_file(obj | {"config": obj["config"] | {field: value}}, tmp_path / "edited.pt")  # resealed
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "edited.pt")
    message = str(err.value)
    assert f"edited.pt: cannot build a {model} from its stored config ({model} config: {phrase})" in message
    assert "\n" not in message
    assert isinstance(load_model(tmp_path / "m.pt"), VAE if model == "vae" else Glow)  # as saved: loads
