"""DiffPath, MSMA and DDPM-OOD re-derived from their papers and the authors' public code, in plain torch
loops over a tiny UNet (its raw noise prediction, the DDPM linear schedule recomputed here), and matched
against the package's statistics and scores to 1e-5."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sklearn.neighbors import KernelDensity
from torch import Tensor

from roseood.detectors import MSMA, DiffPath, Reconstruction
from roseood.detectors.diffpath import ddim_respacing
from roseood.detectors.diffusion import fractional_timestep
from roseood.models.diffusion import DiffusionModel

T = 1000


@pytest.fixture(scope="module")
def model() -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2}).eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))


def alphas_bar() -> torch.Tensor:
    """ᾱ_t of DDPM's linear schedule (β from 1e-4 to 0.02 over 1000 steps, Ho et al. 2020)."""
    return torch.cumprod(1 - torch.linspace(1e-4, 0.02, T, dtype=torch.float64), 0)


def unet(model: DiffusionModel, x: torch.Tensor, t: float) -> torch.Tensor:
    """The UNet's raw ε prediction at timestep ``t`` for every image."""
    with torch.no_grad():
        return model.unet(x, torch.full((x.shape[0],), t)).sample.double()


def close(ours: np.ndarray, theirs: np.ndarray) -> None:
    scale = np.abs(theirs).max()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * scale)


def diffpath_eps(model: DiffusionModel, x: torch.Tensor, ts: list[int], clip: bool) -> torch.Tensor:
    """improved-diffusion's ddim_reverse_sample over the respaced timesteps: x0 predicted, clamped to
    [-1, 1], ε re-derived from it; that ε is recorded and moves x to the next ᾱ (0 after the last)."""
    a = alphas_bar()
    y, out = (2 * x - 1).double(), []
    for k, t in enumerate(ts):
        a_t, a_next = a[t], (a[ts[k + 1]] if k + 1 < len(ts) else torch.tensor(0.0, dtype=torch.float64))
        eps = unet(model, y.float(), t)
        x0 = (1 / a_t).sqrt() * y - (1 / a_t - 1).sqrt() * eps
        if clip:
            x0 = x0.clamp(-1, 1)
        eps = ((1 / a_t).sqrt() * y - x0) / (1 / a_t - 1).sqrt()
        out.append(eps)
        y = x0 * a_next.sqrt() + (1 - a_next).sqrt() * eps
    return torch.stack(out, 1)


def test_ddim_respacing_is_the_authors_ddimN():
    assert ddim_respacing(1000, 10) == list(range(0, 1000, 100))
    assert ddim_respacing(1000, 3) == [0, 334, 668]  # stride 334: the first that gives exactly 3


def test_diffpath_6d_statistics_rederived(model, images):
    ts = list(range(0, T, 100))
    eps = diffpath_eps(model, images, ts, clip=True)
    rate = np.diff(eps.numpy(), axis=1) * len(ts)
    e = eps.numpy()
    theirs = np.stack([(v**p).sum((1, 2, 3, 4)) for v in (e, rate) for p in (1, 2, 3)], 1)
    ours = DiffPath(model).statistics(images)
    close(ours, theirs)
    unclipped = DiffPath(model, clip=False).statistics(images)
    assert not np.allclose(unclipped, ours, rtol=1e-3)  # the clamp acts on this model


def test_diffpath_1d_statistic_and_kde_rederived(model, images):
    ts = list(range(0, T, 100))
    rate = np.diff(diffpath_eps(model, images, ts, clip=True).numpy(), axis=1) * len(ts)
    theirs = np.sqrt((rate**2).sum((1, 2, 3, 4)))
    det = DiffPath(model, variant="1d")
    close(det.statistics(images)[:, 0], theirs)
    fit, test = torch.rand(12, 1, 8, 8), torch.rand(4, 1, 8, 8)
    det.fit(fit)
    kde = KernelDensity(kernel="gaussian", bandwidth=5.0).fit(det.statistics(fit))
    close(det.score(test), -kde.score_samples(det.statistics(test)))


def test_msma_sigma_weighted_score_norms_rederived(model, images):
    """MSMA: σ geometric from 1 to 0.01 in [0, 1] pixel units; on the VP model x_t/√ᾱ = y + σ_y ε with
    y = 2x − 1, so σ_y = 2σ, ᾱ = 1/(1 + σ_y²); t where the schedule's log-SNR equals log(ᾱ/(1 − ᾱ))."""
    a = alphas_bar().numpy()
    logsnr = np.log(a / (1 - a))
    sigmas = np.geomspace(1.0, 0.01, 10)
    y = (2 * images - 1).double()
    cols = []
    for sigma in sigmas:
        a_s = 1 / (1 + (2 * sigma) ** 2)
        t = float(np.interp(np.log(a_s / (1 - a_s)), logsnr[::-1], np.arange(T)[::-1]))
        eps = unet(model, (np.sqrt(a_s) * y).float(), t)
        # ∇_x log p_σ(x) in pixel units: the DDPM score −ε̂/√(1 − ᾱ) in x_t units, times dx_t/dx = 2√ᾱ
        score = -2 * np.sqrt(a_s) * eps / np.sqrt(1 - a_s)
        cols.append((sigma * score).flatten(1).norm(dim=1))
    close(MSMA(model).statistics(images), torch.stack(cols, 1).numpy())


