"""The one-file example detector: registered by importing it, fitted, saved, loaded and evaluated through
the same API as the built-in detectors; a model without an encoder is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.detectors import DETECTORS, METHODS, Detector, make_detector
from roseood.errors import RoseError
from roseood.evaluation import EvalSpec, evaluate
from tests.conftest import SHARED_DATA, needs_shared_data
from tests.detectors.fake_models import ScaledSumModel
from tests.examples import load_example


@pytest.fixture(scope="module")
def example():
    module = load_example("mahalanobis")
    yield module
    del METHODS["mahalanobis"], DETECTORS["mahalanobis"]


@pytest.mark.float_sensitive
def test_fit_score_save_load(example, tiny_vae, images, tmp_path):
    assert METHODS["mahalanobis"].cls is example.Mahalanobis
    det = make_detector("mahalanobis", tiny_vae, shrinkage=0.01).fit(images[:16], held_out=images[16:])
    scores = det.score(images)
    assert scores.shape == (24,) and np.all(scores >= 0)
    far = det.score(torch.ones(4, 1, 32, 32))
    assert far.min() > np.median(scores)  # constant white images are far from the training latents
    det.save(tmp_path / "m.pt")
    loaded = Detector.load(tmp_path / "m.pt", tiny_vae)
    assert isinstance(loaded, example.Mahalanobis) and loaded.get_params() == {
        "shrinkage": 0.01,
        "batch_size": 64,
    }
    for key, value in det.state().items():
        assert torch.equal(loaded.state()[key], value), key  # the file keeps the state bit for bit
    # but not its layout: the fitted precision is linalg.inv's column-major result, the loaded one is
    # row-major, and MKL picks its GEMM kernel by layout and CPU. Two summation orders of a 4-term float64
    # quadratic form differ by at most ~2·8·2⁻⁵³·cond ≈ 2e-15 (cond of the precision 1.005 here);
    # measured 2.6e-16 (2 ulps) on an AVX2 CPU under default, MKL_CBWR=AVX2 and ATEN_CPU_CAPABILITY=default.
    np.testing.assert_allclose(loaded.score(images), scores, rtol=1e-14, atol=0)


def test_a_model_without_encoder_is_refused(example):
    with pytest.raises(RoseError, match="needs a model with an encoder"):
        example.Mahalanobis(ScaledSumModel())


@needs_shared_data
def test_evaluate_runs_it_beside_the_built_in_ones(example, tiny_vae):
    spec = EvalSpec(
        "fashion_mnist",
        ["mnist"],
        ["mahalanobis", "nll"],
        fit_samples=40,
        stats_samples=10,
        test_samples=30,
        data_dir=SHARED_DATA,
    )
    result = evaluate(tiny_vae, spec, progress=False)
    assert set(result.metrics()) == {"mahalanobis", "nll"}
    assert 0.0 <= result.metrics()["mahalanobis"]["mnist"]["auroc"] <= 1.0
