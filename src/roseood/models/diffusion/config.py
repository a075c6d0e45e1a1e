"""The settings of a diffusion model, checked before anything is built: a ``UNet2DModel`` config (every
number of a diffusers config in a sane range, ``bounds``), a scheduler config (the rest by its objective,
``objectives``), the per-image loss's K (timestep, noise) pairs (``denoising``) and the EMA decay. A
checked config keeps the checked values (an image size given as ``[S, S]`` is ``S`` from then on)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from roseood.errors import RoseError, shown
from roseood.models.diffusion.bounds import (
    FLAG,
    MAX_CHANNELS,
    MAX_CLASSES,
    MAX_LAYERS,
    MAX_SAMPLE_SIZE,
    MAX_TIMESTEPS,
    Check,
    block_names,
    check_fields,
    float_in,
    int_in,
    sample_size,
    width_list,
)
from roseood.models.diffusion.objectives import objective_of
from roseood.settings import DIFFUSION_LOSS_DEFAULTS as LOSS_DEFAULTS
from roseood.settings import LOSS_SETTINGS
from roseood.validation import check_int, one_of


def unet_config(
    in_channels: int,
    image_size: int,
    widths: tuple[int, ...],
    layers_per_block: int,
    attention: bool,
    classes: int | None = None,
) -> dict[str, Any]:
    """A ``UNet2DModel`` config: one down/up block per width (resolution halves between them), plain
    ResNet blocks, and (``attention``) one self-attention block in the middle, at the lowest resolution;
    ``classes``: a class-conditional UNet of that many labels (an embedding added to the timestep's)."""
    groups = math.gcd(*widths, 8)
    labels = {} if classes is None else {"num_class_embeds": check_int(classes, "classes", high=MAX_CLASSES)}
    return labels | {
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


def dit_config(
    in_channels: int, image_size: int, layers: int, heads: int, head_dim: int, patch: int, classes: int
) -> dict[str, Any]:
    """A ``DiTTransformer2DModel`` config: ``layers`` adaLN-zero blocks of ``heads`` × ``head_dim``
    attention on ``patch``² patches, embedding ``classes`` labels and diffusers' null label (its label
    dropout, 10 % in training, is what lets a DiT judge p(x) at the null label)."""
    return {
        "_class_name": "DiTTransformer2DModel",
        "sample_size": image_size,
        "in_channels": in_channels,
        "out_channels": in_channels,
        "num_layers": check_int(layers, "DiT layers", high=4 * MAX_LAYERS),
        "num_attention_heads": check_int(heads, "DiT heads", high=1024),
        "attention_head_dim": check_int(head_dim, "DiT head width", high=MAX_CHANNELS),
        "patch_size": check_int(patch, "DiT patch size", high=64),
        "num_embeds_ada_norm": check_int(classes, "classes", high=MAX_CLASSES),
    }


# -- config checks: every number of a diffusers config in a sane range, before anything is built ----------

UNET_FIELDS: dict[str, Check] = {
    "sample_size": sample_size,
    "in_channels": int_in(1, 256),
    "out_channels": int_in(1, 256),
    "block_out_channels": width_list,
    "down_block_types": block_names,
    "up_block_types": block_names,
    "layers_per_block": int_in(1, MAX_LAYERS),
    "norm_num_groups": int_in(1, MAX_CHANNELS),
    "attn_norm_num_groups": int_in(1, MAX_CHANNELS, optional=True),
    "attention_head_dim": int_in(1, MAX_CHANNELS, optional=True),
    "time_embedding_dim": int_in(1, 8 * MAX_CHANNELS, optional=True),
    "num_train_timesteps": int_in(1, MAX_TIMESTEPS, optional=True),
    "num_class_embeds": int_in(1, MAX_CLASSES, optional=True),
    "time_embedding_type": one_of("positional", "fourier", "learned"),
    "freq_shift": float_in(0.0, 1.0),
    "mid_block_scale_factor": float_in(1e-3, 1e3),  # divides the mid block: 1e-291 overflowed to NaN
    "downsample_padding": int_in(0, 8),
    "dropout": float_in(0.0, 1.0, high_open=True),
    "norm_eps": float_in(0.0, 1.0, low_open=True),
    "act_fn": one_of("silu", "swish", "mish", "gelu", "relu"),
    "resnet_time_scale_shift": one_of("default", "scale_shift"),
    "downsample_type": one_of("conv", "resnet"),
    "upsample_type": one_of("conv", "resnet"),
    "mid_block_type": one_of("UNetMidBlock2D", None),
    "center_input_sample": FLAG,
    "flip_sin_to_cos": FLAG,
    "add_attention": FLAG,
}
SCHEDULER_FIELDS: dict[str, Check] = {
    "num_train_timesteps": int_in(1, MAX_TIMESTEPS),
    "beta_start": float_in(0.0, 1.0, low_open=True, high_open=True),
    "beta_end": float_in(0.0, 1.0, low_open=True, high_open=True),
    "beta_schedule": one_of("linear", "scaled_linear", "squaredcos_cap_v2", "sigmoid"),
    "variance_type": one_of(
        "fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log", "learned", "learned_range"
    ),
    "prediction_type": one_of("epsilon", "v_prediction", "sample"),
    "timestep_spacing": one_of("linspace", "leading", "trailing"),
    "dynamic_thresholding_ratio": float_in(0.0, 1.0, low_open=True),
    "clip_sample_range": float_in(0.0, 1e6, low_open=True),
    "sample_max_value": float_in(0.0, 1e6, low_open=True),
    "steps_offset": int_in(0, MAX_TIMESTEPS),
    "clip_sample": FLAG,
    "thresholding": FLAG,
    "rescale_betas_zero_snr": FLAG,
    # FlowMatchEulerDiscreteScheduler's: σ = shift·s / (1 + (shift − 1)·s) of s = t / T
    "shift": float_in(0.0, 1e3, low_open=True),
    "use_dynamic_shifting": FLAG,
    "invert_sigmas": FLAG,
    "use_karras_sigmas": FLAG,
    "use_exponential_sigmas": FLAG,
    "use_beta_sigmas": FLAG,
    "stochastic_sampling": FLAG,
}


def check_unet_config(
    config: Any, where: str = "unet config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``UNet2DModel`` config as roseood reads it: every number in a sane range, block lists of one
    length, groups dividing the channels, an image size the blocks can halve, no class conditioning."""
    cfg = check_fields(config, UNET_FIELDS, where, error)
    if cfg.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise error(f"{where} holds a {shown(cfg['_class_name'])}; roseood reads UNet2DModel folders")
    if cfg.get("class_embed_type") is not None:
        raise error(
            f"{where}: class_embed_type {shown(cfg['class_embed_type'])} conditions on a vector; roseood "
            "reads unconditional UNets and UNets of class labels (num_class_embeds)"
        )
    widths = check_blocks(cfg, where, error, (224, 448, 672, 896))
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
    check_size(cfg, widths, where, error)
    return cfg


def check_blocks(
    cfg: dict[str, Any], where: str, error: type[RoseError], default: tuple[int, ...]
) -> list[int]:
    """A UNet's channel widths (``default`` where unset), once its block lists are known to have one entry
    per width, its group norms to divide them and its output to have the input's channels."""
    if cfg.get("in_channels", 3) != cfg.get("out_channels", 3):
        raise error(f"{where}: the UNet must predict as many channels as it takes (ε, v or x0 prediction)")
    widths = list(cfg.get("block_out_channels", default))
    for key in ("down_block_types", "up_block_types"):
        if key in cfg and len(cfg[key]) != len(widths):
            raise error(f"{where}: {key} names {len(cfg[key])} blocks, block_out_channels {len(widths)}")
    for key in ("norm_num_groups", "attn_norm_num_groups"):
        groups = cfg.get(key, 32 if key == "norm_num_groups" else None)
        bad = [w for w in widths if groups is not None and w % groups]
        if bad:
            raise error(f"{where}: {key} = {groups} does not divide block_out_channels {bad[0]}")
    return widths


def check_size(cfg: dict[str, Any], widths: list[int], where: str, error: type[RoseError]) -> None:
    """A UNet's sample_size is set and its blocks can halve it."""
    if "sample_size" not in cfg:
        raise error(f"{where}: sample_size is missing (the image size the UNet takes)")
    size = cfg["sample_size"]
    if size % 2 ** (len(widths) - 1):
        raise error(
            f"{where}: sample_size {size} is not divisible by 2**{len(widths) - 1}, as its blocks need"
        )


DIT_FIELDS: dict[str, Check] = {
    "num_attention_heads": int_in(1, 1024),
    "attention_head_dim": int_in(1, MAX_CHANNELS),
    "in_channels": int_in(1, 256),
    "out_channels": int_in(1, 512, optional=True),
    "num_layers": int_in(1, MAX_LAYERS * 4),
    "dropout": float_in(0.0, 1.0, high_open=True),
    "norm_num_groups": int_in(1, MAX_CHANNELS),
    "sample_size": sample_size,
    "patch_size": int_in(1, 64),
    "activation_fn": one_of("gelu-approximate", "gelu", "geglu", "geglu-approximate"),
    "num_embeds_ada_norm": int_in(1, MAX_CLASSES),
    "norm_type": one_of("ada_norm_zero"),
    "norm_eps": float_in(0.0, 1.0, low_open=True),
    "attention_bias": FLAG,
    "upcast_attention": FLAG,
    "norm_elementwise_affine": FLAG,
}


def check_dit_config(
    config: Any, where: str = "transformer config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``DiTTransformer2DModel`` config: every number in a sane range, patches that tile the latent, as
    many channels out as in (or twice: a learned variance), class labels (its adaLN-zero embeds them)."""
    cfg = check_fields(config, DIT_FIELDS, where, error)
    for key in ("sample_size", "num_embeds_ada_norm"):
        if cfg.get(key) is None:
            raise error(f"{where}: {key} is missing")
    channels = cfg.get("in_channels", 4)
    if cfg.get("out_channels") not in (None, channels, 2 * channels):
        raise error(f"{where}: out_channels must be in_channels or twice it (a learned variance)")
    if cfg["sample_size"] % cfg.get("patch_size", 2):
        patch = cfg.get("patch_size", 2)
        raise error(f"{where}: patch_size {patch} does not tile sample_size {cfg['sample_size']}")
    return cfg


def check_scheduler_config(
    config: Any, where: str = "scheduler config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A scheduler config roseood can score with the loss its model was trained by: every number in a sane
    range, of a class whose objective roseood reads (``objectives``), which checks the rest."""
    cfg = check_fields(config, SCHEDULER_FIELDS, where, error)
    return objective_of(cfg, where, error).check(cfg, where, error)


# -- an LDM's autoencoder ------------------------------------------------------------------------

AUTOENCODERS = ("VQModel", "AutoencoderKL")
AUTOENCODER_FIELDS: dict[str, Check] = {
    "in_channels": int_in(1, 256),
    "out_channels": int_in(1, 256),
    "latent_channels": int_in(1, 256),
    "vq_embed_dim": int_in(1, 256, optional=True),
    "num_vq_embeddings": int_in(1, 1 << 20),
    "block_out_channels": width_list,
    "down_block_types": block_names,
    "up_block_types": block_names,
    "layers_per_block": int_in(1, MAX_LAYERS),
    "norm_num_groups": int_in(1, MAX_CHANNELS),
    "sample_size": int_in(1, MAX_SAMPLE_SIZE),
    "scaling_factor": float_in(0.0, 1e3, low_open=True),
    "act_fn": one_of("silu", "swish", "mish", "gelu", "relu"),
    "norm_type": one_of("group", "spatial"),
    "mid_block_add_attention": FLAG,
    "lookup_from_codebook": FLAG,
    "force_upcast": FLAG,
    "use_quant_conv": FLAG,
    "use_post_quant_conv": FLAG,
}


def check_autoencoder_config(
    config: Any, where: str = "autoencoder config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``VQModel`` or ``AutoencoderKL`` config (``_class_name`` says which): every number in a sane range,
    block lists of one length, groups dividing the channels, no latent statistics it would shift by."""
    cfg = check_fields(config, AUTOENCODER_FIELDS, where, error)
    kind = cfg.get("_class_name")
    if kind not in AUTOENCODERS:
        raise error(f"{where} holds a {shown(kind)}; roseood reads {' and '.join(AUTOENCODERS)} autoencoders")
    widths = cfg.get("block_out_channels", [64])
    for key in ("down_block_types", "up_block_types"):
        blocks = len(cfg.get(key, [""]))
        if blocks != len(widths):
            raise error(f"{where}: {key} names {blocks} blocks, block_out_channels {len(widths)}")
    groups = cfg.get("norm_num_groups", 32)
    if any(w % groups for w in widths):
        raise error(f"{where}: norm_num_groups = {groups} does not divide block_out_channels {widths}")
    for key in ("shift_factor", "latents_mean", "latents_std"):
        if cfg.get(key) is not None:
            raise error(f"{where}: {key} (latents shifted before the denoiser) is not modelled")
    return cfg


def check_denoising(
    options: Any,
    where: str = "denoising",
    error: type[RoseError] = RoseError,
    base: Mapping[str, Any] = LOSS_DEFAULTS,
) -> dict[str, Any]:
    """The per-image loss's settings (``base`` updated by ``options``): known names, each checked by its
    declaration (``roseood.settings.LOSS_SETTINGS``: k ≥ 1, 0 ≤ t_min < t_max ≤ 1, a known weighting, a
    seed numpy and torch accept)."""
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise error(f"{where} must be a mapping of denoising options, found {type(options).__name__}")
    unknown = sorted(set(options) - set(LOSS_DEFAULTS))
    if unknown:
        raise error(f"{where} has unknown options {unknown}; known: {sorted(LOSS_DEFAULTS)}")
    opts = dict(base) | dict(options)
    return {k: v for s in LOSS_SETTINGS for k, v in s.checked(opts, where, error).items()}


def check_ema_decay(value: Any, name: str = "ema_decay", error: type[RoseError] = RoseError) -> float:
    """An EMA decay in [0, 1)."""
    return float_in(0.0, 1.0, high_open=True)(value, name, error)


def dit_shape(dit: dict[str, int]) -> dict[str, int]:
    """A DiT's shape (``layers``, ``heads``, ``head_dim``, ``patch``), unknown or missing keys refused."""
    keys = ("layers", "heads", "head_dim", "patch")
    if not isinstance(dit, dict) or set(dit) != set(keys):
        raise RoseError(f"dit must give {', '.join(keys)}, got {dit!r}")
    return {k: dit[k] for k in keys}
