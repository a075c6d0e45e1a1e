"""Likelihood-adjusted ROSE layer scores: the trend fit, the columns, state, and ROSE(adjust=...)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from roseood.detectors import ROSE, Detector
from roseood.detectors.adjustment import LikelihoodTrend, adjusted, column_names
from roseood.errors import CheckpointError, DataError, RoseError
from roseood.integrity import seal
from roseood.settings import check_adjust


def _trend(raw: np.ndarray, loss: np.ndarray) -> LikelihoodTrend:
    trend = LikelihoodTrend()
    trend.fit(raw, loss)
    return trend


@settings(max_examples=30, deadline=None)
@given(a=st.floats(-20, 20), b=st.floats(-1, 1), shift=st.floats(-1e4, 1e4), seed=st.integers(0, 2**16))
def test_scores_on_their_trend_have_ratio_one(a, b, shift, seed):
    loss = shift + np.random.default_rng(seed).normal(0, 30, 50)
    raw = np.exp(a + b * (loss - shift))[:, None] * np.array([1.0, 3.0])
    ratio = _trend(raw, loss).ratio(raw, loss)
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-6)


def test_log_ratios_are_uncorrelated_with_the_loss_where_fitted():
    rng = np.random.default_rng(0)
    loss = rng.normal(1000, 50, 400)
    raw = np.exp(0.02 * loss[:, None] + rng.normal(0, 1, (400, 3)))
    trend = _trend(raw, loss)
    log_ratio = np.log(trend.ratio(raw, loss))
    np.testing.assert_allclose(log_ratio.mean(0), 0, atol=1e-9)
    np.testing.assert_allclose((log_ratio * (loss - loss.mean())[:, None]).mean(0), 0, atol=1e-6)
    # a lower loss than the trend expects for a score means a larger ratio: the point of the adjustment
    assert (
        _trend(raw, loss).ratio(raw[:1], loss[:1] - 100) > _trend(raw, loss).ratio(raw[:1], loss[:1])
    ).all()


def test_constant_loss_divides_by_the_geometric_mean_and_huge_ratios_saturate():
    raw = np.array([[1.0], [4.0]])
    trend = _trend(raw, np.array([5.0, 5.0]))
    np.testing.assert_allclose(trend.ratio(raw, np.array([5.0, 5.0]))[:, 0], [0.5, 2.0])
    far = _trend(np.array([[1.0], [np.e]]), np.array([0.0, 1.0])).ratio(np.array([[1e300]]), np.array([-1e6]))
    assert np.isfinite(far).all() and far[0, 0] > 1e300


def test_non_finite_rows_are_left_out_of_the_fit_and_too_few_finite_ones_are_an_error():
    raw, loss = np.array([[1.0], [np.e], [np.nan], [5.0]]), np.array([0.0, 1.0, 2.0, np.inf])
    trend = _trend(raw, loss)
    np.testing.assert_allclose(trend.ratio(raw[:2], loss[:2])[:, 0], [1.0, 1.0])
    with pytest.raises(DataError, match="1 of 4 have them"):
        _trend(raw, np.array([0.0, np.nan, 2.0, np.inf]))


def test_columns_and_names():
    raw, loss = np.array([[1.0, 2.0], [3.0, 5.0], [2.0, 2.0]]), np.array([1.0, 2.0, 3.0])
    trend = _trend(raw, loss)
    assert adjusted(raw, loss, trend, "none") is raw
    np.testing.assert_array_equal(adjusted(raw, loss, trend, "nll"), trend.ratio(raw, loss))
    both = adjusted(raw, loss, trend, "both")
    np.testing.assert_array_equal(both, np.concatenate([raw, trend.ratio(raw, loss)], 1))
    assert column_names(["a", "b"], "both") == ["a", "b", "a/nll", "b/nll"]
    assert column_names(["a"], "nll") == ["a/nll"] and column_names(["a"], "none") == ["a"]
    with pytest.raises(RoseError, match="unknown ROSE adjustment"):
        check_adjust("likelihood")


def test_state_round_trip_and_mismatch():
    raw, loss = np.array([[1.0, 2.0], [3.0, 5.0], [2.0, 2.0]]), np.array([1.0, 2.0, 3.0])
    trend, other = _trend(raw, loss), LikelihoodTrend()
    other.load_state(trend.state(), layers=2)
    np.testing.assert_array_equal(other.ratio(raw, loss), trend.ratio(raw, loss))  # same numpy arrays: exact
    with pytest.raises(CheckpointError, match="likelihood trend"):
        other.load_state(trend.state(), layers=3)
    with pytest.raises(CheckpointError, match="likelihood trend"):
        other.load_state({}, layers=2)
    with pytest.raises(RoseError, match="not fitted"):
        LikelihoodTrend().ratio(raw, loss)


def _loss(model, images):
    with torch.no_grad():
        return model.rose_loss(images).double().numpy()


@pytest.mark.float_sensitive
@pytest.mark.parametrize("adjust", ["nll", "both"])
def test_rose_fits_the_trend_on_the_statistics_images(tiny_vae, images, adjust):
    det = ROSE(tiny_vae, fisher="diag", adjust=adjust).fit(images[:16], held_out=images[16:])
    loss = _loss(tiny_vae, images[16:])
    raw = det.layer_scores(images[16:]).numpy()
    log_ratio = np.log(det.trend_.ratio(raw, loss))
    np.testing.assert_allclose(log_ratio.mean(0), 0, atol=1e-6)
    np.testing.assert_allclose(np.corrcoef(log_ratio.T, loss)[-1, :-1], 0, atol=1e-6)
    columns = adjusted(det.layer_scores(images[:5]).numpy(), _loss(tiny_vae, images[:5]), det.trend_, adjust)
    np.testing.assert_allclose(det.score(images[:5]), det.aggregation_(columns), rtol=1e-6)
    assert columns.shape[1] == len(det.layers) * (2 if adjust == "both" else 1)


@pytest.mark.float_sensitive
def test_adjusted_rose_saves_and_loads(tiny_vae, images, tmp_path):
    det = ROSE(tiny_vae, fisher="diag", adjust="both").fit(images[:16], held_out=images[16:])
    det.save(tmp_path / "d.pt")
    loaded = Detector.load(tmp_path / "d.pt", tiny_vae)
    assert isinstance(loaded, ROSE) and loaded.adjust == "both"
    np.testing.assert_allclose(loaded.score(images), det.score(images), rtol=1e-6)
    obj = torch.load(tmp_path / "d.pt", weights_only=False)
    obj["state"].pop("trend")
    torch.save(seal(obj), tmp_path / "broken.pt")
    with pytest.raises(CheckpointError, match="likelihood trend"):
        Detector.load(tmp_path / "broken.pt", tiny_vae)
    with pytest.raises(RoseError, match="unknown ROSE adjustment"):
        ROSE(tiny_vae, adjust="yes")
