"""How good a trained DDPM is: its held-out ε-MSE and its variational bound in bits per dimension (a
flow-matching model: its held-out velocity MSE, which bounds no likelihood; a latent model: its ε-MSE,
whose bound would be of latents); and samples from each.

The bound is Ho et al.'s (2020, eq. 5) on images discretised to 256 levels in [-1, 1]:
``L = KL(q(x_T|x_0) ‖ N(0, I)) + Σ_{t≥1} KL(q(x_{t-1}|x_t, x_0) ‖ p(x_{t-1}|x_t)) − log p(x_0|x_1)``,
the last term a discretised Gaussian (bins of width 2/255, open at ±1), every reverse variance the
scheduler's ("fixed_small": β̃_t, "fixed_large": β_t; at t = 1 both take β̃_2, as the improved-diffusion
code does). The sum over the T − 1 middle terms is estimated without bias from K stratified timesteps per
image (exact at K = T − 1); the prior and decoder terms are always computed exactly.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

import torch
from torch import Tensor

from roseood.errors import RoseError
from roseood.progress import forecast_rest, resolve
from roseood.progress import progress as show

BIN = 1.0 / 255.0  # half a discretisation bin of [-1, 1] at 256 levels


class Denoiser(Protocol):
    """What these figures use of a DDPM (``roseood.models.DiffusionModel`` has it): its noise schedule
    and scheduler, and its EMA network as an ε-predictor on [-1, 1] images."""

    alphas_cumprod: Tensor
    ema_steps: Tensor
    scheduler: Any
    training: bool
    objective: Any
    train_objective: str
    space_shape: tuple[int, int, int]
    space: Any
    condition: Any

    @property
    def train_timesteps(self) -> int: ...

    @property
    def input_shape(self) -> tuple[int, ...] | None: ...

    def eps(self, xt: Tensor, t: Tensor, *, labels: Tensor | None = None) -> Tensor: ...

    def predict(self, xt: Tensor, t: Tensor, labels: Tensor | None = None) -> Tensor: ...

    def squared_error(self, x0: Tensor, t: Tensor, noise: Tensor, labels: Tensor | None = None) -> Tensor: ...

    def train(self, mode: bool = True) -> Any: ...


def _schedule(model: Denoiser) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """ᾱ_t, ᾱ_{t-1}, β_t and the reverse-process variance σ_t² per timestep (float64)."""
    a = model.alphas_cumprod.double()
    prev = torch.cat([a.new_ones(1), a[:-1]])
    beta = 1 - a / prev
    posterior = beta * (1 - prev) / (1 - a)
    kind = model.scheduler.config.variance_type
    if kind == "fixed_small":
        var = posterior.clone()
    elif kind == "fixed_large":
        var = beta.clone()
    else:
        raise RoseError(f"the bound needs a fixed reverse variance; this scheduler has {kind!r}")
    var[0] = posterior[1] if len(a) > 1 else beta[0]
    return a, prev, beta, var


def _gaussian_kl(mu_q: Tensor, var_q: Tensor, mu_p: Tensor, var_p: Tensor) -> Tensor:
    """KL(N(mu_q, var_q) ‖ N(mu_p, var_p)) per element."""
    return 0.5 * (torch.log(var_p / var_q) + (var_q + (mu_q - mu_p) ** 2) / var_p - 1)


def discretised_log_likelihood(x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """log P(x) per element of a Gaussian N(mean, var) integrated over x's bin of [-1, 1] at 256
    levels (the edge bins reach to ∓∞)."""
    sd = var.sqrt()
    upper = torch.where(x > 1 - BIN, torch.full_like(x, math.inf), (x + BIN - mean) / sd)
    lower = torch.where(x < -1 + BIN, torch.full_like(x, -math.inf), (x - BIN - mean) / sd)
    log_up, log_low = torch.special.log_ndtr(upper), torch.special.log_ndtr(lower)
    # log(Φ(u) − Φ(l)) = log Φ(u) + log(1 − Φ(l)/Φ(u)), stable where both are tiny
    return log_up + torch.log1p(-torch.exp(log_low - log_up).clamp(max=1 - 1e-12))


@torch.no_grad()
def held_out_metrics(
    model: Denoiser, images: Tensor, k: int = 50, seed: int = 0, batch_rows: int = 512
) -> dict[str, float]:
    """The held-out ε-MSE (per pixel, t uniform over the T timesteps) and the variational bound in bits
    per dimension of ``images`` (uint8 or [0, 1]) under the model's evaluation (EMA) weights, from K
    stratified timesteps per image and fixed noise (``seed``), so that successive checkpoints are
    compared on the same draws."""
    total = model.train_timesteps
    if total < 2:
        raise RoseError("the bound needs at least 2 train timesteps")
    if not 1 <= k <= total - 1:
        raise RoseError(f"k must be in 1..{total - 1} (the middle terms of the bound), got {k}")
    was_training = model.training
    model.train(False)
    device = model.ema_steps.device
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    x0 = model.space.encode(x.to(device)).double()
    n, dims = x0.shape[0], x0[0].numel()
    gen = torch.Generator().manual_seed(seed)
    # row 0 of each image: t = 0 (the decoder); rows 1..k: one timestep in each of k strata of 1..T-1
    u = torch.rand(n, k, generator=gen, dtype=torch.float64)
    strata = 1 + ((torch.arange(k, dtype=torch.float64) + u) * (total - 1) / k).floor().long()
    t = torch.cat([torch.zeros(n, 1, dtype=torch.long), strata.clamp(max=total - 1)], 1).to(device)
    noise = torch.randn(n, k + 1, *x0.shape[1:], generator=gen, dtype=torch.float64).to(device)
    a, prev, beta, var = (v.to(device) for v in _schedule(model))
    rows_t, rows_noise = t.flatten(), noise.flatten(0, 1)
    terms = torch.empty(rows_t.shape[0], dtype=torch.float64, device=device)
    sq_err = torch.empty_like(terms)
    for s in range(0, rows_t.shape[0], batch_rows):
        tt, e = rows_t[s : s + batch_rows], rows_noise[s : s + batch_rows]
        z0 = x0[
            torch.arange(s, s + len(tt), device=device) // (k + 1)
        ]  # each row's image, not N·(K+1) copies
        view = (-1,) + (1,) * (z0.dim() - 1)
        ab, ap, b, v = (q[tt].view(view) for q in (a, prev, beta, var))
        xt = ab.sqrt() * z0 + (1 - ab).sqrt() * e
        eps_hat = model.eps(xt.float(), tt).double()
        sq_err[s : s + batch_rows] = (eps_hat - e).pow(2).flatten(1).mean(1)
        mu_p = (xt - b / (1 - ab).sqrt() * eps_hat) / (1 - b).sqrt()
        mu_q = (ap.sqrt() * b * z0 + (1 - b).sqrt() * (1 - ap) * xt) / (1 - ab)
        var_q = (b * (1 - ap) / (1 - ab)).clamp_min(1e-40)
        kl = _gaussian_kl(mu_q, var_q.expand_as(mu_q), mu_p, v.expand_as(mu_p)).flatten(1).sum(1)
        decoder = -discretised_log_likelihood(z0, mu_p, v.expand_as(mu_p)).flatten(1).sum(1)
        terms[s : s + batch_rows] = torch.where(tt == 0, decoder, kl)
    terms, sq_err = terms.view(n, k + 1), sq_err.view(n, k + 1)
    a_last = a[-1]
    prior = _gaussian_kl(
        a_last.sqrt() * x0, (1 - a_last).expand_as(x0), torch.zeros_like(x0), torch.ones_like(x0)
    )
    bound = prior.flatten(1).sum(1) + terms[:, 0] + terms[:, 1:].sum(1) * (total - 1) / k
    eps_mse = (sq_err[:, 0] + sq_err[:, 1:].mean(1) * (total - 1)) / total
    model.train(was_training)
    return {
        "eps_mse": float(eps_mse.mean()),
        "bits_per_dim": float(bound.mean() / (dims * math.log(2))),
    }


@torch.no_grad()
def loss_metrics(
    model: Denoiser, images: Tensor, k: int = 50, seed: int = 0, batch_rows: int = 512
) -> dict[str, float]:
    """The held-out training loss per model-space dimension, named by the model's objective (``eps_mse``,
    ``v_mse``), at s = t / T uniform in [0, 1) as it trains, from K stratified s per image and fixed noise
    (``seed``), so that successive checkpoints are compared on the same draws; a class-conditional model's
    at its judged condition (the marginal over its classes: −log mean_y exp(−L_y))."""
    if k < 1:
        raise RoseError(f"k must be at least 1, got {k}")
    was_training = model.training
    model.train(False)
    device = model.ema_steps.device
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    x0 = model.space.encode(x.to(device))
    n, dims = x0.shape[0], x0[0].numel()
    gen = torch.Generator().manual_seed(seed)
    s = (torch.arange(k, dtype=torch.float64) + torch.rand(n, k, generator=gen, dtype=torch.float64)) / k
    t = model.objective.timesteps_of(s, model.scheduler).flatten().to(device)
    noise = torch.randn(n * k, *x0.shape[1:], generator=gen).to(device)
    err = torch.empty(n * k, dtype=torch.float64)
    c = model.condition.copies
    for a in range(0, n * k, batch_rows):
        rows = torch.arange(a, min(a + batch_rows, n * k), device=device).repeat_interleave(c)
        labels = model.condition.labels(len(rows), device)
        e = model.squared_error(x0[rows // k], t[rows], noise[rows], labels).view(-1, c)
        err[a : a + len(rows) // c] = model.condition.combine(e).double().cpu()
    model.train(was_training)
    return {model.train_objective: float(err.mean() / dims)}


@torch.no_grad()
def sample_images(
    model: Denoiser,
    n: int = 64,
    steps: int = 50,
    seed: int = 0,
    batch: int = 64,
    progress: bool | None = None,
    labels: Tensor | None = None,
) -> Tensor:
    """``n`` images (uint8, (n, C, H, W)) generated with the evaluation (EMA) weights from noise seeded
    by ``seed``: by DDIM (η = 0, ``steps`` steps over the train timesteps), or a flow-matching model by
    ``steps`` Euler steps of its flow (diffusers' FlowMatchEulerDiscreteScheduler); a look at what the
    model learned."""
    if n < 1 or steps < 1 or steps > model.train_timesteps:
        raise RoseError(
            f"sampling needs n ≥ 1 and 1 ≤ steps ≤ {model.train_timesteps}, got n={n}, steps={steps}"
        )
    was_training = model.training
    model.train(False)
    sched = model.objective.sampler(model.scheduler)
    device = model.ema_steps.device
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *model.space_shape, generator=gen)
    out, starts = [], range(0, n, batch)
    # progress by denoising step, not by batch: a batch of a CIFAR-10 UNet takes a minute on 2 cores
    units = len(starts) * steps
    bar = show(total=units, desc=f"sampling {n} images", enabled=progress, unit="step")
    start, timed = time.perf_counter(), not resolve(progress)
    for s in starts:
        xt = x[s : s + batch].to(device)
        lab = None if labels is None else labels[s : s + batch].to(device)
        sched.set_timesteps(steps)  # a flow scheduler counts its steps: set again for each batch
        for t in sched.timesteps:
            row, step = model.objective.sampling(t)
            tt = torch.full((xt.shape[0],), row, device=device)
            raw = model.predict(xt, tt, lab)
            pred = model.objective.prediction(raw, xt, tt, model.scheduler, model.alphas_cumprod)
            xt = sched.step(pred, step, xt).prev_sample
            if not timed:  # before the rest: the first step of the first batch
                basis, timed = f"from one timed step of {xt.shape[0]} images, {steps} steps each", True
                forecast_rest(f"sampling {n:,} images", time.perf_counter() - start, units, basis)
            bar.update(1)
        xt = model.space.decode(xt)
        out.append(((xt.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu())
    bar.close()
    model.train(was_training)
    return torch.cat(out)
