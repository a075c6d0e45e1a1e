"""Diffusers folders in and out: a ``DDPMPipeline`` folder (or a ``UNet2DModel``'s own, an LDM's, a DiT's,
a Stable Diffusion pipeline's with its text encoder and a LoRA adapter) read by roseood itself and checked
before anything is built, and a model written as one with ``roseood.json`` (its loss pairs' settings)
beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

from roseood.errors import CheckpointError, RoseError, shown
from roseood.models.diffusion.adapter import attach_adapter, has_adapter
from roseood.models.diffusion.config import (
    check_denoising,
    check_ema_decay,
    check_scheduler_config,
)
from roseood.models.diffusion.denoisers import check_denoiser_config, meta_denoiser
from roseood.models.diffusion.files import read_json, weight_file
from roseood.models.diffusion.latent import check_autoencoder_config
from roseood.models.diffusion.library import diffusers_module
from roseood.models.diffusion.model import DiffusionModel, as_diffusion_model
from roseood.models.diffusion.text import TextCondition, read_tokenizer
from roseood.models.diffusion.textconfig import check_text_encoder_config
from roseood.models.state import check_state, load_state
from roseood.progress import state

ROSEOOD_JSON = "roseood.json"  # our loss settings beside an exported diffusers pipeline
ROSEOOD_KEYS = ("denoising", "ema_decay", "condition")  # what roseood.json may hold
WEIGHTS = "diffusion_pytorch_model"  # diffusers' weight file name (.safetensors, .bin, sharded .index.json)


def export_diffusers(model: DiffusionModel, folder: str | Path) -> Path:
    """Write ``model`` as a diffusers ``DDPMPipeline`` folder (``unet/`` with the EMA weights,
    ``scheduler/``, ``model_index.json``; a latent model as an ``LDMPipeline``, its autoencoder in
    ``vqvae/``; a DiT as a ``DiTPipeline``) plus ``roseood.json`` with its denoising-loss pairs' settings
    and, for a class-conditional model, its condition."""
    model = as_diffusion_model(model, "export to diffusers")
    if isinstance(model.condition, TextCondition) or model.adapter is not None:
        raise RoseError("a text-conditioned model or an adapter is its own diffusers folder already: use it")
    d = diffusers_module()
    folder = Path(folder)
    if model.autoencoder is None:
        d.DDPMPipeline(unet=model.unet, scheduler=model.scheduler).save_pretrained(folder)
    elif type(model.unet).__name__ == "DiTTransformer2DModel":
        d.DiTPipeline(
            transformer=model.unet, vae=model.autoencoder.net, scheduler=model.scheduler
        ).save_pretrained(folder)
    else:
        pipe = d.LDMPipeline(vqvae=model.autoencoder.net, unet=model.unet, scheduler=model.scheduler)
        pipe.save_pretrained(folder)
    ours = {"denoising": model.denoising, "ema_decay": model.ema_decay}
    if model.condition.classes is not None:  # what a class-conditional model judges, read back as written
        ours["condition"] = model.condition.spec
    (folder / ROSEOOD_JSON).write_text(json.dumps(ours))
    return folder


def is_diffusers_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder saved by diffusers (a pipeline, or a UNet's own folder), or an adapter's
    folder inside a pipeline's."""
    p = Path(path)
    files = ("model_index.json", "unet/config.json", "transformer/config.json", "config.json")
    inside = has_adapter(p) and (p.parent / "model_index.json").is_file()
    return p.is_dir() and (inside or any((p / f).is_file() for f in files))


