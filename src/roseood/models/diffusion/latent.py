"""Latent diffusion: a diffusers autoencoder (``VQModel`` or ``AutoencoderKL``) in front of the denoiser,
so that the model is one of pixel images. An image in [-1, 1] is encoded without gradients (the VQ-VAE's
unquantised latent, as LDM was trained on and as ``LDMPipeline`` decodes; the KL autoencoder's posterior
mean), times the config's ``scaling_factor`` (``LDMPipeline`` divides by it before decoding, as diffusers'
latent pipelines do); the denoiser's loss is then taken in latent space. ROSE's layers are the
denoiser's: the encoder is a fixed map of the input, as the pixel scaling is for a pixel-space model.

``rose train diffusion --autoencoder vq`` trains such a model in LDM's two stages: a VQ-VAE on the images
(``AutoencoderTraining``: reconstruction and commitment losses, its own resumable checkpoint), whose
scaling factor is then set to one over its training latents' standard deviation, then the denoiser on
the frozen encoder's latents."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from roseood.errors import RoseError, first_line
from roseood.memory import check_memory, module_bytes
from roseood.models.diffusion.config import check_autoencoder_config
from roseood.models.diffusion.library import diffusers_module, plain_config, quiet_diffusers


class Autoencoder(nn.Module):
    """A frozen diffusers autoencoder as the fixed map from images in [-1, 1] to the denoiser's latents
    (``encode``) and back (``decode``); built from a checked config."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        config = check_autoencoder_config(config)
        self.kind = str(config["_class_name"])
        cls = getattr(diffusers_module(), self.kind)
        plain = {k: v for k, v in config.items() if not k.startswith("_")}
        try:
            with quiet_diffusers(), torch.device("meta"):
                meta = cls.from_config(plain)
        except (TypeError, ValueError, KeyError, AttributeError, RuntimeError, IndexError) as exc:
            raise RoseError(f"cannot build a {self.kind} from its config ({first_line(exc)})") from None
        weights = module_bytes(lambda: meta)
        check_memory(weights, f"a {self.kind} of {weights // 4:,} weights", hint="too large for this machine")
        with quiet_diffusers():
            self.net = cls.from_config(plain)
        self.net.requires_grad_(False)
        self.scaling = float(self.net.config.scaling_factor)  # checked above; the class default if absent

    @property
    def factor(self) -> int:
        """How many pixels one latent position spans along each side (2^(blocks − 1))."""
        return int(2 ** (len(self.net.config.block_out_channels) - 1))

    @property
    def channels(self) -> int:
        """The image channels the encoder takes."""
        return int(self.net.config.in_channels)

    def encode(self, x: Tensor) -> Tensor:
        """Latents of images in [-1, 1], times the scaling; no gradients reach the autoencoder."""
        with torch.no_grad():
            if self.kind == "VQModel":
                z = self.net.encode(x).latents  # unquantised: decode() quantises, as LDM trained
            else:
                z = self.net.encode(x).latent_dist.mode()
        return z * self.scaling

    def decode(self, z: Tensor) -> Tensor:
        """Images in [-1, 1] (not clamped) of scaled latents."""
        return self.net.decode(z / self.scaling).sample

    def config(self) -> dict[str, Any]:
        """The diffusers config with its class (what rebuilds it)."""
        return plain_config(self.net.config) | {"_class_name": self.kind}

    def describe(self) -> str:
        """The encoding in words, for the line ``rose check-model`` prints."""
        latent = "the VQ encoder's unquantised latent" if self.kind == "VQModel" else "the posterior mean"
        parameters = f"{sum(p.numel() for p in self.net.parameters()):,}".replace(",", " ")
        return f"{self.kind} ({parameters} parameters, frozen): {latent} × scaling_factor {self.scaling:g}"


class ModelSpace:
    """What the denoiser models: images in [-1, 1], or their scaled latents under a frozen ``autoencoder``
    (the model's own module, registered there); ``images`` and ``shape``: one image's and one row's shape;
    ``width``: elements per row of the denoiser's largest early activation, what a batch's memory is
    judged by."""

    def __init__(
        self, autoencoder: Autoencoder | None, images: tuple[int, ...], shape: tuple[int, ...], width: int
    ) -> None:
        self.autoencoder, self.images, self.shape, self.width = autoencoder, images, shape, width

    def encode(self, x: Tensor) -> Tensor:
        """Images in [0, 1] → what the denoiser models: the images in [-1, 1], or their scaled latents."""
        x = x * 2.0 - 1.0
        return x if self.autoencoder is None else self.autoencoder.encode(x)

    def decode(self, z: Tensor) -> Tensor:
        """What the denoiser models → images in [-1, 1] (decoded where it models latents; not clamped)."""
        return z if self.autoencoder is None else self.autoencoder.decode(z)

    def check_batch(self, rows: Tensor, copies: int = 1) -> None:
        """Refuse in one line a denoiser batch of ``copies`` rows per row of ``rows`` whose first block's
        activations alone (two of them, float32; and the encoder's first block on the images of a latent
        model) cannot fit in memory: once per batch by whoever forms it, before the copies are made, not
        per denoiser call."""
        n = rows.shape[0] * copies
        size = 2 * n * self.width * 4
        if self.autoencoder is not None:
            pixels = math.prod(self.images[1:])
            size += 2 * rows.shape[0] * self.autoencoder.net.config.block_out_channels[0] * pixels * 4
        check_memory(
            size,
            f"a UNet batch of {n} rows (images × k noisy copies) of {self.shape}",
            device=rows.device,
            hint="lower --batch-size or denoising k",
        )


