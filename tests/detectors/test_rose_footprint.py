"""Saved ROSE detectors hold only what scoring needs, compactly, and still score like the fitted one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE, Detector
from roseood.errors import CheckpointError
from roseood.integrity import seal
from roseood.serialization import atomic_save

pytestmark = pytest.mark.float_sensitive  # a loaded compact file against the float64 fit


@pytest.mark.parametrize("fisher", ["ekfac", "kfac", "diag", "dense"])
def test_compact_file_scores_like_the_float64_fit(fisher, tiny_vae, images, tmp_path):
    layers = ["encoder.conv0"] if fisher == "dense" else None
    det = ROSE(tiny_vae, fisher=fisher, layers=layers, batch_size=8).fit(images[:16], held_out=images[16:])
    det.save(tmp_path / "rose.pt")
    loaded = Detector.load(tmp_path / "rose.pt", tiny_vae)
    assert isinstance(loaded, ROSE)
    fitted = det.layer_scores(images).numpy()
    # float32 storage: each layer score within 1e-5 of it, or of its layer's largest score (a score far
    # below its layer's scale carries that scale's rounding: 3e-5 relative on one such score measured)
    scale = np.abs(fitted).max(0, keepdims=True)
    assert np.all(
        np.abs(loaded.layer_scores(images).numpy() - fitted) <= 1e-5 * np.maximum(np.abs(fitted), scale)
    )
    # the aggregate is ReLU(z + β) of z-scores: a score near 0 carries the rounding of its layer's scale
    scores = det.score(images)
    np.testing.assert_allclose(loaded.score(images), scores, rtol=1e-5, atol=1e-5 * np.abs(scores).max())
    # re-saving a loaded detector writes the stored bases again, not a re-rounded copy
    loaded.save(tmp_path / "again.pt")
    np.testing.assert_allclose(
        Detector.load(tmp_path / "again.pt", tiny_vae).score(images), loaded.score(images)
    )


def test_ekfac_file_stores_reflectors_and_no_factors(tiny_vae, images, tmp_path):
    det = ROSE(tiny_vae, fisher="ekfac").fit(images[:16], held_out=images[16:])
    state = det.state()["fishers"]["encoder.mu"]
    assert set(state) == {"u_in", "u_out", "scale", "count", "scale_count", "rcond"}
    n_in = det.fishers_["encoder.mu"].u_in.shape[0]  # type: ignore[attr-defined]
    assert state["u_in"]["reflectors"].numel() == n_in * (n_in - 1) // 2
    assert state["scale"].dtype == torch.float32
    # mu and logvar read the same input: their eigenbasis is written once
    det.save(tmp_path / "rose.pt")
    loaded = torch.load(tmp_path / "rose.pt", weights_only=True)["state"]["fishers"]
    assert loaded["encoder.mu"]["u_in"]["reflectors"] is loaded["encoder.logvar"]["u_in"]["reflectors"]


def test_old_format_file_asks_for_a_refit(tiny_vae, images, tmp_path):
    det = ROSE(tiny_vae, fisher="diag").fit(images[:16], held_out=images[16:])
    det.save(tmp_path / "rose.pt")
    obj = torch.load(tmp_path / "rose.pt", weights_only=True)
    del obj["state"]["version"]
    atomic_save(seal(obj), tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match=r"old\.pt: .*older roseood.*refit"):
        Detector.load(tmp_path / "old.pt", tiny_vae)


@pytest.mark.parametrize("fisher", ["ekfac", "kfac"])
def test_grouped_layer_file_scores_like_the_fit(fisher, tmp_path):
    # a grouped conv has one Kronecker block per group: its stacked eigenbases pack and unpack too
    from roseood import wrap

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, groups=2), torch.nn.Flatten(), torch.nn.Linear(16, 1))
    model = wrap(net, lambda x: net(x).squeeze(1).pow(2), layers=["0", "2"], input_kind="tensor")
    x = torch.randn(24, 2, 4, 4)
    det = ROSE(model, fisher=fisher, batch_size=8).fit(x[:16], held_out=x[16:])
    det.save(tmp_path / "rose.pt")
    loaded = Detector.load(tmp_path / "rose.pt", model)
    # the file keeps float32 eigenbases: measured 3.3e-6 (ekfac; AMD AVX2, default and MKL_CBWR=COMPATIBLE),
    # so 4× that, rounded up
    np.testing.assert_allclose(loaded.score(x), det.score(x), rtol=2e-5, atol=1e-9)
