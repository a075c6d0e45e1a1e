"""The DDPM variational bound in bits/dim and the held-out ε-MSE, against an independent derivation: each
term from torch.distributions (Gaussian KLs, the decoder's bin probability from Normal CDFs) on the
closed-form posterior, summed over every timestep of a short schedule."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from roseood.errors import RoseError
from roseood.models.diffusion import DiffusionModel
from roseood.models.diffusion.quality import discretised_log_likelihood, held_out_metrics


def tiny(t: int = 10, variance: str = "fixed_small") -> DiffusionModel:
    torch.manual_seed(0)
    sched = {"num_train_timesteps": t, "beta_start": 0.01, "beta_end": 0.3, "variance_type": variance}
    return DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), scheduler=sched).eval()


def oracle(model: DiffusionModel, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bound (nats per image) and ε-MSE over every timestep, with the noise ``held_out_metrics`` draws
    at k = T - 1 (the same generator calls: one uniform per stratum, then one noise image per row)."""
    total = model.train_timesteps
    k = total - 1
    x0 = (x.double() / 255) * 2 - 1
    n = x0.shape[0]
    gen = torch.Generator().manual_seed(seed)
    torch.rand(n, k, generator=gen, dtype=torch.float64)
    noise = torch.randn(n, k + 1, *x0.shape[1:], generator=gen, dtype=torch.float64)
    a = model.alphas_cumprod.double()
    betas = model.scheduler.betas.double()
    small = model.scheduler.config.variance_type == "fixed_small"
    bound = kl_divergence(Normal(a[-1].sqrt() * x0, (1 - a[-1]).sqrt()), Normal(0.0, 1.0)).flatten(1).sum(1)
    mse = torch.zeros(n, dtype=torch.float64)
    for t in range(total):
        e = noise[:, t]
        xt = a[t].sqrt() * x0 + (1 - a[t]).sqrt() * e
        with torch.no_grad():
            eps = model.unet(xt.float(), torch.full((n,), t)).sample.double()
        mse += (eps - e).pow(2).flatten(1).mean(1) / total
        a_prev = a[t - 1] if t > 0 else torch.tensor(1.0, dtype=torch.float64)
        mean_p = (xt - betas[t] / (1 - a[t]).sqrt() * eps) / (1 - betas[t]).sqrt()
        tilde = lambda s: betas[s] * (1 - a[s - 1]) / (1 - a[s])  # noqa: E731
        if t == 0:  # the decoder: N(mean_p, β̃_1) integrated over x0's bin of width 2/255
            p = Normal(mean_p, tilde(1).sqrt())
            hi = torch.where(x0 > 0.999, torch.ones_like(x0), p.cdf(x0 + 1 / 255))
            lo = torch.where(x0 < -0.999, torch.zeros_like(x0), p.cdf(x0 - 1 / 255))
            bound += -(hi - lo).log().flatten(1).sum(1)
            continue
        mean_q = (a_prev.sqrt() * betas[t] * x0 + (1 - betas[t]).sqrt() * (1 - a_prev) * xt) / (1 - a[t])
        q = Normal(mean_q, tilde(t).sqrt())
        p = Normal(mean_p, (tilde(t) if small else betas[t]).sqrt())
        bound += kl_divergence(q, p).flatten(1).sum(1)
    return bound, mse


@pytest.mark.parametrize("variance", ["fixed_small", "fixed_large"])
def test_bound_at_every_timestep_equals_the_term_by_term_derivation(variance):
    model = tiny(variance=variance)
    x = torch.randint(0, 256, (3, 1, 8, 8), dtype=torch.uint8)
    x[0, 0, 0, :2] = torch.tensor([0, 255])  # both open edge bins
    got = held_out_metrics(model, x, k=model.train_timesteps - 1, seed=3, batch_rows=7)
    bound, mse = oracle(model, x, seed=3)
    # float64 on both sides around float32 UNet outputs: the sums agree to far below one bit per image
    assert got["bits_per_dim"] == pytest.approx(float(bound.mean()) / (64 * math.log(2)), rel=1e-6)
    assert got["eps_mse"] == pytest.approx(float(mse.mean()), rel=1e-6)


