"""The validation layer: every check either returns the value or raises a one-line ``RoseError``;
arrays become valid image tensors or a ``DataError``; API entry points use the same checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from roseood.data import load_images
from roseood.data.tensors import as_image_tensor
from roseood.detectors import ROSE
from roseood.errors import DataError, RoseError
from roseood.memory import available, check_memory, module_bytes
from roseood.validation import check_float, check_int, check_seed

ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5))


@given(value=ANY)
def test_int_checks_accept_exactly_the_valid_integers(value: object) -> None:
    valid = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    try:
        assert check_int(value) == value and valid
    except RoseError as exc:
        assert not valid and "\n" not in str(exc)


@given(value=ANY)
def test_seed_range(value: object) -> None:
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32
    try:
        assert check_seed(value) == value and valid
    except RoseError:
        assert not valid


@given(value=ANY, low=st.floats(-10, 10))
def test_float_checks_refuse_nan_inf_and_out_of_range(value: object, low: float) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    valid = number and math.isfinite(float(value)) and float(value) >= low  # type: ignore[arg-type]
    try:
        assert check_float(value, low=low) == float(value) and valid  # type: ignore[arg-type]
    except RoseError:
        assert not valid


SHAPES = hnp.array_shapes(min_dims=1, max_dims=5, min_side=0, max_side=5)


@settings(max_examples=60, deadline=None)
@given(
    images=st.one_of(
        hnp.arrays(st.sampled_from([np.uint8, np.float32, np.float64, np.int32]), SHAPES),
        hnp.arrays(np.float32, SHAPES, elements=st.floats(0, 1, width=32)),
    )
)
def test_as_image_tensor_gives_valid_images_or_one_data_error(images: np.ndarray) -> None:
    try:
        x = as_image_tensor(images)
    except DataError as exc:
        assert "\n" not in str(exc)
        return
    assert x.dtype == torch.float32 and x.shape == images.shape and x.ndim == 4 and x.shape[0] > 0
    assert bool(torch.isfinite(x).all()) and float(x.min()) >= 0.0 and float(x.max()) <= 1.0


def test_api_entry_points_validate(tiny_vae) -> None:
    with pytest.raises(RoseError, match="p must be"):
        ROSE(tiny_vae, p=math.nan)
    with pytest.raises(RoseError, match="batch_size must be a positive integer"):
        ROSE(tiny_vae, batch_size=0)
    with pytest.raises(DataError, match="seed must be a non-negative integer"):
        load_images("noise", n=2, seed=-1)


def test_devices_auto_resolves_to_the_best_one_here_and_torchrun_ranks_take_their_own_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from roseood import distributed
    from roseood.validation import check_device

    assert check_device("auto") == "auto" and check_device("cpu") == "cpu"
    for bad, why in (("meta", "not supported"), ("tpu", "not a device")):
        with pytest.raises(RoseError, match=why):
            check_device(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert distributed.device("auto") == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert distributed.device("auto") == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert distributed.device("auto") == "cuda" and distributed.device("cuda:1") == "cuda:1"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (
        distributed.device("auto") == distributed.device("cuda") == distributed.device("cuda:1") == "cuda:1"
    )
    with pytest.raises(RoseError, match="under torchrun name cuda or auto"):
        distributed.device("cuda:0")
    assert distributed.device("cpu") == "cpu"


@given(value=ANY, high=st.integers(1, 100))
def test_int_checks_with_an_upper_bound(value: object, high: int) -> None:
    valid = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high
    try:
        assert check_int(value, high=high) == value and valid
    except RoseError as exc:
        assert not valid and "\n" not in str(exc) and len(str(exc)) < 200  # a huge number is shortened


def test_memory_checks_refuse_what_cannot_fit_and_measure_without_allocating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from roseood import memory

    free = available()
    assert free is None or free > 0
    assert module_bytes(lambda: torch.nn.Linear(10**5, 10**5)) == (10**10 + 10**5) * 4  # 40 GB, on meta
    monkeypatch.setattr(memory, "available", lambda device=None: 2 * 2**30)
    check_memory(2**30, "a buffer")
    with pytest.raises(
        RoseError,
        match=r"^a buffer needs about 3\.0 GiB, more than the 2\.0 GiB free on this machine; lower k$",
    ):
        check_memory(3 * 2**30, "a buffer", hint="lower k")
    monkeypatch.setattr(memory, "available", lambda device=None: None)
    check_memory(10**30, "anything")  # where the free memory cannot be told, nothing is refused


def test_a_bad_size_names_the_setting_it_was_given_for():
    from roseood.detectors import ROSE
    from roseood.memory import parse_size
    from roseood.models import VAE

    with pytest.raises(RoseError, match=r"^max_size must be a size such as 4G"):
        ROSE(VAE(ngf=4, nz=4), max_size="lots")
    with pytest.raises(RoseError, match=r"^memory must be positive"):
        parse_size("0G")
