"""Boundary checks driven by a model's declared input kind and shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.data.tensors import as_model_input
from roseood.errors import DataError


def test_images_of_any_size_and_float_tensors_and_tokens_pass():
    x = as_model_input(np.full((2, 3, 20, 28), 255, np.uint8), "image", (3, 20, 28))
    assert x.dtype == torch.float32 and x.shape == (2, 3, 20, 28) and float(x.max()) == 1.0
    assert as_model_input(torch.randn(4, 5).double(), "tensor", (5,)).dtype == torch.float32
    assert as_model_input(np.arange(6, dtype=np.int32).reshape(2, 3), "tokens", (3,)).dtype == torch.int64
    assert as_model_input(torch.randn(4, 2, 2), "tensor", None).shape == (4, 2, 2)


@pytest.mark.parametrize(
    ("data", "kind", "shape", "message"),
    [
        (torch.rand(2, 1, 20, 28), "image", (1, 28, 28), "model expects 28×28 images, got 20×28"),
        (torch.rand(2, 1, 8, 8) * 2, "image", (1, 8, 8), r"must lie in \[0, 1\]"),
        (torch.rand(2, 4), "tensor", (5,), r"model expects inputs of shape \(N, 5\), got \(2, 4\)"),
        (torch.ones(2, 4, dtype=torch.bool), "tokens", (4,), "integer token ids"),
        (torch.empty(0, 4), "tensor", (4,), "empty"),
        ([1, 2], "tensor", None, "as an array or tensor"),
        (torch.rand(2, 4), "audio", None, "unknown input kind"),
    ],
)
def test_bad_inputs_are_one_clear_data_error(data, kind, shape, message):
    with pytest.raises(DataError, match=message):
        as_model_input(data, kind, shape)


@pytest.mark.parametrize(
    ("shape", "hint"),
    [
        ((1, 32, 32), r"one \(1, 32, 32\) image\? add the batch axis: x\[None\]$"),
        ((8, 32, 32), r"grayscale \(N, H, W\) images\? add the channel axis: x\[:, None\]$"),
        ((32, 32), r"one grayscale \(H, W\) image\? x\[None, None\]$"),
        ((2, 3, 32, 32), r"got 3 channels \(roseood.load_images\(FOLDER_OR_NPZ, channels=1, size=32\) "),
        ((2, 1, 28, 28), r"got 28×28 \(roseood.load_images\(FOLDER_OR_NPZ, channels=1, size=32\) "),
    ],
)
def test_a_grayscale_models_wrong_images_get_the_likely_fix(shape, hint):
    """A wrong rank names what is probably missing (the model's channels tell which axis); a wrong size or
    channel count names the loader call that converts a user's images to the model's."""
    with pytest.raises(DataError, match=hint):
        as_model_input(torch.zeros(shape, dtype=torch.uint8), "image", (1, 32, 32))
