"""The settings of a diffusion model, checked before anything is built: a ``UNet2DModel`` config (every
number of a diffusers config in a sane range), a ``DDPMScheduler`` config, the per-image loss's K
(timestep, noise) pairs (``denoising``) and the EMA decay. A checked config keeps the checked values (an
image size given as ``[S, S]`` is ``S`` from then on)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from roseood.catalogue import DIFFUSION_LOSS_DEFAULTS as LOSS_DEFAULTS
from roseood.catalogue import DIFFUSION_WEIGHTINGS as WEIGHTINGS
from roseood.errors import CheckpointError, RoseError, shown
from roseood.validation import check_float, check_int, check_seed

# Sane ranges of a UNet2DModel/DDPMScheduler config: published pixel-space UNet2DModels are at most 1024
# pixels wide (latent ones 128), with a few thousand channels and timesteps; a number outside is a damaged
# or hostile file, refused before anything is built.
MAX_SAMPLE_SIZE = 2048
MAX_CHANNELS = 8192
MAX_BLOCKS = 12
MAX_LAYERS = 64
MAX_TIMESTEPS = 100_000
MAX_CLASSES = 100_000  # class labels of a class-conditional UNet (ImageNet's 1000, a null class)


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
    "num_class_embeds": _int(1, MAX_CLASSES, optional=True),
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
    # FlowMatchEulerDiscreteScheduler's: σ = shift·s / (1 + (shift − 1)·s) of s = t / T
    "shift": _float(0.0, 1e3, low_open=True),
    "use_dynamic_shifting": FLAG,
    "invert_sigmas": FLAG,
    "use_karras_sigmas": FLAG,
    "use_exponential_sigmas": FLAG,
    "use_beta_sigmas": FLAG,
    "stochastic_sampling": FLAG,
}


def _fields(config: Any, table: Mapping[str, Check], where: str, error: type[RoseError]) -> dict[str, Any]:
    """``config`` (a JSON object) with every field of ``table`` it holds replaced by its checked value
    (``[32, 32]`` → ``32``, ``1`` → ``1.0``); other fields kept."""
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        raise error(f"{where} must be a JSON object of named settings, found {type(config).__name__}")
    out = dict(config)
    for name, check in table.items():
        if name in out:
            out[name] = check(out[name], f"{where}: {name}", error)
    return out


def check_unet_config(
    config: Any, where: str = "unet config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``UNet2DModel`` config as roseood reads it: every number in a sane range, block lists of one
    length, groups dividing the channels, an image size the blocks can halve, no class conditioning."""
    cfg = _fields(config, UNET_FIELDS, where, error)
    if cfg.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise error(f"{where} holds a {shown(cfg['_class_name'])}; roseood reads UNet2DModel folders")
    if cfg.get("class_embed_type") is not None:
        raise error(
            f"{where}: class_embed_type {shown(cfg['class_embed_type'])} conditions on a vector; roseood "
            "reads unconditional UNets and UNets of class labels (num_class_embeds)"
        )
    widths = _check_blocks(cfg, where, error, (224, 448, 672, 896))
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
    _check_size(cfg, widths, where, error)
    return cfg


