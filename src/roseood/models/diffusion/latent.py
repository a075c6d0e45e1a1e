"""Latent diffusion: a diffusers autoencoder (``VQModel`` or ``AutoencoderKL``) in front of the denoiser,
so that the model is one of pixel images. An image in [-1, 1] is encoded without gradients (the VQ-VAE's
unquantised latent, as LDM was trained on and as ``LDMPipeline`` decodes; the KL autoencoder's posterior
mean), times the config's ``scaling_factor`` (``LDMPipeline`` divides by it before decoding, as diffusers'
latent pipelines do); the denoiser's loss is then taken in latent space. ROSE's layers are the
denoiser's: the encoder is a fixed map of the input, as the pixel scaling is for a pixel-space model."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from roseood.errors import RoseError
from roseood.memory import check_memory, module_bytes
from roseood.models.diffusion.config import check_autoencoder_config
from roseood.models.diffusion.library import diffusers_module, plain_config, quiet_diffusers
from roseood.models.state import first_line


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


def check_latent_shapes(autoencoder: Autoencoder, unet: dict[str, Any]) -> tuple[int, int]:
    """The pixel images' (channels, size) whose latents the UNet of config ``unet`` takes; an encoder whose
    latents do not fit the UNet is a one-line ``RoseError`` (checked on torch's meta device)."""
    size = int(unet["sample_size"]) * autoencoder.factor
    with quiet_diffusers(), torch.device("meta"), torch.no_grad():
        meta = type(autoencoder.net).from_config(autoencoder.net.config)  # a copy without memory
        z = meta.encode(torch.zeros(1, autoencoder.channels, size, size))
    shape = tuple((z.latents if autoencoder.kind == "VQModel" else z.latent_dist.mode()).shape[1:])
    wanted = (unet.get("in_channels", 3), unet["sample_size"], unet["sample_size"])
    if shape != wanted:
        raise RoseError(
            f"the {autoencoder.kind} encodes {autoencoder.channels}×{size}×{size} images to latents of "
            f"{'×'.join(map(str, shape))}, but the UNet takes {'×'.join(map(str, wanted))}"
        )
    return autoencoder.channels, size
