"""LoRA adapters of a diffusers folder's denoiser: a fine-tune's low-rank updates, read from diffusers' LoRA
file (``pytorch_lora_weights.safetensors``, what ``save_lora_weights`` and diffusers' DreamBooth-LoRA
training write) or a peft adapter (``adapter_config.json`` + ``adapter_model.safetensors``), in the pipeline
folder or a folder inside it (beside the base it was trained on). The adapter is put in the denoiser by
diffusers' own ``load_lora_adapter`` (peft's LoRA layers: ``lora_A``/``lora_B`` linear maps or convolutions
beside each adapted layer), every tensor of the file used, the base frozen: ROSE's default layer set is then
the adapter's, the parameters that learned the fine-tune. The adapter's digest is a setting of the model's
loss, so a detector file records it and refuses another adapter by name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from roseood.errors import CheckpointError, RoseError, first_line, shown
from roseood.models.diffusion.files import read_json, weight_file
from roseood.models.diffusion.library import quiet_diffusers
from roseood.models.diffusion.textconfig import check_lora_config
from roseood.serialization import fingerprint

LORA_FILE = "pytorch_lora_weights.safetensors"  # diffusers' LoRA weights
PEFT_CONFIG, PEFT_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"  # peft's adapter
NAME = "adapter"  # the adapter's name inside the denoiser (peft's layers key their factors by it)
METADATA = "lora_adapter_metadata"  # where diffusers' LoRA file keeps the adapter's LoraConfig


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter put in a denoiser: where it came from, its digest (a hash of its tensors), its rank
    (the largest) and its size."""

    source: Path
    digest: str
    rank: int
    layers: int
    parameters: int

    def describe(self) -> str:
        """The adapter in words, for the line ``rose check-model`` prints."""
        size = f"{self.parameters:,}".replace(",", " ")
        return (
            f"adapter: LoRA of rank {self.rank} on {self.layers} layers ({size} parameters; the base frozen) "
            f"from {self.source}, digest {self.digest}"
        )


def has_adapter(folder: Path) -> bool:
    """Whether ``folder`` holds an adapter's files (diffusers' LoRA file or a peft adapter)."""
    return (folder / LORA_FILE).is_file() or (folder / PEFT_CONFIG).is_file()


def _prefixed(weights: dict[str, Tensor], source: Path) -> dict[str, Tensor]:
    """The denoiser's tensors of an adapter file, named as in the denoiser: diffusers' ``unet.`` and peft's
    ``base_model.model.`` prefixes dropped; an adapter of the text encoder, or of another tool's naming,
    is refused in one line (its layers would be left out in silence)."""
    other = next((k for k in weights if k.startswith(("text_encoder", "te_", "lora_te"))), None)
    if other is not None:
        raise CheckpointError(
            f"{source}: adapts the text encoder ({shown(other)}); roseood reads adapters of the UNet only"
        )
    if any(k.startswith("lora_unet_") for k in weights):
        raise CheckpointError(
            f"{source}: a LoRA of kohya's naming (lora_unet_…); convert it to diffusers' format first"
        )
    for prefix in ("unet.", "base_model.model."):
        if all(k.startswith(prefix) for k in weights):
            return {k.removeprefix(prefix): v for k, v in weights.items()}
    return weights


def read_adapter(folder: Path) -> tuple[dict[str, Tensor], dict[str, Any] | None, Path]:
    """An adapter's tensors (named as in the denoiser), its checked LoRA settings (None: diffusers infers
    rank and scale from the shapes, as its loader does for a file without them) and the file they came
    from; safetensors only, read without running code; two adapters in one folder refused."""
    from safetensors import safe_open

    if (folder / LORA_FILE).is_file() and (folder / PEFT_CONFIG).is_file():
        raise CheckpointError(f"{folder}: holds two adapters ({LORA_FILE} and {PEFT_CONFIG}); keep one")
    if (folder / LORA_FILE).is_file():
        source = folder / LORA_FILE
        weights = weight_file(source)
        with safe_open(source, "pt") as f:
            raw = (f.metadata() or {}).get(METADATA)
        try:
            meta = json.loads(raw) if raw else None
        except (ValueError, RecursionError) as exc:
            raise CheckpointError(f"{source}: its {METADATA} is not valid JSON ({first_line(exc)})") from None
        if isinstance(meta, dict) and any(isinstance(k, str) and k.startswith("unet.") for k in meta):
            meta = {k.removeprefix("unet."): v for k, v in meta.items() if k.startswith("unet.")}
    else:
        source = folder / PEFT_WEIGHTS
        if not source.is_file():
            raise CheckpointError(f"{folder}: {PEFT_CONFIG} without {PEFT_WEIGHTS} (peft's adapter weights)")
        weights, meta = weight_file(source), read_json(folder / PEFT_CONFIG)
    where = f"{source} ({METADATA})" if source.name == LORA_FILE else str(folder / PEFT_CONFIG)
    config = None if meta is None else check_lora_config(meta, where)
    if not weights:
        raise CheckpointError(f"{source}: holds no tensors")
    return _prefixed(weights, source), config, source


def attach_adapter(net: Any, folder: Path) -> Adapter:
    """Put the adapter of ``folder`` in the denoiser ``net`` (the EMA one: training copies it with the
    adapter in) by diffusers' ``load_lora_adapter``, the base then frozen; a file whose tensors do not all
    fit the denoiser's layers is a one-line ``CheckpointError``."""
    from peft.utils import get_peft_model_state_dict

    weights, config, source = read_adapter(folder)
    try:
        with quiet_diffusers():
            net.load_lora_adapter(dict(weights), prefix=None, adapter_name=NAME, metadata=config)
    except (ValueError, KeyError, TypeError, RuntimeError, AttributeError, IndexError) as exc:
        raise CheckpointError(f"{source}: does not fit the UNet ({first_line(exc)})") from None
    loaded = get_peft_model_state_dict(net, adapter_name=NAME)
    if len(loaded) != len(weights):
        raise CheckpointError(
            f"{source}: {len(weights) - len(loaded)} of its {len(weights)} tensors fit no UNet layer"
        )
    factors = [m for n, m in net.named_modules() if n.endswith(f"lora_A.{NAME}")]
    return Adapter(
        source=source,
        digest=fingerprint(weights),
        rank=max(_rank(m) for m in factors),
        layers=len(factors),
        parameters=sum(t.numel() for t in weights.values()),
    )


def _rank(factor: nn.Module) -> int:
    """The rank of a LoRA down-projection (a linear map's or a convolution's output channels)."""
    return int(getattr(factor, "out_features", getattr(factor, "out_channels", 0)))


def check_same_adapter(mine: Adapter | None, recorded: str | None) -> None:
    """Refuse in one line a detector's ``recorded`` adapter digest that is not the model's (``mine``)."""
    actual = None if mine is None else mine.digest
    if recorded != actual:
        has = "no adapter" if mine is None else f"the adapter {actual} ({mine.source})"
        raise RoseError(
            f"fitted with the adapter {recorded}, but the model has {has}: refit the detector for it"
        )
