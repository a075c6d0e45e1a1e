"""Detectors take a torch DataLoader or Dataset as well as tensors and arrays: the same scores and fits,
items as tensors, (image, label) tuples or dicts with an image, and one clear line for what does not fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, TensorDataset

from roseood.detectors import NLL, ROSE
from roseood.detectors import inputs as detector_inputs
from roseood.errors import DataError
from tests.detectors.fake_models import ScaledSumModel, tiny_vae


class DictImages(Dataset):
    """Items as a Hugging Face dataset gives them: dicts with an image and a label."""

    def __init__(self, images: torch.Tensor, key: str = "image") -> None:
        self.images, self.key = images, key

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, object]:
        return {self.key: self.images[i], "label": 0}


class PilImages(Dataset):
    """A dataset without a to-tensor transform: PIL images."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Image.Image:
        return Image.new("L", (32, 32), i)


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randint(0, 256, (10, 1, 32, 32), dtype=torch.uint8)


def test_loaders_and_datasets_score_as_tensors_do(images: torch.Tensor) -> None:
    det = NLL(ScaledSumModel(), batch_size=4).fit(images)
    expected = det.score(images)
    labels = torch.zeros(10, dtype=torch.long)
    sources = {
        "loader of tensors": DataLoader(images, batch_size=3),
        "loader of (image, label)": DataLoader(TensorDataset(images, labels), batch_size=4),
        "dataset of (image, label)": TensorDataset(images, labels),
        "dataset of dicts": DictImages(images),
        "loader of dicts": DataLoader(DictImages(images, "pixel_values"), batch_size=7),
        "float images": DataLoader(images.float() / 255, batch_size=5),
    }
    for what, source in sources.items():
        np.testing.assert_allclose(det.score(source), expected, rtol=1e-6, err_msg=what)


def test_scoring_a_loader_streams_it(images: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scores come batch by batch: the loader is never read into one tensor."""
    det = NLL(ScaledSumModel(), batch_size=4).fit(images)
    monkeypatch.setattr(detector_inputs, "collect", lambda *a: pytest.fail("scoring collected the loader"))
    assert det.score(DataLoader(images, batch_size=4)).shape == (10,)


def test_fitting_on_a_loader_is_fitting_on_its_images() -> None:
    x = torch.randint(0, 256, (16, 1, 32, 32), dtype=torch.uint8)
    model = tiny_vae()
    a = ROSE(model, fisher="diag", batch_size=4).fit(x[:12], held_out=x[12:])
    b = ROSE(model, fisher="diag", batch_size=4).fit(DataLoader(x[:12], batch_size=5), held_out=x[12:])
    np.testing.assert_allclose(a.score(x), b.score(x), rtol=1e-6)
    c = NLL(ScaledSumModel()).fit(x).calibrate(TensorDataset(x, torch.zeros(16)))
    assert c.threshold_ == NLL(ScaledSumModel()).fit(x).calibrate(x).threshold_


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (PilImages(), "give it a transform that returns tensors"),
        (DictImages(torch.zeros(4, 1, 32, 32), key="photo"), "expected the images under one of"),
        (DataLoader(torch.zeros(4, 32, 32, 1, dtype=torch.uint8), batch_size=2), "look channel-last"),
        (DataLoader(torch.full((4, 1, 32, 32), 2.0), batch_size=2), "must lie in [0, 1]"),
        (DataLoader(torch.zeros(4, 1, 32, 32, dtype=torch.int32), batch_size=2), "uint8 (0–255) or float"),
        (DataLoader(["a", "b"], batch_size=2), "a batch holds str"),
        (DataLoader(torch.zeros(0, 1, 32, 32)), "empty input set"),
    ],
)
def test_a_loader_that_does_not_fit_is_one_clear_error(source: object, message: str) -> None:
    det = NLL(ScaledSumModel())
    with pytest.raises(DataError) as err:
        det.fit(source)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)
