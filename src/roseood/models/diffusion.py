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

import contextlib
import copy
import json
import math
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from roseood.errors import CheckpointError, RoseError, shown
from roseood.models.base import GenerativeModel
from roseood.models.state import check_state, first_line, load_state
from roseood.progress import state
from roseood.validation import check_float, check_int, check_memory, check_seed, module_bytes

WEIGHTINGS = ("simple", "elbo")
LOSS_DEFAULTS: dict[str, Any] = {"k": 8, "t_min": 0.0, "t_max": 1.0, "weighting": "simple", "seed": 0}
ROSEOOD_JSON = "roseood.json"  # our loss settings beside an exported diffusers pipeline
ROSEOOD_KEYS = ("denoising", "ema_decay")  # what roseood.json may hold
WEIGHTS = "diffusion_pytorch_model"  # diffusers' weight file name (.safetensors, .bin, sharded .index.json)
# Sane ranges of a UNet2DModel/DDPMScheduler config: published pixel-space UNet2DModels are at most 1024
# pixels wide (latent ones 128), with a few thousand channels and timesteps; a number outside is a damaged
# or hostile file, refused before anything is built.
MAX_SAMPLE_SIZE = 2048
MAX_CHANNELS = 8192
MAX_BLOCKS = 12
MAX_LAYERS = 64
MAX_TIMESTEPS = 100_000


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


@contextlib.contextmanager
def quiet_diffusers() -> Iterator[None]:
    """diffusers' logger at error level inside the block (its notices, e.g. "install accelerate for faster
    loading", are no news to a roseood user); the caller's level after it."""
    logging = diffusers_module().utils.logging
    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(before)


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


# -- config checks: every number of a diffusers config in a sane range, before anything is built ----------

Check = Callable[[Any, str, type[RoseError]], Any]


def _int(low: int, high: int, optional: bool = False) -> Check:
    def check(value: Any, name: str, error: type[RoseError]) -> Any:
        return None if optional and value is None else check_int(value, name, low=low, high=high, error=error)

    return check


def _float(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Check:
    def check(value: Any, name: str, error: type[RoseError]) -> float:
        x = check_float(value, name, low=low, high=high, low_open=low_open, error=error)
        if high_open and x == high:
            raise error(f"{name} must be below {high:g}, got {x:g}")
        return x

    return check


def _choice(*choices: Any) -> Check:
    def check(value: Any, name: str, error: type[RoseError]) -> Any:
        if not any(type(value) is type(c) and value == c for c in choices):  # True is no 1, 1.0 no "1"
            raise error(f"{name} must be one of {', '.join(map(str, choices))}, got {shown(value)}")
        return value

    return check


def _names(value: Any, name: str, error: type[RoseError]) -> list[str]:
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) for v in value):
        raise error(f"{name} must be a non-empty list of block names, got {shown(value)}")
    if len(value) > MAX_BLOCKS:
        raise error(f"{name} must name at most {MAX_BLOCKS} blocks, got {len(value)}")
    return list(value)


def _widths(value: Any, name: str, error: type[RoseError]) -> list[int]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_BLOCKS:
        raise error(f"{name} must be a list of 1 to {MAX_BLOCKS} channel counts, got {shown(value)}")
    return [check_int(v, f"{name}[{i}]", high=MAX_CHANNELS, error=error) for i, v in enumerate(value)]


def _sample_size(value: Any, name: str, error: type[RoseError]) -> int:
    if isinstance(value, list | tuple):  # (height, width): roseood's models take square images
        if len(value) != 2 or value[0] != value[1]:
            raise error(f"{name} must be one size (square images), got {shown(value)}")
        value = value[0]
    return check_int(value, name, high=MAX_SAMPLE_SIZE, error=error)