def test_fewer_strata_estimate_the_same_bound():
    """K < T - 1 strata: an unbiased estimate of the middle terms, so the mean over noise seeds is near the
    full bound's mean (the decoder and prior terms are computed exactly either way)."""
    model = tiny(t=20)
    x = torch.randint(0, 256, (4, 1, 8, 8), dtype=torch.uint8)
    full = [held_out_metrics(model, x, k=19, seed=s)["bits_per_dim"] for s in range(30)]
    few = [held_out_metrics(model, x, k=4, seed=s)["bits_per_dim"] for s in range(30)]
    spread = torch.tensor(few).std().item() / math.sqrt(len(few))
    assert abs(sum(full) / 30 - sum(few) / 30) < 4 * spread + 1e-3


def test_discretised_likelihood_sums_to_one_over_the_256_levels():
    levels = torch.arange(256, dtype=torch.float64) / 255 * 2 - 1
    for mean, var in [(0.0, 0.01), (0.9, 1e-4), (-1.2, 0.5)]:
        logp = discretised_log_likelihood(levels, torch.full_like(levels, mean), torch.full_like(levels, var))
        assert logp.exp().sum().item() == pytest.approx(1.0, abs=1e-9)


def test_bad_settings_are_refused_in_one_line():
    model = tiny()
    x = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    with pytest.raises(RoseError, match=r"k must be in 1\.\.9"):
        held_out_metrics(model, x, k=10)
    learned = tiny(variance="learned_range")
    with pytest.raises(RoseError, match="fixed reverse variance"):
        held_out_metrics(learned, x, k=5)


def test_samples_are_images_repeatable_by_seed(tmp_path):
    from roseood.evaluation.gallery import save_grid
    from roseood.models.diffusion.quality import sample_images

    model = tiny()
    a = sample_images(model, n=5, steps=3, seed=1, batch=2)
    assert a.shape == (5, 1, 8, 8) and a.dtype == torch.uint8
    assert torch.equal(a, sample_images(model, n=5, steps=3, seed=1))
    assert not torch.equal(a, sample_images(model, n=5, steps=3, seed=2))
    from PIL import Image

    png = save_grid(a.numpy(), tmp_path / "g.png", columns=4)
    assert Image.open(png).size == (4 * 10 + 2, 2 * 10 + 2)
    with pytest.raises(RoseError, match="steps"):
        sample_images(model, steps=11)


def test_a_long_sampling_run_says_its_time_before_the_rest_and_counts_steps(monkeypatch, capsys):
    """``rose sample --images 100000`` took minutes before its first line: the first denoising step is
    timed and, where the run outlasts the first progress line, forecast in one line before the rest;
    progress counts steps (a CIFAR-10 UNet's batch takes a minute). Nothing is said without progress."""
    from roseood import progress as progress_module
    from roseood.models.diffusion.quality import sample_images

    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)  # forecast whatever the estimate
    model = tiny()
    quiet = sample_images(model, n=5, steps=3, seed=1, batch=2, progress=False)
    assert capsys.readouterr().err == ""
    assert torch.equal(sample_images(model, n=5, steps=3, seed=1, batch=2, progress=True), quiet)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("sampling 5 images: ≈ ") and lines[0].count("≈") == 1
    assert "from one timed step of 2 images, 3 steps each" in lines[0]
    assert sum("≈" in line for line in lines) == 1 and lines[-1].startswith("sampling 5 images: 9/9 (100 %)")


def test_generate_is_ddim_sampling_with_steps_its_only_option():
    from roseood.models.diffusion.quality import sample_images

    model = tiny()
    assert torch.equal(model.generate(3, seed=4, steps=2), sample_images(model, n=3, steps=2, seed=4))
    with pytest.raises(RoseError, match="steps only, not eta"):
        model.generate(3, eta=1)
