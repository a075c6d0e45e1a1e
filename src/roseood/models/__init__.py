"""Generative models with per-sample log-likelihoods: the paper's VAE and Glow, plus checkpoint I/O."""

from roseood.models.base import GenerativeModel
from roseood.models.checkpoint import load_checkpoint, load_model, model_fingerprint, save_model
from roseood.models.glow import Glow
from roseood.models.vae import VAE, load_authors_vae

MODEL_KINDS: dict[str, type[GenerativeModel]] = {"vae": VAE, "glow": Glow}

__all__ = [
    "MODEL_KINDS",
    "VAE",
    "GenerativeModel",
    "Glow",
    "load_authors_vae",
    "load_checkpoint",
    "load_model",
    "model_fingerprint",
    "save_model",
]