FLAG = _choice(True, False)
UNET_FIELDS: dict[str, Check] = {
    "sample_size": _sample_size,
    "in_channels": _int(1, 256),
    "out_channels": _int(1, 256),
    "block_out_channels": _widths,
    "down_block_types": _names,
    "up_block_types": _names,
    "layers_per_block": _int(1, MAX_LAYERS),
    "norm_num_groups": _int(1, MAX_CHANNELS),
    "attn_norm_num_groups": _int(1, MAX_CHANNELS, optional=True),
    "attention_head_dim": _int(1, MAX_CHANNELS, optional=True),
    "time_embedding_dim": _int(1, 8 * MAX_CHANNELS, optional=True),
    "num_train_timesteps": _int(1, MAX_TIMESTEPS, optional=True),
    "time_embedding_type": _choice("positional", "fourier", "learned"),
    "freq_shift": _float(0.0, 1.0),
    "mid_block_scale_factor": _float(1e-3, 1e3),  # divides the mid block: 1e-291 overflowed to NaN
    "downsample_padding": _int(0, 8),
    "dropout": _float(0.0, 1.0, high_open=True),
    "norm_eps": _float(0.0, 1.0, low_open=True),
    "act_fn": _choice("silu", "swish", "mish", "gelu", "relu"),
    "resnet_time_scale_shift": _choice("default", "scale_shift"),
    "downsample_type": _choice("conv", "resnet"),
    "upsample_type": _choice("conv", "resnet"),
    "mid_block_type": _choice("UNetMidBlock2D", None),
    "center_input_sample": FLAG,
    "flip_sin_to_cos": FLAG,
    "add_attention": FLAG,
}
SCHEDULER_FIELDS: dict[str, Check] = {
    "num_train_timesteps": _int(1, MAX_TIMESTEPS),
    "beta_start": _float(0.0, 1.0, low_open=True, high_open=True),
    "beta_end": _float(0.0, 1.0, low_open=True, high_open=True),
    "beta_schedule": _choice("linear", "scaled_linear", "squaredcos_cap_v2", "sigmoid"),
    "variance_type": _choice(
        "fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log", "learned", "learned_range"
    ),
    "prediction_type": _choice("epsilon", "v_prediction", "sample"),
    "timestep_spacing": _choice("linspace", "leading", "trailing"),
    "dynamic_thresholding_ratio": _float(0.0, 1.0, low_open=True),
    "clip_sample_range": _float(0.0, 1e6, low_open=True),
    "sample_max_value": _float(0.0, 1e6, low_open=True),
    "steps_offset": _int(0, MAX_TIMESTEPS),
    "clip_sample": FLAG,
    "thresholding": FLAG,
    "rescale_betas_zero_snr": FLAG,
}


def _fields(config: Any, table: Mapping[str, Check], where: str, error: type[RoseError]) -> dict[str, Any]:
    """``config`` (a JSON object) with every field of ``table`` it holds checked; other fields kept."""
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        raise error(f"{where} must be a JSON object of named settings, found {type(config).__name__}")
    for name, check in table.items():
        if name in config:
            check(config[name], f"{where}: {name}", error)
    return dict(config)