def _check_blocks(
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


def _check_size(cfg: dict[str, Any], widths: list[int], where: str, error: type[RoseError]) -> None:
    """A UNet's sample_size is set and its blocks can halve it."""
    if "sample_size" not in cfg:
        raise error(f"{where}: sample_size is missing (the image size the UNet takes)")
    size = cfg["sample_size"]
    if size % 2 ** (len(widths) - 1):
        raise error(
            f"{where}: sample_size {size} is not divisible by 2**{len(widths) - 1}, as its blocks need"
        )


def _per_block(high: int) -> Check:
    """One positive integer at most ``high``, or one per block (a list); None where unset."""

    def check(value: Any, name: str, error: type[RoseError]) -> Any:
        if isinstance(value, list | tuple):
            if not 1 <= len(value) <= MAX_BLOCKS:
                raise error(f"{name} must be one number or 1 to {MAX_BLOCKS} of them, got {shown(value)}")
            return [check_int(v, f"{name}[{i}]", high=high, error=error) for i, v in enumerate(value)]
        return None if value is None else check_int(value, name, high=high, error=error)

    return check


# A text-conditioned UNet (Stable Diffusion 1.x/2.x): UNet2DModel's numbers, cross-attention to one text
# embedding, and none of the further conditionings of other pipelines (each refused by what it is)
CONDITION_UNET_FIELDS: dict[str, Check] = {
    k: v
    for k, v in UNET_FIELDS.items()
    if k not in ("num_class_embeds", "add_attention", "attention_head_dim")
} | {
    "cross_attention_dim": _int(1, MAX_CHANNELS),
    "attention_head_dim": _per_block(MAX_CHANNELS),
    "num_attention_heads": _per_block(1024),
    "transformer_layers_per_block": _per_block(MAX_LAYERS),
    "conv_in_kernel": _choice(1, 3, 5, 7),
    "conv_out_kernel": _choice(1, 3, 5, 7),
    "mid_block_type": _choice("UNetMidBlock2DCrossAttn", None),
    "time_embedding_type": _choice("positional", "fourier"),
    "attention_type": _choice("default"),
    "dual_cross_attention": _choice(False),
    "use_linear_projection": FLAG,
    "upcast_attention": FLAG,
    "only_cross_attention": FLAG,
    "class_embeddings_concat": _choice(False),
}
CONDITION_UNET_REFUSED = {
    "class_embed_type": "a class or timestep embedding",
    "num_class_embeds": "class labels",
    "addition_embed_type": "added text or image embeddings (SDXL's text_time, Kandinsky's)",
    "encoder_hid_dim": "a projection of the text embedding",
    "encoder_hid_dim_type": "a projection of the text or image embedding",
    "time_cond_proj_dim": "a guidance-scale embedding",
    "projection_class_embeddings_input_dim": "an added class embedding",
    "addition_time_embed_dim": "SDXL's size and crop embedding",
    "reverse_transformer_layers_per_block": "per-block transformer depths of the up path",
}


def check_condition_unet_config(
    config: Any, where: str = "unet config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``UNet2DConditionModel`` config (Stable Diffusion 1.x/2.x): every number in a sane range, block
    lists of one length, groups dividing the channels, an image size the blocks can halve, cross-attention
    to one text embedding and no other conditioning (SDXL's added embeddings and the like are refused)."""
    cfg = _fields(config, CONDITION_UNET_FIELDS, where, error)
    for key, what in CONDITION_UNET_REFUSED.items():
        if cfg.get(key) is not None:
            raise error(f"{where}: {key} ({what}) is not modelled; roseood reads a UNet conditioned on text")
    widths = _check_blocks(cfg, where, error, (320, 640, 1280, 1280))
    for key in ("attention_head_dim", "num_attention_heads", "transformer_layers_per_block"):
        if isinstance(cfg.get(key), list) and len(cfg[key]) != len(widths):
            raise error(f"{where}: {key} names {len(cfg[key])} blocks, block_out_channels {len(widths)}")
    _check_size(cfg, widths, where, error)
    return cfg


TEXT_ENCODER_FIELDS: dict[str, Check] = {
    "vocab_size": _int(2, 1 << 20),
    "hidden_size": _int(1, MAX_CHANNELS),
    "intermediate_size": _int(1, 8 * MAX_CHANNELS),
    "projection_dim": _int(1, MAX_CHANNELS),
    "num_hidden_layers": _int(1, MAX_LAYERS),
    "num_attention_heads": _int(1, 1024),
    "max_position_embeddings": _int(1, 4096),
    "hidden_act": _choice("quick_gelu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu"),
    "layer_norm_eps": _float(0.0, 1.0, low_open=True),
    "attention_dropout": _float(0.0, 1.0, high_open=True),
    "dropout": _float(0.0, 1.0, high_open=True),
}


def check_text_encoder_config(
    config: Any, where: str = "text encoder config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``CLIPTextModel`` config (Stable Diffusion's text encoder): every number in a sane range and heads
    that divide the width."""
    cfg = _fields(config, TEXT_ENCODER_FIELDS, where, error)
    kinds = cfg.get("architectures") or ["CLIPTextModel"]
    if kinds != ["CLIPTextModel"] or cfg.get("model_type", "clip_text_model") != "clip_text_model":
        raise error(f"{where} holds a {shown(kinds[0])}; roseood reads a CLIPTextModel text encoder")
    if cfg.get("hidden_size", 512) % cfg.get("num_attention_heads", 8):
        raise error(f"{where}: num_attention_heads does not divide hidden_size")
    return cfg


def _pattern(check: Check) -> Check:
    """A mapping of layer names to numbers each ``check`` accepts (None: empty), as peft's patterns are."""

    def inner(value: Any, name: str, error: type[RoseError]) -> dict[str, Any]:
        value = {} if value is None else value
        if not isinstance(value, dict) or len(value) > 100_000 or not all(isinstance(k, str) for k in value):
            raise error(f"{name} must map layer names to numbers, got {shown(value)}")
        return {k: check(v, f"{name}[{shown(k)}]", error) for k, v in value.items()}

    return inner


# A LoRA adapter's settings (peft's LoraConfig, as adapter_config.json or diffusers' metadata hold them):
# those read, those refused where set (other parameters than low-rank updates of existing layers), and any
# other setting of peft's refused where it is not its default (null, false, empty)
LORA_FIELDS: dict[str, Check] = {
    "r": _int(1, 4096),
    "lora_alpha": _float(0.0, 1e6, low_open=True),
    "lora_dropout": _float(0.0, 1.0, high_open=True),
    "use_rslora": FLAG,
    "bias": _choice("none"),
    "peft_type": _choice("LORA"),
    "fan_in_fan_out": _choice(False),
    "use_dora": _choice(False),
    "rank_pattern": _pattern(_int(1, 4096)),
    "alpha_pattern": _pattern(_float(0.0, 1e6, low_open=True)),
}
LORA_KEPT = (
    "r", "lora_alpha", "lora_dropout", "use_rslora", "target_modules", "rank_pattern", "alpha_pattern"
)  # fmt: skip
LORA_IGNORED = (  # bookkeeping: where it came from, how it was initialised and run
    "base_model_name_or_path", "revision", "task_type", "inference_mode", "init_lora_weights",
    "peft_version", "auto_mapping", "runtime_config", "megatron_core", "qalora_group_size", "use_qalora",
    "exclude_modules", "bias", "peft_type", "fan_in_fan_out", "use_dora",
)  # fmt: skip


def check_lora_config(config: Any, where: str, error: type[RoseError] = CheckpointError) -> dict[str, Any]:
    """A LoRA adapter's settings as peft's ``LoraConfig`` keyword arguments: rank and scale in sane ranges,
    the target layers as a list of names (peft reads a string as a regular expression: refused), and no
    setting that adds other parameters (DoRA, biases, whole modules saved, tokens) or changes the layers."""
    cfg = _fields(config, LORA_FIELDS, where, error)
    for key in sorted(set(cfg) - set(LORA_KEPT) - set(LORA_IGNORED)):
        if cfg[key] not in (None, False, [], {}, ""):
            raise error(f"{where}: {key} = {shown(cfg[key])} is not modelled; roseood reads low-rank updates")
    targets = cfg.get("target_modules")
    if not isinstance(targets, list | tuple) or not targets or len(targets) > 100_000:
        raise error(f"{where}: target_modules must be a list of layer names, got {shown(targets)}")
    if not all(isinstance(t, str) and 0 < len(t) <= 1000 for t in targets):
        raise error(f"{where}: target_modules must be a list of layer names, got {shown(targets)}")
    return {k: cfg[k] for k in LORA_KEPT if k in cfg} | {"target_modules": list(targets)}


DIT_FIELDS: dict[str, Check] = {
    "num_attention_heads": _int(1, 1024),
    "attention_head_dim": _int(1, MAX_CHANNELS),
    "in_channels": _int(1, 256),
    "out_channels": _int(1, 512, optional=True),
    "num_layers": _int(1, MAX_LAYERS * 4),
    "dropout": _float(0.0, 1.0, high_open=True),
    "norm_num_groups": _int(1, MAX_CHANNELS),
    "sample_size": _sample_size,
    "patch_size": _int(1, 64),
    "activation_fn": _choice("gelu-approximate", "gelu", "geglu", "geglu-approximate"),
    "num_embeds_ada_norm": _int(1, MAX_CLASSES),
    "norm_type": _choice("ada_norm_zero"),
    "norm_eps": _float(0.0, 1.0, low_open=True),
    "attention_bias": FLAG,
    "upcast_attention": FLAG,
    "norm_elementwise_affine": FLAG,
}


def check_dit_config(
    config: Any, where: str = "transformer config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``DiTTransformer2DModel`` config: every number in a sane range, patches that tile the latent, as
    many channels out as in (or twice: a learned variance), class labels (its adaLN-zero embeds them)."""
    cfg = _fields(config, DIT_FIELDS, where, error)
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


# Schedulers of DDPM's forward process (a discrete β schedule; they differ only in how they sample), whose
# model is trained with DDPM's loss: the loss roseood differentiates. Others train another objective.
DDPM_SCHEDULERS = frozenset(
    {
        "DDPMScheduler", "DDIMScheduler", "PNDMScheduler", "DPMSolverMultistepScheduler",
        "DPMSolverSinglestepScheduler", "EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler",
        "HeunDiscreteScheduler", "LMSDiscreteScheduler", "UniPCMultistepScheduler", "DEISMultistepScheduler",
        "KDPM2DiscreteScheduler", "KDPM2AncestralDiscreteScheduler",
    }
)  # fmt: skip
# Schedulers of rectified flow / flow matching (x_σ = (1 − σ) x + σ ε, the model predicting ε − x), and the
# settings of theirs that make the training σ depend on more than t (the image size, a stretched end)
FLOW_SCHEDULERS = frozenset({"FlowMatchEulerDiscreteScheduler", "FlowMatchHeunDiscreteScheduler"})
FLOW_REFUSED = {
    "use_dynamic_shifting": "a shift that depends on the image size",
    "invert_sigmas": "σ running backwards",
    "shift_terminal": "σ stretched to end elsewhere than 0",
}


def check_scheduler_config(
    config: Any, where: str = "scheduler config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A scheduler config roseood can score with the loss its model was trained by: one of DDPM's forward
    process (every number in a sane range, β_start ≤ β_end, trained betas in (0, 1), one per timestep) or
    a flow-matching one (a fixed shift of σ; not one that changes with the image size)."""
    cfg = _fields(config, SCHEDULER_FIELDS, where, error)
    kind = cfg.get("_class_name", "DDPMScheduler")
    if kind in FLOW_SCHEDULERS:
        for flag, what in FLOW_REFUSED.items():
            if cfg.get(flag, False) not in (False, None):
                raise error(f"{where}: {flag} ({what}) is not modelled; roseood reads a fixed shift of σ")
        return cfg
    if kind not in DDPM_SCHEDULERS:
        raise error(
            f"{where} holds a {shown(kind)}, whose model is trained by another objective; roseood reads "
            "models of DDPM's forward process (DDPMScheduler, DDIMScheduler and the other discrete-β "
            "schedulers) and flow-matching models (FlowMatchEulerDiscreteScheduler) and would score this "
            "one with the wrong loss"
        )
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


def is_flow_matching(config: Mapping[str, Any]) -> bool:
    """Whether a checked scheduler config is a flow-matching one (its model predicts the velocity)."""
    return config.get("_class_name") in FLOW_SCHEDULERS


# -- an LDM's autoencoder ------------------------------------------------------------------------

AUTOENCODERS = ("VQModel", "AutoencoderKL")
AUTOENCODER_FIELDS: dict[str, Check] = {
    "in_channels": _int(1, 256),
    "out_channels": _int(1, 256),
    "latent_channels": _int(1, 256),
    "vq_embed_dim": _int(1, 256, optional=True),
    "num_vq_embeddings": _int(1, 1 << 20),
    "block_out_channels": _widths,
    "down_block_types": _names,
    "up_block_types": _names,
    "layers_per_block": _int(1, MAX_LAYERS),
    "norm_num_groups": _int(1, MAX_CHANNELS),
    "sample_size": _int(1, MAX_SAMPLE_SIZE),
    "scaling_factor": _float(0.0, 1e3, low_open=True),
    "act_fn": _choice("silu", "swish", "mish", "gelu", "relu"),
    "norm_type": _choice("group", "spatial"),
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
    cfg = _fields(config, AUTOENCODER_FIELDS, where, error)
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


def dit_shape(dit: dict[str, int]) -> dict[str, int]:
    """A DiT's shape (``layers``, ``heads``, ``head_dim``, ``patch``), unknown or missing keys refused."""
    keys = ("layers", "heads", "head_dim", "patch")
    if not isinstance(dit, dict) or set(dit) != set(keys):
        raise RoseError(f"dit must give {', '.join(keys)}, got {dit!r}")
    return {k: dit[k] for k in keys}
