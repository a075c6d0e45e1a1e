"""Every number a detector file holds is bounded like the same argument in Python (and on the command
line): the constructors check their parameters with ``roseood.validation``, and a file's parameters go
through the constructor, so a re-sealed file with a huge, negative or oversized value is one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roseood.detectors import NLL, RND, Detector, LikelihoodRatio, load_detector
from roseood.errors import CheckpointError, RoseError
from roseood.models import VAE, load_model, save_model
from roseood.serialization import save_file

IMAGES = np.random.default_rng(0).integers(0, 256, (4, 1, 32, 32), dtype=np.uint8)


def resealed(path: Path, tmp_path: Path, **params: Any) -> Path:
    """The detector file at ``path`` with ``params`` edited and its checksum recomputed (a deliberate
    edit)."""
    obj = torch.load(path, weights_only=True)
    out = tmp_path / "edited.pt"
    save_file(obj | {"params": obj["params"] | params}, out)
    return out


@pytest.fixture
def nll_file(tiny_vae: VAE, tmp_path: Path) -> Path:
    NLL(tiny_vae).fit(IMAGES).save(tmp_path / "nll.pt")
    return tmp_path / "nll.pt"


@pytest.mark.parametrize(
    ("params", "phrase"),
    [
        ({"k": 1_000_000_000}, "k = 1000000000 (that many copies of each (1, 32, 32) input) needs about"),
        ({"k": -3}, "k must be a positive integer, got -3"),
        ({"seed": 2**70}, "seed must be < 2**32, got 1180591620717411303424"),
        ({"seed": -1}, "seed must be a non-negative integer"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
    ],
)
def test_a_resealed_detector_with_an_out_of_range_number_is_one_line(
    nll_file: Path, tiny_vae: VAE, tmp_path: Path, params: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(CheckpointError) as info:
        load_detector(resealed(nll_file, tmp_path, **params), tiny_vae)
    message = str(info.value)
    assert "\n" not in message and phrase in message and str(tmp_path) in message
    with pytest.raises(RoseError) as direct:  # the same limit, the same words, in Python
        NLL(tiny_vae, **params)
    assert str(direct.value) in message


SEEDS = st.one_of(
    st.integers(-(2**80), 2**80), st.integers(-2, 2**32 + 2).filter(lambda s: abs(s - 2**32) < 3 or s < 3)
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(-(2**70), 2**70) | st.integers(-2, 30), seed=SEEDS)
def test_python_and_the_file_accept_exactly_the_same_numbers(
    nll_file: Path, tiny_vae: VAE, tmp_path: Path, k: int, seed: int
) -> None:
    try:
        NLL(tiny_vae, k=k, seed=seed)
        python_ok = True
    except RoseError:
        python_ok = False
    try:
        load_detector(resealed(nll_file, tmp_path, k=k, seed=seed), tiny_vae)
        file_ok = True
    except CheckpointError as exc:
        assert "\n" not in str(exc)
        file_ok = False
    assert python_ok == file_ok
    in_range = k >= 1 and 0 <= seed < 2**32
    assert in_range or not python_ok  # never accepts a number out of range
    assert python_ok or not (in_range and k <= 10**6)  # 10**6 copies of a 4 KB image fit in 4 GB


@pytest.mark.parametrize(
    ("cls", "kwargs", "phrase"),
    [
        (LikelihoodRatio, {"k": 0}, "k must be a positive integer"),
        (LikelihoodRatio, {"seed": 2**32}, "seed must be < 2**32"),
        (RND, {"width": 10**6}, "rnd nets of width 1000000"),
        (RND, {"seed": -3}, "seed must be a non-negative integer"),
        (RND, {"extra": -1}, "extra must be a non-negative integer"),
    ],
)
def test_every_detector_bounds_its_numbers(
    tiny_vae: VAE, cls: type[Detector], kwargs: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(RoseError, match=phrase.replace("*", r"\*")):
        cls(tiny_vae, **kwargs)


def test_a_stored_model_config_too_large_for_the_machine_is_one_line(tiny_vae: VAE, tmp_path: Path) -> None:
    save_model(tiny_vae, tmp_path / "m.pt")
    obj = torch.load(tmp_path / "m.pt", weights_only=True)
    save_file(obj | {"config": obj["config"] | {"ngf": 10**6}}, tmp_path / "huge.pt")
    with pytest.raises(
        CheckpointError, match=r"huge\.pt: cannot build a vae .*the file's config is too large"
    ):
        load_model(tmp_path / "huge.pt")


def test_a_resealed_k_large_enough_to_take_minutes_says_so_before_it_starts(
    nll_file: Path, tiny_vae: VAE, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """k = 25 202 (within memory) scored for minutes before its first progress line; now a forecast from
    one timed chunk comes first, and the chunk it times changes no score (samples are drawn per image).
    Tested quickly: a forecast whatever the estimate, from a chunk of 16 samples, for a k above it."""
    import roseood.detectors.nll as nll

    monkeypatch.setattr(nll, "LINE_INTERVAL_S", 0.0)
    monkeypatch.setattr(nll, "IWAE_CHUNK", 16)  # 256 decoded 1 456 samples of 256 logits a pixel: 7 s
    detector = load_detector(resealed(nll_file, tmp_path, k=20), tiny_vae)
    detector.progress = True
    scores = detector.score(IMAGES[:2])
    assert "NLL (IWAE, k = 20) of 2 images: ≈" in capsys.readouterr().err
    detector.progress = False
    np.testing.assert_array_equal(detector.score(IMAGES[:2]), scores)
    assert "NLL (IWAE" not in capsys.readouterr().err
