"""The settings of a text-conditioned diffusion model (Stable Diffusion 1.x/2.x) and of a LoRA adapter,
checked before anything is built: a ``UNet2DConditionModel`` config, a ``CLIPTextModel`` config and peft's
``LoraConfig`` fields, each number in a sane range."""

from __future__ import annotations

from typing import Any

from roseood.errors import CheckpointError, RoseError, shown
from roseood.models.diffusion.bounds import (
    FLAG,
    MAX_CHANNELS,
    MAX_LAYERS,
    Check,
    check_fields,
    float_in,
    int_in,
    per_block,
)
from roseood.models.diffusion.config import UNET_FIELDS, check_blocks, check_size
from roseood.validation import one_of

# A text-conditioned UNet (Stable Diffusion 1.x/2.x): UNet2DModel's numbers, cross-attention to one text
# embedding, and none of the further conditionings of other pipelines (each refused by what it is)
CONDITION_UNET_FIELDS: dict[str, Check] = {
    k: v
    for k, v in UNET_FIELDS.items()
    if k not in ("num_class_embeds", "add_attention", "attention_head_dim")
} | {
    "cross_attention_dim": int_in(1, MAX_CHANNELS),
    "attention_head_dim": per_block(MAX_CHANNELS),
    "num_attention_heads": per_block(1024),
    "transformer_layers_per_block": per_block(MAX_LAYERS),
    "conv_in_kernel": one_of(1, 3, 5, 7),
    "conv_out_kernel": one_of(1, 3, 5, 7),
    "mid_block_type": one_of("UNetMidBlock2DCrossAttn", None),
    "time_embedding_type": one_of("positional", "fourier"),
    "attention_type": one_of("default"),
    "dual_cross_attention": one_of(False),
    "use_linear_projection": FLAG,
    "upcast_attention": FLAG,
    "only_cross_attention": FLAG,
    "class_embeddings_concat": one_of(False),
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
    cfg = check_fields(config, CONDITION_UNET_FIELDS, where, error)
    for key, what in CONDITION_UNET_REFUSED.items():
        if cfg.get(key) is not None:
            raise error(f"{where}: {key} ({what}) is not modelled; roseood reads a UNet conditioned on text")
    widths = check_blocks(cfg, where, error, (320, 640, 1280, 1280))
    for key in ("attention_head_dim", "num_attention_heads", "transformer_layers_per_block"):
        if isinstance(cfg.get(key), list) and len(cfg[key]) != len(widths):
            raise error(f"{where}: {key} names {len(cfg[key])} blocks, block_out_channels {len(widths)}")
    check_size(cfg, widths, where, error)
    return cfg


TEXT_ENCODER_FIELDS: dict[str, Check] = {
    "vocab_size": int_in(2, 1 << 20),
    "hidden_size": int_in(1, MAX_CHANNELS),
    "intermediate_size": int_in(1, 8 * MAX_CHANNELS),
    "projection_dim": int_in(1, MAX_CHANNELS),
    "num_hidden_layers": int_in(1, MAX_LAYERS),
    "num_attention_heads": int_in(1, 1024),
    "max_position_embeddings": int_in(1, 4096),
    "hidden_act": one_of("quick_gelu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu"),
    "layer_norm_eps": float_in(0.0, 1.0, low_open=True),
    "attention_dropout": float_in(0.0, 1.0, high_open=True),
    "dropout": float_in(0.0, 1.0, high_open=True),
}


def check_text_encoder_config(
    config: Any, where: str = "text encoder config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A ``CLIPTextModel`` config (Stable Diffusion's text encoder): every number in a sane range and heads
    that divide the width."""
    cfg = check_fields(config, TEXT_ENCODER_FIELDS, where, error)
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
    "r": int_in(1, 4096),
    "lora_alpha": float_in(0.0, 1e6, low_open=True),
    "lora_dropout": float_in(0.0, 1.0, high_open=True),
    "use_rslora": FLAG,
    "bias": one_of("none"),
    "peft_type": one_of("LORA"),
    "fan_in_fan_out": one_of(False),
    "use_dora": one_of(False),
    "rank_pattern": _pattern(int_in(1, 4096)),
    "alpha_pattern": _pattern(float_in(0.0, 1e6, low_open=True)),
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
    cfg = check_fields(config, LORA_FIELDS, where, error)
    for key in sorted(set(cfg) - set(LORA_KEPT) - set(LORA_IGNORED)):
        if cfg[key] not in (None, False, [], {}, ""):
            raise error(f"{where}: {key} = {shown(cfg[key])} is not modelled; roseood reads low-rank updates")
    targets = cfg.get("target_modules")
    if not isinstance(targets, list | tuple) or not targets or len(targets) > 100_000:
        raise error(f"{where}: target_modules must be a list of layer names, got {shown(targets)}")
    if not all(isinstance(t, str) and 0 < len(t) <= 1000 for t in targets):
        raise error(f"{where}: target_modules must be a list of layer names, got {shown(targets)}")
    return {k: cfg[k] for k in LORA_KEPT if k in cfg} | {"target_modules": list(targets)}
