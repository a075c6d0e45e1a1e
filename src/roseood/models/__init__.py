"""Models ROSE can analyse: the paper's VAE and Glow, a PixelCNN, diffusion models (diffusers UNets, with
``roseood[diffusion]``), any module through ``wrap``, the family registry, plus checkpoint I/O."""

from roseood.models.base import GenerativeModel, RoseModel
from roseood.models.checkpoint import (
    load_checkpoint,
    load_model,
    load_weights,
    model_fingerprint,
    open_model,
    save_model,
)
from roseood.models.diffusion import DiffusionModel, export_diffusers, load_diffusers
from roseood.models.families import FAMILIES, ModelFamily, default_method, get_family, register_family
from roseood.models.glow import Glow
from roseood.models.pixelcnn import PixelCNN
from roseood.models.user import load_factory
from roseood.models.vae import VAE, load_authors_vae
from roseood.models.wrap import WrappedModel, wrap

__all__ = [
    "FAMILIES",
    "VAE",
    "DiffusionModel",
    "GenerativeModel",
    "Glow",
    "ModelFamily",
    "PixelCNN",
    "RoseModel",
    "WrappedModel",
    "default_method",
    "export_diffusers",
    "get_family",
    "load_authors_vae",
    "load_checkpoint",
    "load_diffusers",
    "load_factory",
    "load_model",
    "load_weights",
    "model_fingerprint",
    "open_model",
    "register_family",
    "save_model",
    "wrap",
]