def read_weights(
    folder: Path, name: str = WEIGHTS, kinds: tuple[str, ...] = (".safetensors", ".bin")
) -> tuple[dict[str, Tensor], Path]:
    """A diffusers component's state dict (the denoiser's, an autoencoder's) from its folder
    (``diffusion_pytorch_model.safetensors``, ``.bin``, or their sharded ``.index.json``; a text encoder's
    ``model.safetensors``), read without running code; also the file it came from."""
    for ext in kinds:
        single, index = folder / f"{name}{ext}", folder / f"{name}{ext}.index.json"
        if single.is_file():
            return weight_file(single), single
        if index.is_file():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise CheckpointError(f"{index}: field 'weight_map' must map tensor names to shard files")
            state: dict[str, Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                if Path(shard).name != shard or not shard.startswith(name):
                    raise CheckpointError(f"{index}: {shown(shard)} is not a shard file of this folder")
                state |= weight_file(folder / shard)
            return state, index
    raise CheckpointError(f"{folder}: no {' or '.join(name + k for k in kinds)} (the component's weights)")


def read_roseood_json(path: Path) -> dict[str, Any]:
    """Our ``roseood.json``: an object with ``denoising`` (the loss pairs' settings), ``ema_decay`` and a
    class-conditional model's ``condition`` ("marginal" or "label:N"), each checked like the model's
    arguments; anything else is a one-line ``CheckpointError`` naming the file."""
    obj = read_json(path)
    unknown = sorted(set(obj) - set(ROSEOOD_KEYS))
    if unknown:
        raise CheckpointError(f"{path}: unknown field {shown(unknown[0])} (known: {', '.join(ROSEOOD_KEYS)})")
    out: dict[str, Any] = {}
    if "denoising" in obj:
        out["denoising"] = check_denoising(obj["denoising"], f"{path}: denoising", CheckpointError)
    if "ema_decay" in obj:
        out["ema_decay"] = check_ema_decay(obj["ema_decay"], f"{path}: ema_decay", CheckpointError)
    if "condition" in obj:  # checked against the UNet's classes when the model is built
        if not isinstance(obj["condition"], str):
            raise CheckpointError(
                f"{path}: condition must be 'marginal' or 'label:N', got {shown(obj['condition'])}"
            )
        out["condition"] = obj["condition"]
    return out


# the pipelines roseood reads: each one's denoiser and its autoencoder (None: pixel space) beside a scheduler
PIPELINES = {
    "DDPMPipeline": ("unet", None),
    "DDIMPipeline": ("unet", None),
    "LDMPipeline": ("unet", "vqvae"),  # a VQ-VAE or KL autoencoder: a latent model of pixel images
    "DiTPipeline": ("transformer", "vae"),  # a class-conditional latent transformer
    "StableDiffusionPipeline": ("unet", "vae"),  # a latent UNet conditioned on text (TEXT's components)
}
TEXT = ("text_encoder", "tokenizer")  # a text-conditioned pipeline's further components
TEXT_PIPELINES = ("StableDiffusionPipeline",)
# components of a Stable Diffusion folder that act on generated images, not on the loss: not read, said so
UNREAD = ("safety_checker", "feature_extractor")
DENOISER_FOLDERS = ("unet", "transformer")
# components of the pipelines roseood does not model, each with what it means for p(x)
OTHERS = {
    "vae": "an autoencoder of a pipeline roseood does not read (Stable Diffusion's)",
    "vqvae": "an autoencoder this pipeline does not decode with",
    "transformer": "a transformer denoiser this pipeline does not run",
    "text_encoder": "a text encoder: a text-conditional model of p(x | prompt), not p(x)",
    "tokenizer": "a tokenizer: a text-conditional model of p(x | prompt), not p(x)",
}


def check_pipeline(folder: Path) -> tuple[str, str, str | None]:
    """Refuse, in one line naming it, any pipeline class or component of ``folder`` that roseood does not
    model (a text encoder beside an unconditional UNet, an autoencoder the pipeline does not decode with),
    so that none is ignored in silence; read from ``model_index.json`` (as JSON; nothing is imported) and
    the folder's own subfolders. Returns the pipeline's class and its denoiser's and autoencoder's
    component names (None: pixel space)."""
    index = folder / "model_index.json"
    kind = "DDPMPipeline"
    if index.is_file():
        spec = read_json(index)  # a JSON object, or a one-line CheckpointError
        kind = spec.get("_class_name", kind)
        # components are [library, class] pairs ([null, null]: left out); other keys (DiT's id2label) are data
        named = sorted(k for k, v in spec.items() if isinstance(v, list) and v != [None, None])
        if kind not in PIPELINES:
            raise CheckpointError(f"{index}: a {shown(kind)}{_unread(spec, named)}")
        read = ("scheduler", *PIPELINES[kind], *(TEXT + UNREAD if kind in TEXT_PIPELINES else ()))
        extra = [k for k in named if k not in read]
        if extra:
            what = OTHERS.get(extra[0], "a component roseood does not model")
            raise CheckpointError(
                f"{index}: {shown(kind)} has {shown(extra[0])} ({what}); roseood reads its "
                f"{' and '.join(c for c in PIPELINES[kind] if c)} and scheduler only"
            )
    for name, what in OTHERS.items():
        components = PIPELINES[kind] + (TEXT if kind in TEXT_PIPELINES else ())
        if (folder / name).is_dir() and name not in components:
            raise CheckpointError(f"{folder}: {name}/ is {what} ({kind})")
    if kind in TEXT_PIPELINES and (unread := [c for c in UNREAD if (folder / c).is_dir()]):
        state(f"{folder}: {' and '.join(unread)} act on generated images, not on the loss: not read")
    return kind, PIPELINES[kind][0], PIPELINES[kind][1]


def _unread(spec: dict[str, Any], named: list[str]) -> str:
    """What a pipeline roseood does not read holds that it lacks: its denoiser's class and its text
    encoders where it has several (SD3's, FLUX's), for the one-line refusal."""
    texts = [k for k in named if k.startswith("text_encoder")]
    classes = [spec[k][-1] for k in DENOISER_FOLDERS if k in named]  # [library, class]
    parts = [f"a {shown(c)} denoiser" for c in classes[:1]]
    parts += [f"{len(texts)} text encoders ({', '.join(texts)})"] if len(texts) > 1 else []
    held = f" with {' and '.join(parts)}" if parts else ""
    return (
        f"{held}; roseood reads {', '.join(PIPELINES)} folders (one CLIP text encoder and a "
        "UNet2DConditionModel for text)"
    )


def read_autoencoder(folder: Path) -> tuple[dict[str, Any], dict[str, Tensor], Path]:
    """An LDM's autoencoder folder: its checked config (VQModel or AutoencoderKL), weights and their file."""
    config_file = folder / "config.json"
    config = check_autoencoder_config(read_json(config_file), str(config_file), CheckpointError)
    weights, weights_file = read_weights(folder)
    return config, weights, weights_file


def read_scheduler(folder: Path, unet_dir: Path) -> dict[str, Any]:
    """The checked scheduler config of ``folder`` (its ``scheduler/``, else one beside the denoiser's
    folder ``unet_dir``); none: DDPM's defaults, said in one line."""
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
        return {}
    sched_file = sched_dir / "scheduler_config.json"
    return check_scheduler_config(read_json(sched_file), str(sched_file), CheckpointError)


def load_diffusers(folder: str | Path) -> DiffusionModel:
    """A diffusion model from a diffusers folder: a pipeline (``model_index.json``, ``unet/``,
    ``scheduler/``), or a UNet2DModel's own folder (``config.json`` + weights; the scheduler then from a
    sibling ``scheduler/`` folder, else DDPM's defaults, said in one line). Our ``roseood.json`` restores
    the loss pairs. Every file is read by roseood itself and checked before anything is built (configs:
    ``check_unet_config``, ``check_scheduler_config``; weights: safetensors or weights-only torch files,
    loaded strictly); nothing is fetched from the network and no code in the folder is run."""
    diffusers_module()  # says which extra to install before any file is read
    folder = Path(folder)
    # an adapter's folder inside a pipeline's: the pipeline is its base
    adapter = folder if has_adapter(folder) else None
    if adapter is not None and not (folder / "model_index.json").is_file():
        folder = folder.parent
    # a pipeline's own unet/ (transformer/) folder: the pipeline beside it says what else the model has
    inside = folder.name in DENOISER_FOLDERS and (folder.parent / "model_index.json").is_file()
    root = folder.parent if inside else folder
    kind, denoiser, latent = check_pipeline(root)
    text = read_text_condition(root) if kind in TEXT_PIPELINES else None
    unet_dir = folder / denoiser if (folder / denoiser / "config.json").is_file() else folder
    config_file = unet_dir / "config.json"
    raw = read_json(config_file)
    if raw.get("_class_name") == "UNet2DConditionModel" and text is None:
        raise CheckpointError(
            f"{config_file}: a UNet2DConditionModel is conditioned on text; roseood reads it in a "
            "StableDiffusionPipeline folder (text_encoder/ and tokenizer/ beside unet/)"
        )
    unet = check_denoiser_config(raw, str(config_file), CheckpointError)
    scheduler = read_scheduler(folder, unet_dir)
    ours = next((f / ROSEOOD_JSON for f in (folder, unet_dir.parent) if (f / ROSEOOD_JSON).is_file()), None)
    extra = read_roseood_json(ours) if ours is not None else {}
    weights, weights_file = read_weights(unet_dir)
    plain = {k: v for k, v in unet.items() if not k.startswith("_") or k == "_class_name"}
    sched = {k: v for k, v in scheduler.items() if not k.startswith("_")}
    if "_class_name" in scheduler:  # says the objective (flow matching), and what check-model shows
        sched["_class_name"] = scheduler["_class_name"]
    what = f"the {unet['_class_name']} of {config_file}"
    codec = None if latent is None else read_autoencoder(root / latent)
    if codec is not None:
        extra["autoencoder"] = codec[0]
    if text is not None:
        extra["text"] = text
    try:
        check_state(meta_denoiser(plain), weights, weights_file, what)  # before any allocation
        model = DiffusionModel(unet=plain, scheduler=sched, read=True, **extra)
    except CheckpointError:
        raise
    except RoseError as exc:
        raise CheckpointError(f"{folder}: {exc}") from None
    load_state(model.unet, weights, weights_file, what, assign=True)  # its tensors: no second copy
    if codec is not None and model.autoencoder is not None:
        load_state(model.autoencoder.net, codec[1], codec[2], f"the {model.autoencoder.kind} of {latent}/")
    if adapter is not None:
        model.adapter = attach_adapter(model.unet, adapter)
    return model.eval()


def read_text_condition(folder: Path) -> TextCondition:
    """A Stable Diffusion pipeline's text encoder (``text_encoder/``: a checked CLIPTextModel config and
    safetensors weights, loaded strictly) and tokenizer (``tokenizer/``), read without running code."""
    for name in TEXT:
        if not (folder / name).is_dir():
            raise CheckpointError(f"{folder}: no {name}/, which a text-conditioned pipeline needs")
    config_file = folder / "text_encoder" / "config.json"
    config = check_text_encoder_config(read_json(config_file), str(config_file), CheckpointError)
    weights, weights_file = read_weights(folder / "text_encoder", "model", (".safetensors",))
    try:
        text = TextCondition(config, read_tokenizer(folder / "tokenizer"))
    except CheckpointError:
        raise
    except RoseError as exc:
        raise CheckpointError(f"{folder}: {exc}") from None
    kept = text.encoder.state_dict()  # older files keep the position ids, a fixed range, as a tensor
    weights = {k: v for k, v in weights.items() if k in kept or not k.endswith("position_ids")}
    load_state(text.encoder, weights, weights_file, f"the CLIPTextModel of {config_file}")
    return text
