"""One registry of model families: what checkpoints, ``rose train`` and the bench recipes know of a kind.

A family names a ``GenerativeModel`` class (its ``kind``), its training defaults (``TrainConfig`` fields)
and its ``rose train`` options. Adding a family is one call::

    register_family(ModelFamily("pixelcnn", PixelCNN, {"lr": 3e-4}, add_arguments, arguments_to_config))
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from roseood.data.loading import ImageSet, ImageStream
from roseood.data.preprocess import Preprocessing
from roseood.errors import RoseError
from roseood.models.base import GenerativeModel
from roseood.models.diffusion import LOSS_DEFAULTS, WEIGHTINGS, DiffusionModel
from roseood.models.glow import Glow
from roseood.models.pixelcnn import PixelCNN
from roseood.models.vae import VAE
from roseood.registry import Registry
from roseood.validation import count


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A family without ``rose train`` options of its own."""


def _no_config(args: argparse.Namespace) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class ModelFamily:
    """A model kind: its class, ``TrainConfig`` overrides, and its ``rose train`` options.

    ``add_cli_arguments(parser)`` adds the architecture options; ``from_cli_arguments(args)`` turns
    them into constructor keywords (``in_channels`` and ``image_size`` are added from the data).
    ``trainable``: whether ``rose train`` / ``roseood.models.train.train`` fit it on images alone
    (classifiers need labels).
    """

    name: str
    cls: type[GenerativeModel]
    train_defaults: dict[str, Any] = field(default_factory=dict)
    add_cli_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    from_cli_arguments: Callable[[argparse.Namespace], dict[str, Any]] = _no_config
    trainable: bool = True
    help: str = ""

    def build(self, in_channels: int, image_size: int = 32, **config: Any) -> GenerativeModel:
        """A fresh model of this family for ``in_channels``-channel ``image_size``² images (an
        architecture that scales with the size, e.g. the VAE's stages and Glow's levels)."""
        if "image_size" in inspect.signature(self.cls).parameters:
            config["image_size"] = image_size
        elif image_size != 32:
            raise RoseError(f"{self.name} models take no image_size: they are 32×32 (use --size 32)")
        return self.cls(in_channels=in_channels, **config)

    def build_for(self, images: ImageSet | ImageStream, **config: Any) -> GenerativeModel:
        """A fresh model for loaded images: their channels and size, and their preprocessing recorded
        (``model.preprocessing``, saved in its checkpoints and applied again when scoring)."""
        prep = images.preprocessing or Preprocessing()
        model = self.build(prep.channels, prep.size, **config)
        cast(Any, model).preprocessing = prep  # an attribute of the instance, saved by save_model
        return model


FAMILIES: Registry[str, ModelFamily] = Registry("model kind")


def register_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` (keyed by its name, which must be its class's ``kind``); returns it."""
    if getattr(family.cls, "kind", None) != family.name:
        raise RoseError(
            f"family {family.name!r}: its class {family.cls.__name__} has kind {family.cls.kind!r}"
        )
    return FAMILIES.register(family.name, family, replace=True)


def get_family(name: str) -> ModelFamily:
    """The registered family ``name``, or a ``RoseError`` listing the known ones."""
    return FAMILIES.get(name)


def _vae_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ngf", type=count, default=32, help="VAE width")
    p.add_argument("--nz", type=count, default=100, help="VAE latent size")


def _glow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--levels", type=count, help="Glow levels L (unset: from the size, 32: 2, 64: 3, 128: 4)")
    p.add_argument("--steps", type=count, default=16, help="Glow steps per level K")
    p.add_argument("--hidden", type=count, default=200, help="Glow coupling width")
    p.add_argument("--plain-invconv", action="store_true", help="Glow 1x1 convs without LU decomposition")


register_family(
    ModelFamily(
        "vae",
        VAE,
        {},
        _vae_arguments,
        lambda a: {"ngf": a.ngf, "nz": a.nz},
        help="the paper's VAE (Adam 1e-3 halved every 30 epochs, batch 64, flips)",
    )
)
register_family(
    ModelFamily(
        "glow",
        Glow,
        {"optimizer": "adamax", "lr": 5e-4, "lr_halve_every": 0, "epochs": 50},
        _glow_arguments,
        lambda a: {"levels": a.levels, "steps": a.steps, "hidden": a.hidden, "lu": not a.plain_invconv},
        help="Glow (Adamax 5e-4; --warmup, --grad-clip, --weight-decay)",
    )
)


def _pixelcnn_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=count, default=32, help="PixelCNN feature maps")
    p.add_argument("--blocks", type=count, default=5, help="residual blocks (gated: layers after the first)")
    p.add_argument("--gated", action="store_true", help="gated two-stack PixelCNN (no blind spot)")


register_family(
    ModelFamily(
        "pixelcnn",
        PixelCNN,
        {"epochs": 20, "lr_halve_every": 10},
        _pixelcnn_arguments,
        lambda a: {"width": a.width, "blocks": a.blocks, "gated": a.gated},
        help="PixelCNN, not in the paper (masked convs, 256-way softmax; Adam 1e-3 halved every 10 epochs)",
    )
)


def _diffusion_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--widths", type=str, default="32,64,64", help="UNet block widths, one per resolution")
    p.add_argument("--layers-per-block", type=count, default=1, help="ResNet layers per UNet block")
    p.add_argument("--no-attention", action="store_true", help="no mid-block self-attention")
    p.add_argument("--timesteps", type=count, default=1000, help="DDPM train timesteps T")
    p.add_argument("--ema-decay", type=float, default=0.999, help="EMA decay of the evaluated weights")
    p.add_argument(
        "--rose-k", type=count, default=LOSS_DEFAULTS["k"], help="(t, noise) pairs of the per-image loss"
    )
    p.add_argument(
        "--rose-t-range", type=str, default="0,1", help="timestep range of the pairs, fractions of T"
    )
    p.add_argument("--rose-weighting", choices=WEIGHTINGS, default="simple", help="weighting of the K terms")
    p.add_argument("--rose-seed", type=int, default=0, help="seed of the pairs' noise")


def _diffusion_config(a: argparse.Namespace) -> dict[str, Any]:
    try:
        widths = [int(w) for w in a.widths.split(",")]
        lo, hi = (float(v) for v in a.rose_t_range.split(","))
    except ValueError:
        raise RoseError(
            f"--widths and --rose-t-range take comma-separated numbers, got {a.widths!r}, {a.rose_t_range!r}"
        ) from None
    denoising = {"k": a.rose_k, "t_min": lo, "t_max": hi, "weighting": a.rose_weighting, "seed": a.rose_seed}
    return {
        "widths": widths,
        "layers_per_block": a.layers_per_block,
        "attention": not a.no_attention,
        "train_timesteps": a.timesteps,
        "ema_decay": a.ema_decay,
        "denoising": denoising,
    }


register_family(
    ModelFamily(
        "diffusion",
        DiffusionModel,
        {
            "lr": 1e-3,
            "lr_halve_every": 0,
            "epochs": 3,
            "batch_size": 64,
            "warmup_steps": 100,
            "grad_clip": 1.0,
        },
        _diffusion_arguments,
        _diffusion_config,
        help="DDPM on a diffusers UNet2DModel (needs roseood[diffusion]; Adam 1e-3, 100 warm-up steps, "
        "clip 1, EMA weights evaluated)",
    )
)
