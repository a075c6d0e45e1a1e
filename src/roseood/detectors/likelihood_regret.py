"""Likelihood Regret (Xiao et al. 2020), the paper's LR_E baseline: how much a VAE's likelihood of one
image improves when its encoder alone is fine-tuned on that image.

Per image, a copy of the encoder (eval mode: BatchNorm keeps its running statistics) takes ``steps``
Adam steps on the single-sample negative ELBO; the score is the IWAE NLL before minus after, with the
decoder fixed. Defaults follow the ROSE authors' runs: 100 steps, lr 1e-4, betas (0.9, 0.999), L2 weight
decay 5e-5 (``torch.optim.Adam``'s ``weight_decay``), IWAE with k = 20 samples.

The per-image optimisations are independent, so a batch runs as one vectorised optimisation: the encoder
parameters are stacked per image and ``torch.func.vmap(torch.func.grad(...))`` gives every copy's gradient
at once; Adam is applied elementwise, exactly as ``torch.optim.Adam`` would per copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from roseood.data.tensors import iter_batches
from roseood.detectors.base import Detector, register_detector
from roseood.detectors.inputs import per_image_count
from roseood.errors import DataError, RoseError
from roseood.models.base import GenerativeModel, is_latent_model, model_name
from roseood.models.vae import VAE
from roseood.randomness import per_input_seed, randn
from roseood.validation import check_float, check_seed

Params = dict[str, Tensor]


class _StackedEncoder(nn.Module):
    """The encoder evaluated with a separate parameter copy per image: row i of the input uses copy i."""

    def __init__(self, encoder: nn.Module, params: Params) -> None:
        super().__init__()
        self.encoder = encoder
        self.params = params

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        buffers = dict(self.encoder.named_buffers())

        def one(p: Params, x1: Tensor) -> tuple[Tensor, Tensor]:
            mu, logvar = functional_call(self.encoder, (p, buffers), (x1[None],))
            return mu[0], logvar[0]

        return vmap(one)(self.params, x)


@contextmanager
def _encoder_replaced(model: VAE, encoder: nn.Module) -> Iterator[None]:
    """Temporarily swap ``model.encoder`` so the model's own IWAE estimator uses the optimised copies."""
    original = model.encoder
    model.encoder = encoder  # type: ignore[assignment]
    try:
        yield
    finally:
        model.encoder = original


def adam_step(
    params: Params,
    grads: Params,
    exp_avg: Params,
    exp_avg_sq: Params,
    step: int,
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    eps: float = 1e-8,
) -> None:
    """One in-place Adam step on every tensor, the arithmetic of ``torch.optim.Adam`` (L2 weight decay
    added to the gradient, bias corrections on the step size and on √v)."""
    beta1, beta2 = betas
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    for name, p in params.items():
        g = grads[name].add(p, alpha=weight_decay) if weight_decay else grads[name]
        exp_avg[name].lerp_(g, 1 - beta1)
        exp_avg_sq[name].mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (exp_avg_sq[name].sqrt() / bias_correction2_sqrt).add_(eps)
        p.addcdiv_(exp_avg[name], denom, value=-lr / bias_correction1)