def check_unet_config(
    config: Any, where: str = "unet config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``UNet2DModel`` config as roseood reads it: every number in a sane range, block lists of one
    length, groups dividing the channels, an image size the blocks can halve, no class conditioning."""
    cfg = _fields(config, UNET_FIELDS, where, error)
    if cfg.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise error(f"{where} holds a {shown(cfg['_class_name'])}; roseood reads UNet2DModel folders")
    if cfg.get("num_class_embeds") is not None or cfg.get("class_embed_type") is not None:
        raise error(f"{where}: class-conditional UNets are not supported: roseood needs p(x), not p(x|y)")
    if cfg.get("in_channels", 3) != cfg.get("out_channels", 3):
        raise error(f"{where}: the UNet must predict as many channels as it takes (ε, v or x0 prediction)")
    widths = cfg.get("block_out_channels", (224, 448, 672, 896))
    for key in ("down_block_types", "up_block_types"):
        if key in cfg and len(cfg[key]) != len(widths):
            raise error(f"{where}: {key} names {len(cfg[key])} blocks, block_out_channels {len(widths)}")
    for key in ("norm_num_groups", "attn_norm_num_groups"):
        groups = cfg.get(key, 32 if key == "norm_num_groups" else None)
        bad = [w for w in widths if groups is not None and w % groups]
        if bad:
            raise error(f"{where}: {key} = {groups} does not divide block_out_channels {bad[0]}")
    head = cfg.get("attention_head_dim", 8)
    down = cfg.get("down_block_types", ("DownBlock2D", *["AttnDownBlock2D"] * 3))
    up = cfg.get("up_block_types", (*["AttnUpBlock2D"] * 3, "UpBlock2D"))
    attended = [w for w, b in zip(widths, down, strict=False) if "Attn" in b]
    attended += [w for w, b in zip(widths[::-1], up, strict=False) if "Attn" in b]
    attended += [widths[-1]] if cfg.get("add_attention", True) else []
    if head is not None and attended and head > min(attended):
        raise error(
            f"{where}: attention_head_dim {head} exceeds the {min(attended)} channels it attends over"
        )
    if "sample_size" not in cfg:
        raise error(f"{where}: sample_size is missing (the image size the UNet takes)")
    size = cfg["sample_size"]
    size = size[0] if isinstance(size, list | tuple) else size
    if size % 2 ** (len(widths) - 1):
        raise error(
            f"{where}: sample_size {size} is not divisible by 2**{len(widths) - 1}, as its blocks need"
        )
    return cfg


def check_scheduler_config(
    config: Any, where: str = "scheduler config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``DDPMScheduler`` config: every number in a sane range, β_start ≤ β_end, trained betas in (0, 1),
    one per timestep."""
    cfg = _fields(config, SCHEDULER_FIELDS, where, error)
    if cfg.get("beta_start", 1e-4) > cfg.get("beta_end", 0.02):
        raise error(f"{where}: beta_start {cfg['beta_start']} exceeds beta_end {cfg.get('beta_end', 0.02)}")
    betas = cfg.get("trained_betas")
    if betas is not None:
        steps = cfg.get("num_train_timesteps", 1000)
        if not isinstance(betas, list) or len(betas) != steps:
            raise error(f"{where}: trained_betas must be a list of num_train_timesteps = {steps} numbers")
        for i, b in enumerate(betas):
            _float(0.0, 1.0, low_open=True, high_open=True)(b, f"{where}: trained_betas[{i}]", error)
    return cfg


def check_denoising(
    options: Any,
    where: str = "denoising",
    error: type[RoseError] = RoseError,
    base: Mapping[str, Any] = LOSS_DEFAULTS,
) -> dict[str, Any]:
    """The per-image loss's settings (``base`` updated by ``options``): known names, k ≥ 1, 0 ≤ t_min <
    t_max ≤ 1, a known weighting, a seed numpy and torch accept."""
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise error(f"{where} must be a mapping of denoising options, found {type(options).__name__}")
    unknown = sorted(set(options) - set(LOSS_DEFAULTS))
    if unknown:
        raise error(f"{where} has unknown options {unknown}; known: {sorted(LOSS_DEFAULTS)}")
    opts = dict(base) | dict(options)
    out = {
        "k": check_int(opts["k"], f"{where}.k", error=error),
        "t_min": check_float(opts["t_min"], f"{where}.t_min", low=0.0, high=1.0, error=error),
        "t_max": check_float(opts["t_max"], f"{where}.t_max", low=0.0, high=1.0, error=error),
        "weighting": _choice(*WEIGHTINGS)(opts["weighting"], f"{where}.weighting", error),
        "seed": check_seed(opts["seed"], f"{where}.seed", error=error),
    }
    if out["t_min"] >= out["t_max"]:
        raise error(f"{where} needs t_min < t_max, got {out['t_min']:g} and {out['t_max']:g}")
    return out


def check_ema_decay(value: Any, name: str = "ema_decay", error: type[RoseError] = RoseError) -> float:
    """An EMA decay in [0, 1)."""
    return _float(0.0, 1.0, high_open=True)(value, name, error)


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
    train_objective = "eps_mse"  # train_loss is DDPM's ε-MSE, not a likelihood
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
            if isinstance(widths, int) or not widths:
                raise RoseError(f"diffusion widths must be a list of channel counts, got {widths}")
            widths = [check_int(w, "diffusion width", high=MAX_CHANNELS) for w in widths]
            unet = unet_config(in_channels, image_size, tuple(widths), layers_per_block, attention)
        unet = check_unet_config(unet)
        scheduler = check_scheduler_config(
            scheduler if scheduler is not None else {"num_train_timesteps": train_timesteps}
        )
        self.ema_decay = check_ema_decay(ema_decay)
        denoising = check_denoising(denoising if denoising is not None else {})
        with quiet_diffusers():
            net = self._build_unet(d, unet, denoising["k"])
            try:
                sched = d.DDPMScheduler.from_config(scheduler)
            except (TypeError, ValueError, KeyError, AttributeError, RuntimeError) as exc:
                raise RoseError(f"cannot build a DDPMScheduler from its config ({first_line(exc)})") from None
        alphas = sched.alphas_cumprod.float()
        if len(alphas) != sched.config.num_train_timesteps or not bool(((alphas >= 0) & (alphas <= 1)).all()):
            raise RoseError("the scheduler config gives no valid noise schedule (ᾱ_t outside [0, 1])")
        size = net.config.sample_size
        super().__init__(net.config.in_channels, size if isinstance(size, int) else size[0])
        self.unet = net  # the EMA weights: what evaluation, ROSE and export use
        self.online = copy.deepcopy(net)  # the optimised weights
        self.online.requires_grad_(True)
        self.scheduler = sched
        self.register_buffer("ema_steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("alphas_cumprod", alphas.clone())
        self.set_denoising(**denoising)

    @staticmethod
    def meta_unet(config: dict[str, Any]) -> Any:
        """The UNet of a checked ``config`` built and run once on torch's meta device (no memory): finds a
        config the blocks cannot be built or run from (one-line ``RoseError``), and gives the weights'
        names and shapes before any is allocated."""
        d = diffusers_module()
        size = config["sample_size"]
        size = size[0] if isinstance(size, list | tuple) else size
        channels = config.get("in_channels", 3)
        try:
            with quiet_diffusers(), torch.device("meta"), torch.no_grad():
                net = d.UNet2DModel.from_config(config)
                net(torch.zeros(1, channels, size, size), torch.zeros(1, dtype=torch.long))
        except (
            TypeError,
            ValueError,
            KeyError,
            AttributeError,
            RuntimeError,
            IndexError,
            ArithmeticError,
        ) as exc:
            raise RoseError(f"cannot build a UNet2DModel from its config ({first_line(exc)})") from None
        return net

    @staticmethod
    def _build_unet(d: Any, config: dict[str, Any], k: int) -> Any:
        """The UNet of a checked ``config``, once ``meta_unet`` has built it without memory and its two
        copies (EMA and optimised) and the K-pair noise buffer are known to fit in memory."""
        meta = DiffusionModel.meta_unet(config)
        weights = module_bytes(lambda: meta)
        size, channels = meta.config.sample_size, meta.config.in_channels
        size = size[0] if isinstance(size, list | tuple) else size
        noise = k * channels * size * size * 4
        check_memory(
            2 * weights + noise,
            f"a UNet2DModel of {weights // 4:,} weights (EMA and optimised copies) with denoising k = {k} "
            f"noise images of {channels}×{size}×{size}",
            hint="lower denoising k" if noise > 2 * weights else "the model is too large for this machine",
        )
        return d.UNet2DModel.from_config(config)

    # -- the fixed (timestep, noise) pairs ---------------------------------------------------------
    def set_denoising(self, **options: Any) -> None:
        """Set the per-image loss's K (timestep, noise) pairs (see the class doc); unknown keys are an
        error. Changes the model's fingerprint: detectors fitted before must be refitted."""
        opts = check_denoising(options, base=getattr(self, "denoising", LOSS_DEFAULTS))
        k, lo, hi = opts["k"], opts["t_min"], opts["t_max"]
        image = math.prod(self.input_shape)
        check_memory(
            k * (image * 4 + 16),
            f"denoising k = {k} (a buffer of k noise images of shape {self.input_shape})",
            hint="lower k",
        )
        self.denoising = opts
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

    def row_labels(self) -> list[int]:
        """The timestep of each of an image's K rows."""
        return [int(t) for t in self.loss_timesteps]

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
        each row where ``t`` is fractional (default: the schedule's ᾱ_t). Refuses in one line a batch whose
        first block's activations alone (two of them, float32) cannot fit in memory."""
        net = net if net is not None else self.net()
        first = net.config.block_out_channels[0]
        check_memory(
            2 * xt.shape[0] * first * xt.shape[-2] * xt.shape[-1] * 4,
            f"a UNet batch of {xt.shape[0]} rows (images × k noisy copies) of {tuple(xt.shape[1:])}",
            device=xt.device,
            hint="lower --batch-size or denoising k",
        )
        out = net(xt, t).sample
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
        return self.row_loss(x.repeat_interleave(self.k, 0)).view(x.shape[0], self.k).sum(1)

    def row_loss(self, rows: Tensor) -> Tensor:
        """The weighted ε-MSE of each row (N·K,) of ``rows``: each image K times in a row (image-major),
        row j noised at pair j mod K. What ROSE with ``rows="each"`` differentiates: one gradient per
        (image, timestep) row instead of their sum."""
        k = self.k
        if rows.shape[0] % k:
            raise RoseError(f"row_loss takes each image {k} times in a row, got {rows.shape[0]} rows")
        n = rows.shape[0] // k
        t = self.loss_timesteps.repeat(n)
        noise = self.loss_noise.repeat(n, 1, 1, 1)
        err = (self.eps(self.noised(self.to_model_space(rows), t, noise), t) - noise).pow(2).flatten(1).sum(1)
        return err * self._weights(t)

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

    def held_out_metrics(self, x: Tensor) -> dict[str, float]:
        """Held-out ε-MSE and variational bound in bits/dim (``roseood.models.diffusion_quality``)."""
        from roseood.models.diffusion_quality import held_out_metrics

        return held_out_metrics(self, x)

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


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object read from ``path``; unreadable, invalid JSON or another JSON value is a one-line
    ``CheckpointError`` naming the file."""
    try:
        obj = json.loads(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({first_line(exc)})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: must hold a JSON object, found a JSON {type(obj).__name__}")
    return obj


def _weight_file(path: Path) -> dict[str, Tensor]:
    """One weight file of a diffusers folder: safetensors, or a torch ``.bin`` (weights only: no code)."""
    from roseood.serialization import read_torch_file

    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state: Any = load_file(path)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
    else:
        state = read_torch_file(path)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()
    ):
        raise CheckpointError(f"{path}: does not hold a mapping of tensor names to tensors")
    return state


def read_unet_weights(folder: Path) -> tuple[dict[str, Tensor], Path]:
    """The UNet's state dict from a diffusers model folder (``diffusion_pytorch_model.safetensors``, ``.bin``,
    or their sharded ``.index.json``), read without running code; also the file it came from."""
    for ext in (".safetensors", ".bin"):
        single, index = folder / f"{WEIGHTS}{ext}", folder / f"{WEIGHTS}{ext}.index.json"
        if single.is_file():
            return _weight_file(single), single
        if index.is_file():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise CheckpointError(f"{index}: field 'weight_map' must map tensor names to shard files")
            state: dict[str, Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                if Path(shard).name != shard or not shard.startswith(WEIGHTS):
                    raise CheckpointError(f"{index}: {shown(shard)} is not a shard file of this folder")
                state |= _weight_file(folder / shard)
            return state, index
    raise CheckpointError(f"{folder}: no {WEIGHTS}.safetensors or {WEIGHTS}.bin (the UNet's weights)")


def read_roseood_json(path: Path) -> dict[str, Any]:
    """Our ``roseood.json``: an object with ``denoising`` (the loss pairs' settings) and ``ema_decay``, each
    checked like the model's arguments; anything else is a one-line ``CheckpointError`` naming the file."""
    obj = read_json(path)
    unknown = sorted(set(obj) - set(ROSEOOD_KEYS))
    if unknown:
        raise CheckpointError(f"{path}: unknown field {shown(unknown[0])} (known: {', '.join(ROSEOOD_KEYS)})")
    out: dict[str, Any] = {}
    if "denoising" in obj:
        out["denoising"] = check_denoising(obj["denoising"], f"{path}: denoising", CheckpointError)
    if "ema_decay" in obj:
        out["ema_decay"] = check_ema_decay(obj["ema_decay"], f"{path}: ema_decay", CheckpointError)
    return out


def load_diffusers(folder: str | Path) -> DiffusionModel:
    """A diffusion model from a diffusers folder: a pipeline (``model_index.json``, ``unet/``,
    ``scheduler/``), or a UNet2DModel's own folder (``config.json`` + weights; the scheduler then from a
    sibling ``scheduler/`` folder, else DDPM's defaults, said in one line). Our ``roseood.json`` restores
    the loss pairs. Every file is read by roseood itself and checked before anything is built (configs:
    ``check_unet_config``, ``check_scheduler_config``; weights: safetensors or weights-only torch files,
    loaded strictly); nothing is fetched from the network and no code in the folder is run."""
    diffusers_module()  # says which extra to install before any file is read
    folder = Path(folder)
    unet_dir = folder / "unet" if (folder / "unet" / "config.json").is_file() else folder
    config_file = unet_dir / "config.json"
    unet = check_unet_config(read_json(config_file), str(config_file), CheckpointError)
    sched_dir = next(
        (
            s
            for s in (folder / "scheduler", unet_dir.parent / "scheduler")
            if (s / "scheduler_config.json").is_file()
        ),
        None,
    )
    if sched_dir is None:
        state(
            f"{folder}: no scheduler/scheduler_config.json; using DDPMScheduler's defaults "
            "(1000 timesteps, linear betas 0.0001 to 0.02, ε prediction)"
        )
        scheduler: dict[str, Any] = {}
    else:
        sched_file = sched_dir / "scheduler_config.json"
        scheduler = check_scheduler_config(read_json(sched_file), str(sched_file), CheckpointError)
    ours = next((f / ROSEOOD_JSON for f in (folder, unet_dir.parent) if (f / ROSEOOD_JSON).is_file()), None)
    extra = read_roseood_json(ours) if ours is not None else {}
    weights, weights_file = read_unet_weights(unet_dir)
    plain = {k: v for k, v in unet.items() if not k.startswith("_")}
    sched = {k: v for k, v in scheduler.items() if not k.startswith("_")}
    what = f"the UNet2DModel of {config_file}"
    try:
        check_state(DiffusionModel.meta_unet(plain), weights, weights_file, what)  # before any allocation
        model = DiffusionModel(unet=plain, scheduler=sched, **extra)
    except CheckpointError:
        raise
    except RoseError as exc:
        raise CheckpointError(f"{folder}: {exc}") from None
    load_state(model.unet, weights, weights_file, what)
    model.online.load_state_dict(model.unet.state_dict())
    return model.eval()
