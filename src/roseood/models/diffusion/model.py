"""The DDPM as a roseood generative model: a diffusers ``UNet2DModel`` + ``DDPMScheduler`` with EMA
weights and the per-image denoising loss at K fixed (timestep, noise) pairs (see the package doc)."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor

from roseood.errors import RoseError
from roseood.memory import check_memory
from roseood.models.base import GenerativeModel
from roseood.models.diffusion.adapter import Adapter, check_same_adapter
from roseood.models.diffusion.conditioning import Condition
from roseood.models.diffusion.config import (
    LOSS_DEFAULTS,
    check_denoising,
    check_ema_decay,
    check_scheduler_config,
)
from roseood.models.diffusion.denoisers import (
    build_denoiser,
    check_denoiser_config,
    denoiser_kind,
    fresh_denoiser_config,
    predict,
)
from roseood.models.diffusion.ema import EMAWeights
from roseood.models.diffusion.latent import Autoencoder, ModelSpace, check_latent_shapes
from roseood.models.diffusion.library import plain_config
from roseood.models.diffusion.objectives import objective_of
from roseood.models.diffusion.text import TextCondition, text_condition

ROWS_PER_CALL = 512  # denoiser rows per call when no gradient is taken (a batch of 64 images at K = 8)


class DiffusionModel(EMAWeights, GenerativeModel):
    """A DDPM, or a flow-matching model, on images in [0, 1] (seen by the UNet in [-1, 1]).

    Architecture: ``widths`` (block_out_channels), ``layers_per_block``, ``attention`` (a mid-block
    self-attention), ``image_size``, ``in_channels``, ``train_timesteps``, ``classes`` (a
    class-conditional UNet); or ``dit`` (``layers``, ``heads``, ``head_dim``, ``patch``: a DiT of
    ``classes`` labels, one where unset); or a full diffusers ``unet`` config (a UNet's or a DiT's) and
    ``scheduler`` config for a model brought from a diffusers folder (a ``UNet2DConditionModel``'s with
    its ``text`` encoder, ``...diffusion.text``; a LoRA ``adapter`` put in by ``...diffusion.adapter``).
    ``read``: a folder reader's model (``load_diffusers``): its denoiser built empty where it can be, for
    the reader to assign the file's weights (``build_denoiser``), and the optimised weights made only if
    it trains (a model to score holds one denoiser: a copy of Stable Diffusion's UNet is 3.4 GB).
    ``denoising``: the K (timestep, noise) pairs of the per-image loss — ``k``, the timestep range
    ``t_min``..``t_max`` (fractions of the train timesteps; the K timesteps are the midpoints of K
    equal strata of it), ``weighting`` ("simple": ε-MSE; "elbo": each term weighted as in the DDPM
    variational bound), ``seed`` (of the noise).

    The model is made of parts, each with one job: the denoiser's EMA and optimised weights and its layers
    (``EMAWeights``), the ``objective`` its scheduler's class trains by (``...diffusion.objectives``: DDPM's
    ε-prediction, ``objective.name`` "ddpm", or flow matching, "flow": the velocity's squared error at the
    same kind of K fixed (timestep, noise) pairs), the ``space`` it models (``ModelSpace``: the images, or
    an ``autoencoder``'s latents) and the ``condition`` its loss judges (``Condition``, ``TextCondition``);
    the model itself holds the K pairs and composes the losses from them.
    """

    kind = "diffusion"
    alphas_cumprod: Tensor
    loss_timesteps: Tensor
    loss_noise: Tensor

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int = 32,
        widths: tuple[int, ...] | list[int] = (32, 64, 64),
        layers_per_block: int = 1,
        attention: bool = True,
        train_timesteps: int = 1000,
        ema_decay: float = 0.999,
        denoising: dict[str, Any] | None = None,
        unet: dict[str, Any] | None = None,
        scheduler: dict[str, Any] | None = None,
        autoencoder: dict[str, Any] | None = None,
        condition: str | None = None,
        classes: int | None = None,
        dit: dict[str, int] | None = None,
        text: TextCondition | None = None,
        read: bool = False,
    ) -> None:
        codec = None if autoencoder is None else Autoencoder(autoencoder)
        if unet is None:
            shape = {"widths": widths, "layers_per_block": layers_per_block, "attention": attention}
            unet = fresh_denoiser_config(in_channels, image_size, codec, classes, dit, shape)
            if dit is not None and classes is None and condition is None:  # one label: p(x) itself
                condition = "marginal"
        unet = check_denoiser_config(unet)
        kind = denoiser_kind(unet)
        scheduler = check_scheduler_config(
            scheduler if scheduler is not None else {"num_train_timesteps": train_timesteps}
        )
        self.ema_decay = check_ema_decay(ema_decay)
        denoising = check_denoising(denoising if denoising is not None else {})
        self.objective = objective_of(scheduler)
        # what train_loss is: the ε-MSE (DDPM) or the velocity's MSE (flow matching), not a likelihood
        self.train_objective = self.objective.statistic
        net = build_denoiser(unet, denoising["k"], copies=1 if read else 2, empty=read)
        sched, alphas = self.objective.schedule(scheduler)
        # the class the folder or config holds (a DDIMScheduler: DDPM's forward process, read as such)
        self.scheduler_class = str(scheduler.get("_class_name", type(sched).__name__))
        space = (net.config.in_channels, unet["sample_size"], unet["sample_size"])
        channels, size = space[:2] if codec is None else check_latent_shapes(codec, unet)
        super().__init__(channels, size)
        self.space_shape = space  # what the UNet models: the images, or their latents
        self.autoencoder = codec
        # elements per row of the denoiser's largest early activation judge a batch's memory
        self.space = ModelSpace(codec, self.input_shape, space, kind.width(unet))
        self.unet = net  # the EMA weights: what evaluation, ROSE and export use
        # the optimised weights: from the start in a model built to train, once it trains in one read
        self.register_module("online", None if read else copy.deepcopy(net))
        self.scheduler = sched
        self.register_buffer("ema_steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("alphas_cumprod", alphas.clone())
        classes, null = kind.classes(unet)
        # the default (a text encoder's: the empty prompt); then the one asked for
        judged = text_condition(text, unet)
        self.condition: Condition | TextCondition = judged or Condition(classes, None, null)
        self.adapter: Adapter | None = None
        self.variety = variety(codec, type(net).__name__, self.objective.name, self.condition)
        self.set_condition(condition)
        self.set_denoising(**denoising)

    # -- the fixed (timestep, noise) pairs ---------------------------------------------------------
    def set_denoising(self, **options: Any) -> None:
        """Set the per-image loss's K (timestep, noise) pairs (see the class doc); unknown keys are an
        error. Changes the model's fingerprint: detectors fitted before must be refitted."""
        opts = check_denoising(options, base=getattr(self, "denoising", LOSS_DEFAULTS))
        self.objective.check_weighting(opts["weighting"])
        k, lo, hi = opts["k"], opts["t_min"], opts["t_max"]
        what = f"denoising k = {k} (a buffer of k noise images of shape {self.space_shape})"
        check_memory(k * (math.prod(self.space_shape) * 4 + 16), what, hint="lower k")
        self.denoising = opts
        strata = lo + (hi - lo) * (torch.arange(k, dtype=torch.float64) + 0.5) / k
        t = self.objective.timesteps_of(strata, self.scheduler)
        gen = torch.Generator().manual_seed(int(opts["seed"]))
        noise = torch.randn(k, *self.space_shape, generator=gen)
        device = self.ema_steps.device
        self.register_buffer("loss_timesteps", t.to(device))
        self.register_buffer("loss_noise", noise.to(device))

    def describe(self) -> str:
        """What roseood read: the denoiser, its objective and schedule, the space and the conditioning."""
        cfg = self.scheduler.config
        parameters = f"{sum(p.numel() for p in self.unet.parameters()):,}".replace(",", " ")
        built = type(self.scheduler).__name__
        read = "" if self.scheduler_class == built else f" (its training process read by {built})"
        objective, steps = self.objective.describe(cfg)
        schedule = f"{self.scheduler_class}{read}, {cfg.num_train_timesteps}{steps}"
        if self.autoencoder is None:
            space = "pixel space (no autoencoder)"
        else:
            shapes = "×".join(map(str, self.input_shape)), "×".join(map(str, self.space_shape))
            space = f"latent space: {shapes[0]} images → {shapes[1]} latents by {self.autoencoder.describe()}"
        return (
            f"denoiser: diffusers {type(self.unet).__name__} ({parameters} parameters), {objective}; "
            f"schedule: {schedule}; {space}; {self.condition.describe()}; "
            + ("" if self.adapter is None else f"{self.adapter.describe()}; ")
            + f"ROSE's pairs: k = {self.k}, t in [{self.denoising['t_min']:g}, {self.denoising['t_max']:g})"
        )

    def loss_settings(self) -> dict[str, Any]:
        """The per-image loss's pairs (``denoising``: k, t_min, t_max, weighting, seed) and, for a
        conditional model, how p(x) is judged (``condition``: a label, the marginal or a prompt), with a
        LoRA adapter's digest (``adapter``)."""
        judged = {"condition": self.condition.spec} if self.condition.recorded else {}
        adapted = {} if self.adapter is None else {"adapter": self.adapter.digest}
        return dict(self.denoising) | judged | adapted

    def set_loss_settings(
        self, condition: str | None = None, adapter: str | None = None, **options: Any
    ) -> None:
        """``set_condition`` and ``set_denoising``: what a detector file or ``--condition``, ``--rose-k``
        and ``--rose-t-range`` set; a detector file's ``adapter`` digest must be the model's."""
        if adapter is not None:
            check_same_adapter(self.adapter, adapter)
        if condition is not None:
            self.set_condition(condition)
        if options or condition is None:
            self.set_denoising(**options)

    def set_condition(self, spec: str | None) -> None:
        """Judge a class-conditional model by ``spec``: "marginal", "null" or "label:N" (None: the
        default, see ``Condition``); refused in one line for an unconditional one. Changes the model's
        fingerprint: the judged label (−1: the marginal) is a buffer; a text-conditioned model judges the
        prompt of ``spec`` (see ``TextCondition``), its embedding a buffer."""
        if isinstance(self.condition, TextCondition):
            self.condition.judge(spec)
            return
        self.condition = Condition(self.condition.classes, spec, self.condition.null)
        if self.condition.classes is not None:
            label = -1 if self.condition.label is None else self.condition.label
            self.register_buffer("condition_label", torch.tensor(label, device=self.ema_steps.device))

    @property
    def train_timesteps(self) -> int:
        return int(self.scheduler.config.num_train_timesteps)

    @property
    def k(self) -> int:
        """Number of (timestep, noise) pairs of the per-image loss (UNet evaluations per image)."""
        return int(self.loss_timesteps.shape[0])

    @property
    def rows_per_input(self) -> int:
        """Rows per image of the per-image loss (K, one per pair, as ``row_loss`` takes them): ROSE sizes
        its batches by rows. The marginal over C classes runs C denoiser rows inside each, which ROSE's
        memory plan measures with the rest of an image's cost."""
        return self.k

    def row_labels(self) -> list[int]:
        """The timestep of each of an image's K rows (σ·T rounded down, in flow matching)."""
        return [int(t) for t in self.loss_timesteps]

    def config(self) -> dict[str, Any]:
        scheduler = plain_config(self.scheduler.config)
        if self.scheduler_class != "DDPMScheduler":  # says the objective (DDPM's is the default); shown
            scheduler["_class_name"] = self.scheduler_class
        denoiser = plain_config(self.unet.config)
        if type(self.unet).__name__ != "UNet2DModel":  # the class says which (a UNet where none is named)
            denoiser["_class_name"] = type(self.unet).__name__
        config = {
            "unet": denoiser,
            "scheduler": scheduler,
            "ema_decay": self.ema_decay,
            "denoising": dict(self.denoising),
        }
        if self.autoencoder is not None:
            config["autoencoder"] = self.autoencoder.config()
        if self.condition.recorded:
            config["condition"] = self.condition.spec
        return config

    # -- the denoiser's predictions and the losses of the K pairs -------------------------------
    def predict(self, xt: Tensor, t: Tensor, labels: Tensor | None = None, net: Any = None) -> Tensor:
        """The UNet's output at (x_t, t) (the EMA one unless ``net``), given each row's class ``labels``
        where it is class-conditional (default: the judged label; the marginal has none, a one-line
        error: DiffPath, MSMA, DDPM-OOD, sampling and training follow one path per image)."""
        net = net if net is not None else self.net()
        if labels is None:  # None for an unconditional denoiser
            labels = self.condition.fixed(xt.shape[0], xt.device, "one denoising path per image")
        return predict(net, xt, t, labels)

    def eps(
        self,
        xt: Tensor,
        t: Tensor,
        net: Any = None,
        alpha_bar: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> Tensor:
        """The predicted noise ε̂(x_t, t), whatever the UNet predicts (ε, v or x0); ``alpha_bar``: ᾱ of
        each row where ``t`` is fractional (default: the schedule's ᾱ_t). DDPM's forward process only."""
        self.objective.require_forward_process("the predicted noise ε̂ of DDPM's forward process")
        out = self.predict(xt, t, labels, net)
        return self.objective.prediction(out, xt, t, self.scheduler, self.alphas_cumprod, alpha_bar)

    def noised(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """x_t = √ᾱ_t x0 + √(1 − ᾱ_t) ε (DDPM); x_σ = (1 − σ) x0 + σ ε with σ = t / T (flow matching)."""
        return self.objective.noised(x0, t, noise, self.alphas_cumprod, self.scheduler)

    def squared_error(self, x0: Tensor, t: Tensor, noise: Tensor, labels: Tensor | None = None) -> Tensor:
        """Per row, the summed squared error of the model's prediction at (t, noise) (and class
        ``labels``): ‖ε̂ − ε‖² (DDPM), ‖v̂ − (ε − x0)‖² (flow matching): the loss each objective trains."""
        xt = self.noised(x0, t, noise)
        out = self.predict(xt, t, labels)
        out = self.objective.prediction(out, xt, t, self.scheduler, self.alphas_cumprod)
        return (out - self.objective.target(x0, noise)).pow(2).flatten(1).sum(1)

    def row_loss(self, rows: Tensor) -> Tensor:
        """The weighted squared error of each row (N·K,) of ``rows``: each image K times in a row
        (image-major), row j noised at pair j mod K. What ROSE with ``rows="each"`` differentiates: one
        gradient per (image, timestep) row instead of their sum."""
        if rows.shape[0] % self.k:
            raise RoseError(f"row_loss takes each image {self.k} times in a row, got {rows.shape[0]} rows")
        self.space.check_batch(rows, copies=self.condition.copies)
        return self.condition.combine(self._space_errors(self.space.encode(rows)))

    def _image_errors(self, x: Tensor) -> Tensor:
        """The weighted squared errors (N, K, C) of images ``x`` at every pair and class (C = 1 but for
        the marginal over C classes): what the loss and the per-timestep statistics combine. Without
        gradients, whole images go to the denoiser ``ROWS_PER_CALL`` rows at a time (the marginal's C× rows
        took 23 GB in one call)."""
        self.space.check_batch(x, copies=self.k * self.condition.copies)
        z = self.space.encode(x).repeat_interleave(self.k, 0)
        step = self.k * max(1, ROWS_PER_CALL // (self.k * self.condition.copies))
        chunks = [z] if torch.is_grad_enabled() else z.split(step)
        return torch.cat([self._space_errors(c) for c in chunks]).view(x.shape[0], self.k, -1)

    def _space_errors(self, z: Tensor) -> Tensor:
        """The weighted squared errors (N·K, C) of rows already in model space (each image's K copies in a
        row), at every class of the marginal over C classes (C = 1 otherwise)."""
        n, c = z.shape[0] // self.k, self.condition.copies
        t = self.loss_timesteps.repeat(n).repeat_interleave(c)
        noise = self.loss_noise.repeat(n, 1, 1, 1).repeat_interleave(c, 0)
        z = z.repeat_interleave(c, 0)
        labels = self.condition.labels(z.shape[0], z.device)
        weights = self.objective.weights(self.denoising["weighting"], t, self.alphas_cumprod)
        return (self.squared_error(z, t, noise, labels) * weights).view(-1, c)

    def image_statistics(self, x: Tensor) -> dict[str, Tensor]:
        """The weighted squared error of each image at each of the K fixed pairs, named ``eps_mse@t``
        (``v_mse@t`` in flow matching): the loss ROSE differentiates, one statistic per timestep."""
        with torch.no_grad():
            errors = self._image_errors(x)
            return self.row_statistics(self.condition.combine(errors.flatten(0, 1)).view(-1, self.k))

    def row_statistics(self, losses: Tensor) -> dict[str, Tensor]:
        """``image_statistics`` from the rows' losses (N, K) that ``row_loss`` gave: ROSE scoring by rows
        has them already, so its ``stats`` feature costs no further denoiser pass."""
        losses = losses.detach()
        return {f"{self.train_objective}@{t}": losses[:, j] for j, t in enumerate(self.row_labels())}

    # -- GenerativeModel ---------------------------------------------------------------------------
    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """Per-image loss at the K fixed pairs: the K noisy copies of each image in one batch of N·K
        rows (image-major), each image's loss the sum of its K rows' weighted squared errors (of ε, or of
        the velocity in flow matching; summed over pixels); ``stochastic``: K fresh random pairs instead."""
        if stochastic:
            return self.train_loss(x, draws=self.k)
        return self.condition.combine(self._image_errors(x).sum(1))

    def nll(self, x: Tensor) -> Tensor:
        """The denoising loss at the K fixed pairs (a bound on −log p(x) up to constants with
        ``weighting="elbo"``); no gradients."""
        with torch.no_grad():
            return self.rose_loss(x)

    def train_loss(self, x: Tensor, draws: int = 1, labels: Tensor | None = None) -> Tensor:
        """The training loss at a random timestep and noise (``draws`` of them per image, summed): DDPM's
        ε-MSE at t uniform over the T steps, or the velocity's MSE at σ of s uniform in [0, 1) (flow
        matching); in train mode with gradients it first moves the EMA weights towards the optimised ones.
        A class-conditional model trains at each image's class ``labels`` (a DiT of one label: label 0;
        without them, at its judged label: ROSE's stochastic loss); a DiT drops them to its null label
        itself, 10 % of the time in train mode."""
        if labels is None and self.condition.classes == 1:
            labels = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        if labels is not None:
            labels = self.condition.checked(labels, x.shape[0], self.ema_steps.device)
            labels = labels.repeat_interleave(draws)
        if self.training and torch.is_grad_enabled():
            self._update_ema()
        n = x.shape[0]
        x0 = self.space.encode(x).repeat_interleave(draws, 0)
        self.space.check_batch(x0)
        t = self.objective.draw_timesteps(n * draws, self.scheduler, x.device)
        return self.squared_error(x0, t, torch.randn_like(x0), labels).view(n, draws).sum(1)

    def held_out_metrics(self, x: Tensor) -> dict[str, float]:
        """Held-out ε-MSE and variational bound in bits/dim; a flow-matching model's held-out velocity MSE,
        a latent model's ε-MSE (its bound would be of latents, not images), a model judged by the marginal
        over its classes its marginal loss (``...diffusion.quality``)."""
        from roseood.models.diffusion import quality

        if self.objective.forward_process and self.autoencoder is None and self.condition.copies == 1:
            return quality.held_out_metrics(self, x)
        return quality.loss_metrics(self, x)

    def generate(self, n: int, seed: int = 0, progress: bool | None = None, **options: int) -> Tensor:
        """``n`` images by DDIM, or by Euler steps of the flow (``steps``, default 50;
        ``roseood.models.diffusion.quality``); a class-conditional model draws at its judged label, or
        from the marginal: a uniform class per image (from ``seed``), then the image."""
        from roseood.models.diffusion.quality import sample_images

        unknown = set(options) - {"steps"}
        if unknown:
            raise RoseError(f"a diffusion model generates with steps only, not {', '.join(sorted(unknown))}")
        labels = None
        if self.condition.label is not None:
            labels = torch.full((n,), self.condition.label)
        elif self.condition.classes is not None:  # the marginal: a class per image, not the noise's stream
            gen = torch.Generator().manual_seed(seed + 1)
            labels = torch.randint(self.condition.classes, (n,), generator=gen)
        steps = options.get("steps", 50)
        return sample_images(self, n=n, steps=steps, seed=seed, progress=progress, labels=labels)


def variety(codec: Autoencoder | None, denoiser: str, objective: str, condition: object) -> str:
    """Which of the kinds the detectors were judged on apart a model is, by the zoo's names: "ldm"
    (latent), "sd" (text-conditioned latent), "dit", "fm" (flow matching), "cddpm" (class labels), else
    "ddpm" (an unconditional pixel-space UNet of DDPM's objective); the first that applies."""
    if codec is not None:
        return "sd" if isinstance(condition, TextCondition) else "ldm"
    if denoiser != "UNet2DModel":
        return "dit"
    if objective == "flow":
        return "fm"
    return "cddpm" if isinstance(condition, Condition) and condition.classes is not None else "ddpm"


def as_diffusion_model(model: Any, what: str) -> DiffusionModel:
    """``model`` if it is a diffusion model, else a one-line ``RoseError`` saying that ``what`` needs one
    (the one place outside the class that asks for its type)."""
    if not isinstance(model, DiffusionModel):
        raise RoseError(f"{what} needs a diffusion model (rose train diffusion, a diffusers folder)")
    return model
