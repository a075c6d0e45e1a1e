"""ROSE on CUDA gives the CPU's scores: the Fisher is accumulated and eigendecomposed in float64 on either
device and the gradients are taken in full float32 (no TF32), so the two runs differ only by the float32
rounding of the gradients, which moves a layer score by at most ~7e-5 relative even against a float64 run
(``tests/detectors/test_rose.py::test_float32_scores_are_within_1e_4_of_a_float64_run``). Skipped without
a CUDA device; run with ``python -m pytest -m gpu tests/gpu``."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from roseood.curvature import LayerGradients
from roseood.detectors import ROSE, Detector

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

RTOL = 1e-4  # relative, per image and layer: the float32 rounding of the gradients (see the docstring)


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    fit, held, test = (torch.rand(n, 1, 32, 32, generator=g) for n in (64, 16, 16))
    return fit, held, test


@pytest.mark.parametrize("fisher", ["diag", "kfac", "ekfac"])
def test_cuda_scores_equal_the_cpu_scores(tiny_vae, data, fisher):
    fit, held, test = data
    cpu = ROSE(tiny_vae, fisher=fisher, batch_size=16, progress=False).fit(fit, held_out=held)
    cuda = ROSE(copy.deepcopy(tiny_vae).cuda(), fisher=fisher, batch_size=16, progress=False)
    cuda.fit(fit, held_out=held)
    for f in cuda.fishers_.values():  # the Fisher was built where the gradients were, not on the CPU
        assert all(t.is_cuda for t in vars(f).values() if isinstance(t, torch.Tensor))
    np.testing.assert_allclose(cuda.layer_scores(test).numpy(), cpu.layer_scores(test).numpy(), rtol=RTOL)
    z_cpu, z_cuda = cpu.normalized_layer_scores(test), cuda.normalized_layer_scores(test)
    np.testing.assert_allclose(z_cuda.numpy(), z_cpu.numpy(), atol=RTOL * float(z_cpu.abs().max()))


def test_a_detector_fitted_on_the_cpu_scores_on_cuda(tiny_vae, data, tmp_path):
    fit, held, test = data
    cpu = ROSE(tiny_vae, fisher="ekfac", batch_size=16, progress=False).fit(fit, held_out=held)
    cpu.save(tmp_path / "rose.pt")
    loaded = Detector.load(tmp_path / "rose.pt", copy.deepcopy(tiny_vae).cuda())
    np.testing.assert_allclose(loaded.layer_scores(test).numpy(), cpu.layer_scores(test).numpy(), rtol=RTOL)


def test_gradients_are_full_float32_and_tf32_settings_are_restored(tiny_vae, data):
    x = data[2]
    before = torch.backends.cudnn.conv.fp32_precision
    names = ["encoder.conv1", "decoder.convt2"]
    cpu = LayerGradients(tiny_vae, names)(tiny_vae.rose_loss, x)
    model = copy.deepcopy(tiny_vae).cuda()
    cuda = LayerGradients(model, names)(model.rose_loss, x.cuda())
    assert torch.backends.cudnn.conv.fp32_precision == before
    for name in names:
        torch.testing.assert_close(cuda[name].matrix().cpu(), cpu[name].matrix(), rtol=1e-4, atol=1e-6)
