"""ROSE on a diffusion model is a deterministic score: the K (timestep, noise) pairs are the model's, shared
by every image, so an image's score is the same on every run, at any batch size and in any batch company."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE
from roseood.models.diffusion import DiffusionModel

# Layers whose gradients on this untrained UNet are far from zero: some time-embedding projections get
# gradients of 1e-7 there, pure rounding, and a z-score of rounding moves with any reassociation.
LAYERS = [
    "unet.conv_in",
    "unet.down_blocks.1.resnets.0.conv1",
    "unet.up_blocks.1.resnets.0.conv2",
    "unet.conv_out",
]


@pytest.fixture(scope="module")
def fitted() -> tuple[ROSE, torch.Tensor]:
    torch.manual_seed(0)
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()
    x = torch.rand(40, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    det = ROSE(model, fisher="ekfac", layers=LAYERS, batch_size=32, progress=False)
    det.fit(x[:24], held_out=x[24:])
    return det, torch.rand(33, 1, 8, 8, generator=torch.Generator().manual_seed(2))


def test_the_same_images_get_the_same_scores_twice(fitted: tuple[ROSE, torch.Tensor]) -> None:
    det, x = fitted
    torch.manual_seed(123)  # the global generator plays no part
    first = det.score(x)
    torch.manual_seed(456)
    np.testing.assert_array_equal(first, det.score(x))


def test_scores_do_not_depend_on_the_batch_or_its_company(fitted: tuple[ROSE, torch.Tensor]) -> None:
    """Batch 32 against batch 1, and one image scored alone: equal up to the float reassociation of a
    batched convolution (about 1e-7 relative in float32; 1e-5 leaves a margin for other CPUs' kernels)."""
    det, x = fitted
    det.batch_size = 32
    batched = det.score(x)
    det.batch_size = 1
    single = det.score(x)
    alone = det.score(x[5:6])
    det.batch_size = 32
    np.testing.assert_allclose(single, batched, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(alone, batched[5:6], rtol=1e-5, atol=1e-6)
