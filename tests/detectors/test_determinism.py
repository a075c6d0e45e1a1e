"""Every sampled score (a VAE's ELBO and IWAE NLL, Likelihood Ratio, Input Complexity, Likelihood
Regret, stochastic ROSE on a VAE and a Glow) is the same across runs, batch sizes and stream chunks;
under torchrun, across process counts (``tests/test_distributed.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.data.loading import ImageStream
from roseood.detectors import (
    NLL,
    ROSE,
    Detector,
    InputComplexity,
    LikelihoodRatio,
    LikelihoodRegret,
)
from roseood.models import VAE, Glow

pytestmark = pytest.mark.float_sensitive  # scores across batch sizes, chunks and orders, whose kernels differ

SAMPLED = ["nll", "iwae", "lratio", "ic", "lr", "rose stochastic"]


def _detector(name: str, model: VAE, batch_size: int) -> Detector:
    torch.manual_seed(5)
    background = VAE(in_channels=1, ngf=4, nz=4).eval()
    return {
        "nll": lambda: NLL(model, batch_size=batch_size),
        "iwae": lambda: NLL(model, k=4, batch_size=batch_size),
        "lratio": lambda: LikelihoodRatio(model, background=background, k=3, batch_size=batch_size),
        "ic": lambda: InputComplexity(model, k=3, batch_size=batch_size),
        "lr": lambda: LikelihoodRegret(model, steps=2, k=3, batch_size=batch_size),
        "rose stochastic": lambda: ROSE(
            model, fisher="diag", layers="encoder", stochastic=True, batch_size=batch_size
        ),
    }[name]()


@pytest.fixture
def noisy_vae(tiny_vae: VAE) -> VAE:
    """The tiny VAE with a wide posterior (σ = e) and a decoder that reacts to its latent, so that
    sampling moves its scores by far more than float rounding: a score that still repeats must have
    drawn the same noise."""
    with torch.no_grad():
        tiny_vae.encoder.logvar.bias.fill_(2.0)
        tiny_vae.decoder.convt0.weight.mul_(30.0)
    return tiny_vae


@pytest.mark.parametrize("name", SAMPLED)
def test_sampled_scores_repeat_across_runs_batches_and_chunks(
    name: str, noisy_vae: VAE, images: torch.Tensor
) -> None:
    tiny_vae = noisy_vae
    fit, test = images[:16], images[16:]
    torch.manual_seed(0)
    first = _detector(name, tiny_vae, 8).fit(fit[:12], held_out=fit[12:]).score(test)
    torch.manual_seed(1)  # another run: the global generator differs
    det = _detector(name, tiny_vae, 3).fit(fit[:12], held_out=fit[12:])
    _assert_same_draws(det.score(test), first)
    u8 = (test * 255).round().to(torch.uint8).numpy()
    stream = ImageStream("t", "test", np.zeros(len(u8), np.int64), lambda lo, hi: u8[lo:hi])
    chunked = np.concatenate([s for _, s in det.score_stream(stream, chunk=3)])
    _assert_same_draws(chunked, det.score(u8))
    _assert_same_draws(det.score(u8[::-1].copy())[::-1], det.score(u8))  # order
    if name != "rose stochastic":  # the seed is what draws the noise
        other = type(det)(tiny_vae, **(det.get_params() | {"seed": 1}) | _extra(det))
        assert not np.allclose(other.fit(fit).score(test), first, rtol=1e-4)


def _assert_same_draws(got: np.ndarray, want: np.ndarray) -> None:
    """Equal but for float rounding, which other batch sizes (other conv kernels) and CPUs change: measured
    up to 7e-7 of a score (stochastic ROSE, batches of 3 against 8, AMD AVX2 under default and
    MKL_CBWR=COMPATIBLE), and relative to the largest score, as ROSE's scores near 0 have no relative
    precision. Other noise moves a score by more than 1e-4 (the check below), ten times the tolerance."""
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _extra(det: Detector) -> dict[str, object]:
    return {"background": det.background} if isinstance(det, LikelihoodRatio) else {}


def test_stochastic_rose_on_a_glow_repeats_across_batches() -> None:
    torch.manual_seed(0)
    glow = Glow(in_channels=1, image_size=8, levels=2, steps=2, hidden=8, lu=True).eval()
    x = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    scores = []
    for seed, batch in ((0, 16), (1, 5)):
        torch.manual_seed(seed)
        det = ROSE(glow, fisher="diag", stochastic=True, batch_size=batch).fit(x[:12], held_out=x[12:16])
        scores.append(det.score(x[16:]))
    np.testing.assert_allclose(scores[1], scores[0], rtol=1e-5)


def test_a_large_iwae_k_shows_progress_image_by_image(tiny_vae, images, monkeypatch) -> None:
    """k = 41 posterior samples at batch size 4: batches of one image (4 × 20 samples at most), each a
    progress step, and the same scores as one batch of all the images (each image's samples come from its
    own seed)."""
    from roseood.detectors import nll as nll_module

    sizes: list[int] = []
    batches = nll_module.iter_batches

    def recorded(x, size, desc=None):  # type: ignore[no-untyped-def]
        sizes.append(size)
        return batches(x, size, desc)

    monkeypatch.setattr(nll_module, "iter_batches", recorded)
    x = images[:3]
    big = NLL(tiny_vae, k=41, batch_size=4).fit(x).score(x)
    assert sizes[-1] == 1
    monkeypatch.setattr(nll_module, "IWAE_SAMPLES", 10**6)
    torch.testing.assert_close(
        torch.from_numpy(NLL(tiny_vae, k=41, batch_size=4).fit(x).score(x)), torch.from_numpy(big)
    )
    assert sizes[-1] == 4