class LikelihoodRegret(Detector):
    """Likelihood Regret score (nats; higher = more OOD) of a VAE.

    ``steps``/``lr``/``betas``/``weight_decay``: the per-image Adam optimisation of the encoder copy;
    ``k``: IWAE samples for the NLL before and after; ``sample``: draw z in the optimised ELBO as the
    authors do (False decodes z = μ). Every sample is drawn per image from ``seed`` and the image (the
    same IWAE samples before and after), so a score does not depend on the run, batch or process count.
    ``batch_size`` images are optimised together.
    """

    method = "lr"

    def __init__(
        self,
        model: GenerativeModel | None,
        *,
        steps: int = 100,
        lr: float = 1e-4,
        betas: tuple[float, float] | list[float] = (0.9, 0.999),
        weight_decay: float = 5e-5,
        k: int = 20,
        sample: bool = True,
        seed: int = 0,
        batch_size: int = 16,
        progress: bool | None = None,
    ) -> None:
        super().__init__(model, batch_size=batch_size, progress=progress)
        if not is_latent_model(model):
            found = "no model" if model is None else f"a {model_name(model)}"
            raise RoseError(f"Likelihood Regret needs a VAE (it fine-tunes the encoder), got {found}")
        self.steps = per_image_count(steps, "steps", self.method, model, low=0)
        self.lr = check_float(lr, "lr", low=0.0, low_open=True)
        self.weight_decay = check_float(weight_decay, "weight_decay", low=0.0)
        self.k = per_image_count(k, "k", self.method, model)
        if len(betas) != 2 or not all(0.0 <= check_float(b, "betas") < 1.0 for b in betas):
            raise RoseError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.model: VAE = cast(VAE, model)  # the IWAE and encoder parts of LatentModel, typed as the VAE
        self.betas = [float(betas[0]), float(betas[1])]
        self.sample = sample
        self.seed = check_seed(seed)

    def _fit(self, x: Tensor) -> None:
        """Likelihood Regret learns nothing from in-distribution data."""

    def _neg_elbo(self, p: Params, buffers: Params, x1: Tensor, eps1: Tensor) -> Tensor:
        """Negative ELBO of one image under encoder parameters ``p``, z = μ + eps·σ (eps = 0: z = μ)."""
        mu, logvar = functional_call(self.model.encoder, (p, buffers), (x1[None],))
        z = mu + eps1[None] * (0.5 * logvar).exp()
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum()
        return self.model.reconstruction_nll(self.model.decoder(z), x1[None])[0] + kl

    def optimize_encoders(self, x: Tensor, noise: Tensor | None = None) -> Params:
        """Encoder parameters after ``steps`` Adam steps per image, stacked along a new first axis.

        ``noise`` of shape (steps, N, nz) fixes the latent noise of every step; by default it is drawn
        per image (``roseood.randomness``; ``sample=True``) or zero, i.e. z = μ (``sample=False``).
        """
        n, nz = x.shape[0], self.model.nz
        if noise is not None and tuple(noise.shape) != (self.steps, n, nz):
            raise DataError(f"noise must have shape {(self.steps, n, nz)}, got {tuple(noise.shape)}")
        encoder = self.model.encoder
        self.model.eval()
        buffers = {name: b.detach() for name, b in encoder.named_buffers()}
        params = {name: p.detach().expand(n, *p.shape).clone() for name, p in encoder.named_parameters()}
        exp_avg = {name: torch.zeros_like(p) for name, p in params.items()}
        exp_avg_sq = {name: torch.zeros_like(p) for name, p in params.items()}
        per_image_grad = vmap(grad(self._neg_elbo), in_dims=(0, None, 0, 0))
        if noise is None and self.sample:
            noise = randn(x, self.steps, nz, stream="lr-latent").transpose(0, 1)
        with torch.no_grad():  # torch.func.grad still differentiates; this only spares the decoder graph
            for step in range(1, self.steps + 1):
                eps = noise[step - 1].to(x) if noise is not None else x.new_zeros(n, nz)
                grads = per_image_grad(params, buffers, x, eps)
                adam_step(
                    params,
                    grads,
                    exp_avg,
                    exp_avg_sq,
                    step,
                    lr=self.lr,
                    betas=(self.betas[0], self.betas[1]),
                    weight_decay=self.weight_decay,
                )
        return params

    def regret(self, x: Tensor, noise: Tensor | None = None) -> Tensor:
        """IWAE NLL before − after the per-image encoder optimisation, for one batch (no validation)."""
        x = x.to(self.device)
        self.model.eval()
        with per_input_seed(self.seed):
            with torch.no_grad():
                before = self.model.iwae_nll(x, self.k)
            params = self.optimize_encoders(x, noise)
            stacked = _StackedEncoder(self.model.encoder, params)
            with torch.no_grad(), _encoder_replaced(self.model, stacked):
                after = self.model.iwae_nll(x, self.k)
        return before - after

    def _score(self, x: Tensor) -> Tensor:
        desc = "Likelihood Regret" if self.progress else None
        return torch.cat([self.regret(batch).cpu() for batch in iter_batches(x, self.batch_size, desc)])


register_detector(LikelihoodRegret)
