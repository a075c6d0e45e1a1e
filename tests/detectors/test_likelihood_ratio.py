"""Likelihood Ratio: sign convention, the background model's fingerprint on save/load, real data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from roseood.detectors import DETECTORS, METHODS, NLL, Detector, LikelihoodRatio
from roseood.errors import CheckpointError, DataError, RoseError
from tests.detectors.fake_models import ScaledSumModel, tiny_vae

SHARED = Path("/work/shared")
VAES = SHARED / "models" / "rose-paper-vae"


def _images(n: int = 4, channels: int = 1) -> torch.Tensor:
    return torch.rand(n, channels, 32, 32, generator=torch.Generator().manual_seed(0))


def test_score_is_nll_main_minus_nll_background() -> None:
    main, background = ScaledSumModel(2.0, 1.0), ScaledSumModel(0.5, 3.0)
    x = _images()
    det = LikelihoodRatio(main, background=background).fit(x)
    expected = (main.nll(x) - background.nll(x)).double().numpy()
    assert np.allclose(det.score(x), expected)
    # Ren et al.'s LLR = log p_main − log p_bg is high in-distribution; the OOD score is −LLR.
    bright, dark = torch.ones(1, 1, 32, 32), torch.zeros(1, 1, 32, 32)
    assert det.score(bright)[0] > det.score(dark)[0]  # main finds bright images far less likely than bg


def test_vae_uses_iwae_with_k_samples() -> None:
    main, background, x = tiny_vae(0), tiny_vae(1), _images(3)
    det = LikelihoodRatio(main, background=background, k=3).fit(x)
    torch.manual_seed(0)
    scores = det.score(x)
    torch.manual_seed(0)
    expected = NLL(main, k=3).nll(x) - NLL(background, k=3).nll(x)
    assert np.allclose(scores, expected.double().numpy())


def test_save_load_needs_the_same_background(tmp_path: Path) -> None:
    main, background, x = ScaledSumModel(2.0), ScaledSumModel(0.5), _images()
    det = LikelihoodRatio(main, background=background, k=5).fit(x)
    det.save(tmp_path / "lratio.pt")
    loaded = LikelihoodRatio.load(tmp_path / "lratio.pt", main, background=background)
    assert isinstance(loaded, LikelihoodRatio) and loaded.k == 5
    assert np.array_equal(loaded.score(x), det.score(x))
    with pytest.raises(CheckpointError, match="background"):
        LikelihoodRatio.load(tmp_path / "lratio.pt", main)
    with pytest.raises(CheckpointError, match="background"):
        LikelihoodRatio.load(tmp_path / "lratio.pt", main, background=ScaledSumModel(0.7))
    with pytest.raises(CheckpointError):  # the main model is checked too
        LikelihoodRatio.load(tmp_path / "lratio.pt", ScaledSumModel(3.0), background=background)
    generic = Detector.load(tmp_path / "lratio.pt", main)  # e.g. a loader that knows nothing of backgrounds
    assert isinstance(generic, LikelihoodRatio)
    with pytest.raises(RoseError, match="background"):
        generic.score(x)
    with pytest.raises(CheckpointError):
        generic.set_background(ScaledSumModel(0.7))
    generic.set_background(background)
    assert np.array_equal(generic.score(x), det.score(x))


def test_save_load_with_vaes(tmp_path: Path) -> None:
    main, background, x = tiny_vae(0), tiny_vae(1), _images(2)
    det = LikelihoodRatio(main, background=background, k=2).fit(x)
    det.save(tmp_path / "lratio.pt")
    loaded = LikelihoodRatio.load(tmp_path / "lratio.pt", main, background=background)
    torch.manual_seed(0)
    first = det.score(x)
    torch.manual_seed(0)
    assert np.array_equal(loaded.score(x), first)


def test_bad_inputs_raise() -> None:
    main = ScaledSumModel()
    with pytest.raises(RoseError):
        LikelihoodRatio(None, background=main)
    with pytest.raises(RoseError):
        LikelihoodRatio(main, background=main)
    with pytest.raises(RoseError, match="3-channel"):
        LikelihoodRatio(main, background=ScaledSumModel(in_channels=3))
    with pytest.raises(RoseError):
        LikelihoodRatio(main, background=main, k=0)
    with pytest.raises(RoseError, match="background"):
        LikelihoodRatio(main).fit(_images())
    with pytest.raises(DataError):
        LikelihoodRatio(main, background=ScaledSumModel(0.5)).fit(_images(channels=3))


def test_registered() -> None:
    assert DETECTORS["lratio"] is LikelihoodRatio and METHODS["lratio"][0] is LikelihoodRatio
    assert LikelihoodRatio(ScaledSumModel()).k == 20  # IWAE with 20 samples, as the paper


@pytest.mark.slow
@pytest.mark.skipif(not VAES.is_dir(), reason="needs the authors' VAEs in /work/shared")
def test_authors_fmnist_vae_detects_mnist() -> None:
    from roseood.data import load_images
    from roseood.models import load_authors_vae

    main = load_authors_vae(*(VAES / f"fmnist_ngf32_nz100_seed1_{n}.pth" for n in ("netE", "netG")))
    background = load_authors_vae(
        *(VAES / f"fmnist_background_ratio0.3_ngf32_nz100_{n}.pth" for n in ("netE", "netG"))
    )
    n = 64
    fmnist = load_images("fashion_mnist", split="test", n=n, data_dir=SHARED / "data").images
    mnist = load_images("mnist", split="test", n=n, data_dir=SHARED / "data").images
    det = LikelihoodRatio(main, background=background, k=2).fit(fmnist[:1])  # k=2 keeps the test fast
    torch.manual_seed(0)
    scores = np.concatenate([det.score(fmnist), det.score(mnist)])
    auroc = roc_auc_score(np.r_[np.zeros(n), np.ones(n)], scores)
    assert auroc > 0.6  # the paper reports 0.844 on 5000 + 5000 images with k = 20