def test_fractional_timestep_lands_on_integer_timesteps(model):
    a = model.alphas_cumprod
    assert fractional_timestep(a, float(a[37])) == pytest.approx(37, abs=1e-4)
    t = fractional_timestep(a, float((a[37] + a[38]) / 2))
    assert 37 < t < 38


def test_msma_refuses_a_sigma_outside_the_schedule(model):
    from roseood.errors import RoseError

    with pytest.raises(RoseError, match="outside this model's schedule"):
        MSMA(model, sigma_low=1e-4)


def pndm_transfer(x: Tensor, eps: Tensor, a_t: Tensor, a_prev: Tensor) -> Tensor:
    """PNDM's transfer φ (Liu et al., ICLR 2022, eq. 9) from ᾱ_t to ᾱ_prev."""
    denom = a_t * (1 - a_prev).sqrt() + (a_t * (1 - a_t) * a_prev).sqrt()
    return (a_prev / a_t).sqrt() * x - (a_prev - a_t) * eps / denom


def plms_reconstruction(model: DiffusionModel, y0: torch.Tensor, noise: torch.Tensor, ts: list[int]):
    """Noise ``y0`` to ts[0], then PLMS down ``ts``: a pseudo-improved-Euler first step, then linear
    multi-step (Adams–Bashforth 2, 3, 4) on the noise predictions at the accepted points."""
    a = alphas_bar()
    y = a[ts[0]].sqrt() * y0 + (1 - a[ts[0]]).sqrt() * noise
    ets: list[torch.Tensor] = []
    for t, t_prev in itertools.pairwise(ts):
        ets.append(unet(model, y.float(), t))
        if len(ets) == 1:
            e2 = unet(model, pndm_transfer(y, ets[0], a[t], a[t_prev]).float(), t_prev)
            eps = (ets[0] + e2) / 2
        elif len(ets) == 2:
            eps = (3 * ets[-1] - ets[-2]) / 2
        elif len(ets) == 3:
            eps = (23 * ets[-1] - 16 * ets[-2] + 5 * ets[-3]) / 12
        else:
            eps = (55 * ets[-1] - 59 * ets[-2] + 37 * ets[-3] - 9 * ets[-4]) / 24
        y = pndm_transfer(y, eps, a[t], a[t_prev])
    return y


def test_ddpm_ood_reconstruction_rederived(model, images):
    """DDPM-OOD: PLMS over 10 steps (stride 100), starts every 3rd from the second (t = 100, 400, 700),
    each reconstruction clamped; MSE in [0, 1] units z-scored with in-distribution statistics (ddof 1)
    per start, averaged."""
    steps, skip, seed = 10, 3, 4
    fit = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    schedule = list(range(0, T, 100))
    starts = schedule[1::skip]
    assert starts == [100, 400, 700]
    g = torch.Generator().manual_seed(seed)
    noises = [torch.randn(1, 8, 8, generator=g).double() for _ in starts]

    def mse(x: torch.Tensor) -> torch.Tensor:
        cols = []
        for t0, noise in zip(starts, noises, strict=True):
            down = [t for t in schedule if t <= t0][::-1]
            rec = plms_reconstruction(model, (2 * x - 1).double(), noise, down)
            cols.append(((rec.clamp(-1, 1) + 1) / 2 - x.double()).pow(2).flatten(1).mean(1))
        return torch.stack(cols, 1)

    det = Reconstruction(model, steps=steps, skip=skip, seed=seed)
    assert det.starts == starts and det.nfe_per_image == 2 + 5 + 8
    close(det.reconstruction_errors(images).numpy(), mse(images).numpy())
    ref = mse(fit)
    theirs = ((mse(images) - ref.mean(0)) / ref.std(0, unbiased=True)).mean(1)
    close(det.fit(fit).score(images), theirs.numpy())


def test_msma_converts_a_v_prediction_at_the_fractional_level(images):
    """A v-predicting UNet's noise at the level's own ᾱ (not the nearest integer timestep's):
    ε = √ᾱ v + √(1 − ᾱ) x_t."""
    torch.manual_seed(0)
    model = DiffusionModel(
        in_channels=1, image_size=8, widths=(8, 16), scheduler={"prediction_type": "v_prediction"}
    ).eval()
    det = MSMA(model, levels=2)
    cols = []
    for alpha_bar, t in det.timesteps():
        xt = (np.sqrt(alpha_bar) * (2 * images - 1)).double()
        v = unet(model, xt.float(), t)
        cols.append((np.sqrt(alpha_bar) * v + np.sqrt(1 - alpha_bar) * xt).flatten(1).norm(dim=1))
    close(det.statistics(images), torch.stack(cols, 1).numpy())