def latent_shape(autoencoder: Autoencoder, size: int) -> tuple[int, ...]:
    """The (channels, side, side) of the latents of ``size``² images (computed on torch's meta device)."""
    with quiet_diffusers(), torch.device("meta"), torch.no_grad():
        meta = type(autoencoder.net).from_config(autoencoder.net.config)  # a copy without memory
        z = meta.encode(torch.zeros(1, autoencoder.channels, size, size))
    return tuple((z.latents if autoencoder.kind == "VQModel" else z.latent_dist.mode()).shape[1:])


def check_latent_shapes(autoencoder: Autoencoder, unet: dict[str, Any]) -> tuple[int, int]:
    """The pixel images' (channels, size) whose latents the UNet of config ``unet`` takes; an encoder whose
    latents do not fit the UNet is a one-line ``RoseError`` (checked on torch's meta device)."""
    size = int(unet["sample_size"]) * autoencoder.factor
    shape = latent_shape(autoencoder, size)
    wanted = (unet.get("in_channels", 3), unet["sample_size"], unet["sample_size"])
    if shape != wanted:
        raise RoseError(
            f"the {autoencoder.kind} encodes {autoencoder.channels}×{size}×{size} images to latents of "
            f"{'×'.join(map(str, shape))}, but the UNet takes {'×'.join(map(str, wanted))}"
        )
    return autoencoder.channels, size


def vq_config(
    channels: int, image_size: int, widths: Sequence[int], latent_channels: int, codebook: int
) -> dict[str, Any]:
    """A ``VQModel`` config: one encoder/decoder block per width (each after the first halves the side),
    ``latent_channels`` latents quantised against a ``codebook`` of vectors."""
    return check_autoencoder_config(
        {
            "_class_name": "VQModel",
            "in_channels": channels,
            "out_channels": channels,
            "sample_size": image_size,
            "block_out_channels": list(widths),
            "down_block_types": ["DownEncoderBlock2D"] * len(widths),
            "up_block_types": ["UpDecoderBlock2D"] * len(widths),
            "layers_per_block": 1,
            "latent_channels": latent_channels,
            "num_vq_embeddings": codebook,
            "norm_num_groups": math.gcd(*widths, 32),
            "scaling_factor": 1.0,
        }
    )


class AutoencoderTraining(nn.Module):
    """A latent model's first stage as ``roseood.models.train`` trains it: a fresh ``VQModel`` of a checked
    config on images in [0, 1] (seen in [-1, 1]); per image, the summed squared reconstruction error plus
    diffusers' commitment loss times the latent's size (β = 0.25, the straight-through quantiser)."""

    kind = "vq-autoencoder"
    input_kind = "image"
    train_objective = "recon_se"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.codec = Autoencoder(config)
        self.codec.net.requires_grad_(True)
        size = int(self.codec.net.config.sample_size)
        self.input_shape = (self.codec.channels, size, size)

    def config(self) -> dict[str, Any]:
        return {"autoencoder": self.codec.config()}

    def train_loss(self, x: Tensor) -> Tensor:
        x = x * 2.0 - 1.0
        out = self.codec.net(x)
        latent = self.codec.net.config.latent_channels * (x.shape[-1] // self.codec.factor) ** 2
        return (out.sample - x).pow(2).flatten(1).sum(1) + out.commit_loss * latent

    def scaled_config(self, images: Tensor, batch: int = 256) -> dict[str, Any]:
        """The trained config with ``scaling_factor`` one over the standard deviation of the unquantised
        latents of ``images`` (at most the first 2 000), so that the denoiser sees latents of unit scale."""
        with torch.no_grad():
            x = images[:2000].float() / 255.0 if images.dtype == torch.uint8 else images[:2000].float()
            z = torch.cat([self.codec.net.encode(b * 2.0 - 1.0).latents for b in x.split(batch)])
        std = float(z.std())
        if not math.isfinite(std) or std <= 0:
            raise RoseError(
                f"the trained autoencoder's latents have standard deviation {std}: train it again"
            )
        return self.codec.config() | {"scaling_factor": float(f"{1.0 / std:.4g}")}
