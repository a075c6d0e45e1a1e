"""The denoisers a diffusion model can have, one entry each in ``DENOISERS``: diffusers' ``UNet2DModel``,
``DiTTransformer2DModel`` (patch embedding, adaLN-zero, attention and feed-forward blocks, class labels with
a null class, an optional learned variance) and ``UNet2DConditionModel`` (Stable Diffusion's: cross-attention
to a text embedding). Each says how its config is checked, what it is conditioned on,
how wide its activations are (for the memory plan); all are built first on torch's meta device (no memory)
and called the same way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roseood.errors import RoseError, first_line, shown
from roseood.memory import check_memory, module_bytes
from roseood.models.base import ADAPTER_SET
from roseood.models.diffusion.bounds import MAX_CHANNELS
from roseood.models.diffusion.config import (
    check_dit_config,
    check_unet_config,
    dit_config,
    dit_shape,
    unet_config,
)
from roseood.models.diffusion.latent import Autoencoder, latent_shape
from roseood.models.diffusion.library import diffusers_module, quiet_diffusers
from roseood.models.diffusion.textconfig import check_condition_unet_config
from roseood.validation import check_int


@dataclass(frozen=True)
class DenoiserKind:
    """A diffusers denoiser class roseood reads: ``check`` its config, its ``classes`` (class labels and
    the null label of condition dropout, None where it has none), ``width`` (the elements per row of its
    largest early activation) and ``example``, the condition of one row it is run with on the meta device
    (a class label, a text embedding, or None)."""

    name: str
    check: Callable[[Any, str, type[RoseError]], dict[str, Any]]
    classes: Callable[[dict[str, Any]], tuple[int | None, int | None]]
    width: Callable[[dict[str, Any]], int]
    example: Callable[[dict[str, Any]], Tensor | None]


def _unet_width(c: dict[str, Any]) -> int:
    return int(c.get("block_out_channels", (224,))[0]) * int(c["sample_size"]) ** 2


def _dit_width(c: dict[str, Any]) -> int:
    tokens = (int(c["sample_size"]) // int(c.get("patch_size", 2))) ** 2
    return 4 * int(c.get("num_attention_heads", 16)) * int(c.get("attention_head_dim", 72)) * tokens


def _label(c: dict[str, Any]) -> Tensor | None:
    """One class label where the denoiser takes them (a UNet2DModel's num_class_embeds, a DiT's)."""
    labelled = c.get("num_class_embeds") or c.get("num_embeds_ada_norm")
    return torch.zeros(1, dtype=torch.long) if labelled else None


DENOISERS = {
    "UNet2DModel": DenoiserKind(
        "UNet2DModel", check_unet_config, lambda c: (c.get("num_class_embeds"), None), _unet_width, _label
    ),
    # diffusers' DiT embeds num_embeds_ada_norm labels plus one for condition dropout: the null label
    "DiTTransformer2DModel": DenoiserKind(
        "DiTTransformer2DModel",
        check_dit_config,
        lambda c: (c["num_embeds_ada_norm"], c["num_embeds_ada_norm"]),
        _dit_width,
        _label,
    ),
    # conditioned on a text embedding (``...diffusion.text``), not on class labels: one token suffices here
    "UNet2DConditionModel": DenoiserKind(
        "UNet2DConditionModel",
        check_condition_unet_config,
        lambda c: (None, None),
        lambda c: _unet_width({"block_out_channels": (320,)} | c),
        lambda c: torch.zeros(1, 1, c.get("cross_attention_dim", 1280)),
    ),
}


def denoiser_kind(
    config: Any, where: str = "denoiser config", error: type[RoseError] = RoseError
) -> DenoiserKind:
    """The kind a denoiser config names (``_class_name``; a UNet2DModel where it names none)."""
    name = config.get("_class_name", "UNet2DModel") if isinstance(config, dict) else "UNet2DModel"
    if name not in DENOISERS:
        raise error(f"{where} holds a {shown(name)}; roseood reads {' and '.join(DENOISERS)} denoisers")
    return DENOISERS[name]


def check_denoiser_config(
    config: Any, where: str = "denoiser config", error: type[RoseError] = RoseError
) -> dict[str, Any]:
    """A checked denoiser config of a kind roseood reads, its class kept in ``_class_name``."""
    kind = denoiser_kind(config, where, error)
    return kind.check(config, where, error) | {"_class_name": kind.name}


def meta_denoiser(config: dict[str, Any]) -> Any:
    """The denoiser of a checked ``config`` built and run once on torch's meta device (no memory): finds a
    config its blocks cannot be built or run from (one-line ``RoseError``), and gives the weights' names
    and shapes before any is allocated."""
    kind = denoiser_kind(config)
    plain = {k: v for k, v in config.items() if not k.startswith("_")}
    size, channels = plain["sample_size"], plain.get("in_channels", 3 if kind.name == "UNet2DModel" else 4)
    try:
        with quiet_diffusers(), torch.device("meta"), torch.no_grad():
            net = getattr(diffusers_module(), kind.name).from_config(plain)
            one = torch.zeros(1, dtype=torch.long)  # a timestep
            predict(net, torch.zeros(1, channels, size, size), one, kind.example(plain))
    except (
        TypeError,
        ValueError,
        KeyError,
        AttributeError,
        RuntimeError,
        IndexError,
        ArithmeticError,
    ) as exc:
        raise RoseError(f"cannot build a {kind.name} from its config ({first_line(exc)})") from None
    return net


def build_denoiser(config: dict[str, Any], k: int, copies: int, empty: bool = False) -> Any:
    """The denoiser of a checked ``config``, once ``meta_denoiser`` has built it without memory and its
    ``copies`` (2: EMA and optimised) and the K-pair noise buffer are known to fit in memory. ``empty``:
    left on torch's meta device (no memory, no random initialisation) for a folder's reader to assign the
    file's weights, unless it has a buffer no file holds (a DiT's positional embedding), which only a real
    build computes."""
    meta = meta_denoiser(config)
    weights = copies * module_bytes(lambda: meta)
    size, channels = config["sample_size"], meta.config.in_channels
    noise = k * channels * size * size * 4
    both = " (EMA and optimised copies)" if copies == 2 else ""
    check_memory(
        weights + noise,
        f"a {type(meta).__name__} of {weights // (4 * copies):,} weights{both} with denoising k = {k} noise "
        f"images of {channels}×{size}×{size}",
        hint="lower denoising k" if noise > weights else "the model is too large for this machine",
    )
    saved = meta.state_dict()
    empty = empty and all(name in saved for name, _ in meta.named_buffers())
    with quiet_diffusers(), torch.device("meta") if empty else contextlib.nullcontext():
        return type(meta).from_config({k: v for k, v in config.items() if not k.startswith("_")})


def predict(net: Any, xt: Tensor, t: Tensor, labels: Tensor | None) -> Tensor:
    """The denoiser's prediction at (x_t, t) and each row's condition ``labels``: class labels, a text
    embedding (floats: what a ``UNet2DConditionModel`` attends to) or None (unconditional); a learned
    variance (twice the channels out, as DiT's) is dropped: the loss and the samplers read the mean's half."""
    if labels is None:
        out = net(xt, t).sample
    elif labels.is_floating_point():
        out = net(xt, t, encoder_hidden_states=labels).sample
    else:
        out = net(xt, timestep=t, class_labels=labels).sample
    return out[:, : xt.shape[1]] if out.shape[1] == 2 * xt.shape[1] else out


def inert_layers(net: torch.nn.Module, prefix: str = "") -> dict[str, str]:
    """A UNet's timestep projections whose output a group norm of one channel per group removes whole
    (ResNet blocks adding it before ``norm2``, diffusers' default ``time_embedding_norm``): their gradient
    is zero by construction. Names as ``prefix`` + the module's name in ``net``, each with why."""
    return {
        f"{prefix}{n}.time_emb_proj": (
            f"its per-channel shift is removed by {n}.norm2 (one channel per group): zero gradient"
        )
        for n, m in net.named_modules()
        if getattr(m, "time_emb_proj", None) is not None
        and getattr(m, "time_embedding_norm", None) == "default"
        and isinstance(getattr(m, "norm2", None), torch.nn.GroupNorm)
        and m.norm2.num_groups == m.norm2.num_channels
    }


def layer_sets(net: torch.nn.Module, prefix: str = "") -> dict[str, list[str]]:
    """The denoiser's layer sets for ROSE, named as ``prefix`` + the module's name: ``adapter`` (a LoRA
    adapter's layers, first: the default, where there is one; the base is then frozen), ``all`` (every
    module with trainable parameters of its own), ``weights`` (convolutions and linear maps), ``down``/
    ``mid``/``up`` (a UNet's parts; a DiT has none); the ``inert_layers`` left out of each."""
    inert = inert_layers(net, prefix)
    modules = {f"{prefix}{n}": m for n, m in net.named_modules() if n}
    names = [
        n
        for n, m in modules.items()
        if any(p.requires_grad for p in m.parameters(recurse=False)) and n not in inert
    ]
    weights = [n for n in names if isinstance(modules[n], torch.nn.Conv2d | torch.nn.Linear)]
    adapter = [n for n in names if ".lora_A." in n or ".lora_B." in n]  # peft's low-rank factors
    sets = ({ADAPTER_SET: adapter} if adapter else {}) | {"all": names, "weights": weights}
    for part in ("down", "mid", "up"):
        if layers := [n for n in names if n.startswith(f"{prefix}{part}_block")]:
            sets[part] = layers
    return sets


# The parts of a diffusers UNet in the order its forward pass runs them (it registers mid_block after
# up_blocks); a name under none of them (a DiT's, whose registration is its order) keeps its place
FORWARD_PARTS = (
    "conv_in", "time_proj", "time_embedding", "class_embedding", "down_blocks", "mid_block", "up_blocks",
    "conv_norm_out", "conv_out",
)  # fmt: skip


def forward_order(names: list[str], prefix: str = "") -> list[str]:
    """``names`` (module names under ``prefix``) in the order the denoiser's forward pass runs them."""

    def rank(name: str) -> int:
        part = name.removeprefix(prefix).split(".")[0]
        return FORWARD_PARTS.index(part) if part in FORWARD_PARTS else len(FORWARD_PARTS)

    return sorted(names, key=rank)  # stable: registration order within a part


def fresh_denoiser_config(
    in_channels: int,
    image_size: int,
    codec: Autoencoder | None,
    classes: int | None,
    dit: dict[str, int] | None,
    unet: dict[str, Any],
) -> dict[str, Any]:
    """The config of a fresh denoiser for ``in_channels``-channel ``image_size``² images (their latents
    where ``codec`` encodes them): a DiT of ``dit``'s shape (one label where ``classes`` is unset), else a
    UNet of ``unet``'s ``widths``, ``layers_per_block`` and ``attention``, of ``classes`` labels."""
    if codec is not None:
        if codec.channels != in_channels or image_size % codec.factor:
            raise RoseError(
                f"the {codec.kind} takes {codec.channels}-channel images of a side divisible by "
                f"{codec.factor}, not {in_channels}-channel {image_size}×{image_size} ones"
            )
        in_channels, image_size = latent_shape(codec, image_size)[:2]
    if dit is not None:
        return dit_config(in_channels, image_size, classes=classes or 1, **dit_shape(dit))
    widths = unet["widths"]
    if isinstance(widths, int) or not widths:
        raise RoseError(f"diffusion widths must be a list of channel counts, got {widths}")
    widths = [check_int(w, "diffusion width", high=MAX_CHANNELS) for w in widths]
    return unet_config(
        in_channels, image_size, tuple(widths), unet["layers_per_block"], unet["attention"], classes
    )
