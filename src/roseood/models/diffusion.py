"""Diffusion models: a diffusers ``UNet2DModel`` + ``DDPMScheduler`` as a roseood generative model.

Training minimises the DDPM ε-prediction MSE at a random timestep (Ho et al. 2020), with an exponential
moving average (EMA) of the weights kept for evaluation: in eval mode every loss uses the EMA network
``unet`` (the one exported, and the one ROSE's layer names point to), in train mode the optimised copy
``online``. The per-image loss ROSE differentiates (``rose_loss``, also ``nll``) is the denoising loss
at K fixed (timestep, noise) pairs, drawn once from a seed and shared by every image, so that it is a
deterministic function of the image: the K noisy copies of N images run as one batch of N·K rows and
each image's loss is the sum over its K rows (one UNet call; ROSE folds the copies into each sample's
gradient exactly). The pairs are buffers of the model: detectors record them through the model's
fingerprint, so a detector fitted at one K refuses a model set to another.

diffusers is an optional dependency (``pip install roseood[diffusion]``); importing roseood never needs it.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from roseood.errors import CheckpointError, RoseError
from roseood.models.base import GenerativeModel

WEIGHTINGS = ("simple", "elbo")
LOSS_DEFAULTS: dict[str, Any] = {"k": 8, "t_min": 0.0, "t_max": 1.0, "weighting": "simple", "seed": 0}
ROSEOOD_JSON = "roseood.json"  # our loss settings beside an exported diffusers pipeline


def diffusers_module() -> Any:
    """The ``diffusers`` package, or a one-line ``RoseError`` naming the extra that installs it."""
    try:
        import diffusers
    except ImportError:
        raise RoseError("diffusion models need diffusers: pip install roseood[diffusion]") from None
    try:  # a torchvision built for another torch breaks diffusers' optional import of it
        import torchvision  # noqa: F401
    except Exception:  # any failure: diffusers must not try it
        import diffusers.utils.import_utils as import_utils

        import_utils._torchvision_available = False
    return diffusers


def unet_config(
    in_channels: int,
    image_size: int,
    widths: tuple[int, ...],
    layers_per_block: int,
    attention: bool,
) -> dict[str, Any]:
    """A ``UNet2DModel`` config: one down/up block per width (resolution halves between them), plain
    ResNet blocks, and (``attention``) one self-attention block in the middle, at the lowest resolution."""
    groups = math.gcd(*widths, 8)
    return {
        "sample_size": image_size,
        "in_channels": in_channels,
        "out_channels": in_channels,
        "block_out_channels": list(widths),
        "layers_per_block": layers_per_block,
        "down_block_types": ["DownBlock2D"] * len(widths),
        "up_block_types": ["UpBlock2D"] * len(widths),
        "add_attention": attention,
        "norm_num_groups": groups,
        "attention_head_dim": widths[-1],
    }


class DiffusionModel(GenerativeModel):
    """A DDPM on images in [0, 1] (seen by the UNet in [-1, 1]).

    Architecture: ``widths`` (block_out_channels), ``layers_per_block``, ``attention`` (a mid-block
    self-attention), ``image_size``, ``in_channels``, ``train_timesteps``; or a full diffusers
    ``unet`` config (and ``scheduler`` config) for a model brought from a diffusers folder.
    ``denoising``: the K (timestep, noise) pairs of the per-image loss — ``k``, the timestep range
    ``t_min``..``t_max`` (fractions of the train timesteps; the K timesteps are the midpoints of K
    equal strata of it), ``weighting`` ("simple": ε-MSE; "elbo": each term weighted as in the DDPM
    variational bound), ``seed`` (of the noise).
    """

    kind = "diffusion"
    alphas_cumprod: Tensor
    ema_steps: Tensor
    loss_timesteps: Tensor
    loss_noise: Tensor
    unet: Any
    online: Any

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
    ) -> None:
        d = diffusers_module()
        if unet is None:
            if not widths or min(widths) < 1:
                raise RoseError(f"diffusion widths must be positive, got {widths}")
            unet = unet_config(in_channels, image_size, tuple(widths), layers_per_block, attention)
        try:
            net = d.UNet2DModel.from_config(unet)
            sched = d.DDPMScheduler.from_config(scheduler or {"num_train_timesteps": train_timesteps})
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise RoseError(f"cannot build the diffusers UNet2DModel/DDPMScheduler: {exc}") from None
        self._check_unet(net)
        size = net.config.sample_size
        super().__init__(net.config.in_channels, size if isinstance(size, int) else size[0])
        self.unet = net  # the EMA weights: what evaluation, ROSE and export use
        self.online = copy.deepcopy(net)  # the optimised weights
        self.online.requires_grad_(True)
        self.scheduler = sched
        self.ema_decay = float(ema_decay)
        if not 0.0 <= self.ema_decay < 1.0:
            raise RoseError(f"ema_decay must lie in [0, 1), got {ema_decay}")
        self.register_buffer("ema_steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("alphas_cumprod", sched.alphas_cumprod.float().clone())
        self.set_denoising(**(denoising or {}))

    @staticmethod
    def _check_unet(net: Any) -> None:
        cfg = net.config
        if cfg.in_channels != cfg.out_channels:
            raise RoseError("the UNet must predict as many channels as it takes (ε, v or x0 prediction)")
        if getattr(cfg, "num_class_embeds", None) or getattr(cfg, "class_embed_type", None):
            raise RoseError("class-conditional UNets are not supported: roseood needs p(x), not p(x|y)")

    # -- the fixed (timestep, noise) pairs ---------------------------------------------------------
    def set_denoising(self, **options: Any) -> None:
        """Set the per-image loss's K (timestep, noise) pairs (see the class doc); unknown keys are an
        error. Changes the model's fingerprint: detectors fitted before must be refitted."""
        unknown = sorted(set(options) - set(LOSS_DEFAULTS))
        if unknown:
            raise RoseError(f"unknown denoising options {unknown}; known: {sorted(LOSS_DEFAULTS)}")
        opts = getattr(self, "denoising", LOSS_DEFAULTS) | options
        k, lo, hi = int(opts["k"]), float(opts["t_min"]), float(opts["t_max"])
        if k < 1 or not 0.0 <= lo < hi <= 1.0:
            raise RoseError(f"denoising needs k ≥ 1 and 0 ≤ t_min < t_max ≤ 1, got {opts}")
        if opts["weighting"] not in WEIGHTINGS:
            raise RoseError(f"unknown weighting {opts['weighting']!r}; choose from {', '.join(WEIGHTINGS)}")
        self.denoising = {
            "k": k,
            "t_min": lo,
            "t_max": hi,
            "weighting": opts["weighting"],
            "seed": opts["seed"],
        }
        total = self.train_timesteps
        strata = lo + (hi - lo) * (torch.arange(k, dtype=torch.float64) + 0.5) / k
        t = (strata * total).floor().clamp(0, total - 1).long()
        gen = torch.Generator().manual_seed(int(opts["seed"]))
        noise = torch.randn(k, *self.input_shape, generator=gen)
        device = self.alphas_cumprod.device
        self.register_buffer("loss_timesteps", t.to(device))
        self.register_buffer("loss_noise", noise.to(device))

    @property
    def train_timesteps(self) -> int:
        return int(self.scheduler.config.num_train_timesteps)

    @property
    def k(self) -> int:
        """Number of (timestep, noise) pairs of the per-image loss (UNet evaluations per image)."""
        return int(self.loss_timesteps.shape[0])

    @property
    def rows_per_input(self) -> int:
        """UNet batch rows per image in the per-image loss (K): ROSE sizes its batches by rows."""
        return self.k

    def config(self) -> dict[str, Any]:
        return {
            "unet": _plain(self.unet.config),
            "scheduler": _plain(self.scheduler.config),
            "ema_decay": self.ema_decay,
            "denoising": dict(self.denoising),
        }

    # -- the network as an ε-predictor -----------------------------------------------------------
    def net(self) -> Any:
        """The UNet in use: the optimised one while training, the EMA one otherwise."""
        return self.online if self.training else self.unet

    def to_model_space(self, x: Tensor) -> Tensor:
        """Images in [0, 1] → the UNet's [-1, 1]."""
        return x * 2.0 - 1.0

    def eps(self, xt: Tensor, t: Tensor, net: Any = None, alpha_bar: Tensor | None = None) -> Tensor:
        """The predicted noise ε̂(x_t, t), whatever the UNet predicts (ε, v or x0); ``alpha_bar``: ᾱ of
        each row where ``t`` is fractional (default: the schedule's ᾱ_t)."""
        out = (net if net is not None else self.net())(xt, t).sample
        kind = self.scheduler.config.prediction_type
        if kind == "epsilon":
            return out
        a = (self.alphas_cumprod[t] if alpha_bar is None else alpha_bar).view(-1, 1, 1, 1)
        if kind == "v_prediction":
            return a.sqrt() * out + (1 - a).sqrt() * xt
        if kind == "sample":
            return (xt - a.sqrt() * out) / (1 - a).sqrt()
        raise RoseError(f"unsupported prediction_type {kind!r}")

    def noised(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """x_t = √ᾱ_t x0 + √(1 − ᾱ_t) ε."""
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def _weights(self, t: Tensor) -> Tensor:
        if self.denoising["weighting"] == "simple":
            return torch.ones_like(t, dtype=torch.float32)
        # DDPM's bound: L_t = β_t² / (2 σ_t² α_t (1 − ᾱ_t)) ‖ε − ε̂‖², σ_t² = β_t (1 − ᾱ_{t-1}) / (1 − ᾱ_t)
        a = self.alphas_cumprod
        prev = torch.cat([a.new_ones(1), a[:-1]])
        beta = 1 - a / prev
        sigma2 = (beta * (1 - prev) / (1 - a)).clamp_min(1e-20)
        w = beta**2 / (2 * sigma2 * (1 - beta) * (1 - a))
        w[0] = 1.0 / (2 * (1 - beta[0]))  # t = 0: the decoder term, an ε-MSE at σ_1
        return w[t].float()

    def denoising_loss(self, x: Tensor) -> Tensor:
        """Per-image loss at the K fixed pairs: the K noisy copies of each image in one batch of N·K
        rows (image-major), each image's loss the sum of its K rows' weighted ε-MSE (summed over pixels)."""
        n, k = x.shape[0], self.k
        x0 = self.to_model_space(x).repeat_interleave(k, 0)
        t = self.loss_timesteps.repeat(n)
        noise = self.loss_noise.repeat(n, 1, 1, 1)
        err = (self.eps(self.noised(x0, t, noise), t) - noise).pow(2).flatten(1).sum(1)
        return (err * self._weights(t)).view(n, k).sum(1)

    # -- GenerativeModel ---------------------------------------------------------------------------
    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """The denoising loss at the fixed pairs; ``stochastic``: K fresh random pairs instead."""
        return self.train_loss(x, draws=self.k) if stochastic else self.denoising_loss(x)

    def nll(self, x: Tensor) -> Tensor:
        """The denoising loss at the K fixed pairs (a bound on −log p(x) up to constants with
        ``weighting="elbo"``); no gradients."""
        with torch.no_grad():
            return self.denoising_loss(x)

    def train_loss(self, x: Tensor, draws: int = 1) -> Tensor:
        """DDPM's ε-MSE at a random timestep and noise (``draws`` of them per image, summed); in train
        mode with gradients it first moves the EMA weights towards the optimised ones."""
        if self.training and torch.is_grad_enabled():
            self._update_ema()
        n = x.shape[0]
        x0 = self.to_model_space(x).repeat_interleave(draws, 0)
        t = torch.randint(0, self.train_timesteps, (n * draws,), device=x.device)
        noise = torch.randn_like(x0)
        err = (self.eps(self.noised(x0, t, noise), t) - noise).pow(2).flatten(1).sum(1)
        return err.view(n, draws).sum(1)

    @torch.no_grad()
    def _update_ema(self) -> None:
        """EMA with diffusers' warm-up: decay min(ema_decay, (1 + s) / (10 + s)) at step s."""
        s = int(self.ema_steps)
        decay = min(self.ema_decay, (1 + s) / (10 + s))
        for e, p in zip(self.unet.parameters(), self.online.parameters(), strict=True):
            e.lerp_(p, 1 - decay)
        self.ema_steps += 1

    def layer_sets(self) -> dict[str, list[str]]:
        """Layers of the EMA UNet: ``all`` (every convolution, linear map and norm affine), ``weights``
        (convolutions and linear maps), ``down``/``mid``/``up`` (one part of the UNet, all layers)."""
        names = [
            f"unet.{n}"
            for n, m in self.unet.named_modules()
            if n and any(p.requires_grad for p in m.parameters(recurse=False))
        ]
        weights = [n for n in names if isinstance(self.get_submodule(n), torch.nn.Conv2d | torch.nn.Linear)]
        sets = {"all": names, "weights": weights}
        for part in ("down", "mid", "up"):
            sets[part] = [n for n in names if n.startswith(f"unet.{part}_block")]
        return sets


def as_diffusion_model(model: Any, what: str) -> DiffusionModel:
    """``model`` if it is a diffusion model, else a one-line ``RoseError`` saying that ``what`` needs one
    (the one place outside the class that asks for its type)."""
    if not isinstance(model, DiffusionModel):
        raise RoseError(f"{what} needs a diffusion model (rose train diffusion, a diffusers folder)")
    return model


def _plain(config: Any) -> dict[str, Any]:
    """A diffusers config as JSON-able plain values (lists, not tuples), without private keys."""
    return json.loads(json.dumps({k: v for k, v in dict(config).items() if not k.startswith("_")}))


# -- diffusers folders -------------------------------------------------------------------------------


def export_diffusers(model: DiffusionModel, folder: str | Path) -> Path:
    """Write ``model`` as a diffusers ``DDPMPipeline`` folder (``unet/`` with the EMA weights,
    ``scheduler/``, ``model_index.json``) plus ``roseood.json`` with its denoising-loss pairs' settings."""
    if not isinstance(model, DiffusionModel):
        raise RoseError(f"only diffusion models export to diffusers, not {type(model).__name__}")
    d = diffusers_module()
    folder = Path(folder)
    d.DDPMPipeline(unet=model.unet, scheduler=model.scheduler).save_pretrained(folder)
    (folder / ROSEOOD_JSON).write_text(
        json.dumps({"denoising": model.denoising, "ema_decay": model.ema_decay})
    )
    return folder


def is_diffusers_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder saved by diffusers (a pipeline, or a UNet's own folder)."""
    p = Path(path)
    return p.is_dir() and any(
        (p / f).is_file() for f in ("model_index.json", "unet/config.json", "config.json")
    )


def load_diffusers(folder: str | Path) -> DiffusionModel:
    """A diffusion model from a diffusers folder: a pipeline (``model_index.json``, ``unet/``,
    ``scheduler/``), or a UNet2DModel's own folder (``config.json`` + weights; the scheduler then from a
    sibling ``scheduler/`` folder, else DDPM's defaults). Our ``roseood.json`` restores the loss pairs."""
    d = diffusers_module()
    folder = Path(folder)
    unet_dir = folder / "unet" if (folder / "unet" / "config.json").is_file() else folder
    sched_dir = next(
        (
            s
            for s in (folder / "scheduler", unet_dir.parent / "scheduler")
            if (s / "scheduler_config.json").is_file()
        ),
        None,
    )
    try:
        unet = d.UNet2DModel.from_pretrained(unet_dir)
        scheduler = d.DDPMScheduler.from_pretrained(sched_dir) if sched_dir is not None else d.DDPMScheduler()
    except (OSError, ValueError, TypeError, KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{folder}: not a diffusers UNet2DModel folder ({first})") from None
    ours = next((f / ROSEOOD_JSON for f in (folder, unet_dir.parent) if (f / ROSEOOD_JSON).is_file()), None)
    extra = json.loads(ours.read_text()) if ours is not None else {}
    model = DiffusionModel(unet=_plain(unet.config), scheduler=_plain(scheduler.config), **extra)
    model.unet.load_state_dict(unet.state_dict())
    model.online.load_state_dict(unet.state_dict())
    return model.eval()
