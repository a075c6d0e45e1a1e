"""A latent diffusion model trained in LDM's two stages: the VQ-VAE first (``AutoencoderTraining``, its
own resumable checkpoint beside the model's), then — its weights frozen and its scaling factor set from
its training latents — the denoiser on its latents, as ``rose train diffusion --autoencoder vq`` does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from roseood.models.diffusion.latent import AutoencoderTraining, vq_config
from roseood.models.train import TrainConfig, train


def first_stage_path(out: str | Path) -> Path:
    """Where the first stage of the model written to ``out`` keeps its checkpoint: ``OUT.autoencoder.pt``."""
    out = Path(out)
    return out.with_name(out.stem + ".autoencoder.pt")


def train_first_stage(
    images: Tensor | np.ndarray,
    stage: dict[str, Any],
    out: str | Path,
    cfg: TrainConfig,
    **options: Any,
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Train the VQ-VAE of ``stage`` (``widths``, ``latent_channels``, ``codebook``, ``epochs``) on
    ``images`` (uint8 N×C×S×S) with ``cfg``'s optimiser settings for its own epochs, checkpointed at
    ``first_stage_path(out)`` (``options``: ``train``'s resume, device, overwrite, progress, budget); returns
    its config with the scaling factor of its latents, and its weights."""
    images = torch.as_tensor(images)
    config = vq_config(
        images.shape[1], images.shape[-1], stage["widths"], stage["latent_channels"], stage["codebook"]
    )
    stage_cfg = replace(cfg, epochs=stage["epochs"])
    with torch.random.fork_rng():  # the denoiser's stage starts from the same generator state either way
        model = AutoencoderTraining(config)
        train(cast(Any, model), images, stage_cfg, first_stage_path(out), **options)
    weights = {k: v.detach().clone() for k, v in model.codec.net.state_dict().items()}
    return model.scaled_config(images), weights
