"""Input Complexity: lossless compressors on hand cases, S = NLL in bits − L in bits, and its sign."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from roseood.detectors import DETECTORS, METHODS, NLL, Detector, InputComplexity, make_detector
from roseood.detectors.compression import CODECS, compressed_bits, encode, to_uint8
from roseood.errors import DataError, RoseError
from roseood.models.glow import Glow
from tests.detectors.fake_models import ScaledSumModel, tiny_vae


def _noise(n: int = 2, channels: int = 1) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, channels, 32, 32), dtype=np.uint8)


def _decode(data: bytes) -> np.ndarray:
    arr = np.asarray(Image.open(io.BytesIO(data)))
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("channels", [1, 3])
def test_compressors_are_lossless_and_favour_simple_images(codec: str, channels: int) -> None:
    noise = _noise(1, channels)
    constant = np.full_like(noise, 77)
    gradient = np.broadcast_to(np.arange(32, dtype=np.uint8) * 8, noise.shape).copy()
    for image in (noise[0], constant[0], gradient[0]):
        assert np.array_equal(_decode(encode(image, codec)), image)
    sizes = [compressed_bits(im, codec)[0] for im in (constant, gradient, noise)]
    assert max(sizes[0], sizes[1]) < sizes[2]  # (PNG's Sub filter makes the ramp nearly as cheap)
    assert sizes[2] >= 8 * noise.size  # uniform noise does not compress
    assert all(s % 8 == 0 for s in sizes)


def test_to_uint8_rounds() -> None:
    levels = torch.arange(256, dtype=torch.float32).view(1, 1, 16, 16) / 255.0
    assert np.array_equal(to_uint8(levels).ravel(), np.arange(256))


def test_score_is_nll_bits_minus_compressed_bits() -> None:
    model = ScaledSumModel(scale=3.0, offset=10.0)
    x = torch.from_numpy(_noise(3)).float() / 255
    det = InputComplexity(model, compressor="png").fit(x)
    expected = model.nll(x).double().numpy() / math.log(2) - compressed_bits(_noise(3), "png")
    assert np.allclose(det.score(x), expected)
    assert np.array_equal(det.complexity(x).numpy(), compressed_bits(_noise(3), "png"))


def test_sign_higher_is_more_ood() -> None:
    flat = ScaledSumModel(scale=0.0, offset=5000.0)  # the same likelihood for every image
    det = InputComplexity(flat, compressor="jp2").fit(torch.zeros(1, 1, 32, 32))
    noise, constant = torch.from_numpy(_noise(1)).float() / 255, torch.full((1, 1, 32, 32), 0.3)
    # Equal likelihood: the simple image is the suspicious one (the model does not reward its simplicity).
    assert det.score(constant)[0] > det.score(noise)[0]
    # Equal complexity: the less likely image is more OOD.
    unlikely = InputComplexity(ScaledSumModel(scale=0.0, offset=6000.0), compressor="jp2").fit(constant)
    assert unlikely.score(constant)[0] > det.score(constant)[0]


def test_vae_uses_iwae_and_glow_is_exact() -> None:
    model, x = tiny_vae(), torch.rand(2, 1, 32, 32)
    det = InputComplexity(model, k=3).fit(x)
    torch.manual_seed(0)
    scores = det.score(x)
    torch.manual_seed(0)
    nll = NLL(model, k=3).nll(x).double().numpy()
    assert np.allclose(scores, nll / math.log(2) - compressed_bits(to_uint8(x), "png"))
    torch.manual_seed(0)
    glow = Glow(levels=1, steps=1, hidden=4).eval()
    scores = InputComplexity(glow, compressor="jp2", k=20).fit(x).score(x)  # k is ignored for Glow
    expected = glow.nll(x).double().numpy() / math.log(2) - compressed_bits(to_uint8(x), "jp2")
    assert np.allclose(scores, expected)


def test_save_load_round_trip(tmp_path: Path) -> None:
    model, x = ScaledSumModel(2.0), torch.rand(3, 1, 32, 32)
    det = InputComplexity(model, compressor="jp2", k=7).fit(x)
    det.save(tmp_path / "ic.pt")
    loaded = Detector.load(tmp_path / "ic.pt", model)
    assert isinstance(loaded, InputComplexity) and loaded.get_params() == det.get_params()
    assert np.array_equal(loaded.score(x), det.score(x))


def test_registered() -> None:
    assert DETECTORS["ic"] is InputComplexity
    for codec in CODECS:
        assert METHODS[f"ic-{codec}"][0] is InputComplexity
        det = make_detector(f"ic-{codec}", ScaledSumModel())
        assert isinstance(det, InputComplexity) and det.compressor == codec and det.k == 20


def test_bad_inputs_raise() -> None:
    with pytest.raises(RoseError):
        InputComplexity(None)
    with pytest.raises(RoseError, match="compressor"):
        InputComplexity(ScaledSumModel(), compressor="gzip")
    with pytest.raises(RoseError):
        InputComplexity(ScaledSumModel(), k=0)
    with pytest.raises(RoseError):
        encode(_noise(1)[0], "bmp")
    with pytest.raises(DataError):
        compressed_bits(_noise(1, 2), "png")  # two channels: no Pillow mode
    with pytest.raises(DataError):
        compressed_bits(_noise(1)[0], "png")
    with pytest.raises(DataError):
        InputComplexity(ScaledSumModel()).fit(torch.rand(1, 1, 32, 32)).score(torch.full((1, 1, 32, 32), 2.0))
