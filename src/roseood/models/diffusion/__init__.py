"""Diffusion models: a diffusers ``UNet2DModel`` + ``DDPMScheduler`` as a roseood generative model (or a
``FlowMatchEulerDiscreteScheduler``: flow matching; with an ``LDMPipeline``'s autoencoder in front: a latent
model of pixel images, ``latent``).

Training minimises the DDPM ε-prediction MSE at a random timestep (Ho et al. 2020), with an exponential
moving average (EMA) of the weights kept for evaluation: in eval mode every loss uses the EMA network
``unet`` (the one exported, and the one ROSE's layer names point to), in train mode the optimised copy
``online`` (made when it first trains in a model read from a folder: one read to score holds one denoiser,
its weights the file's own tensors). The per-image loss ROSE differentiates (``rose_loss``, also ``nll``)
is the denoising loss at K fixed (timestep, noise) pairs, drawn once from a seed and shared by every
image, so that it is a deterministic function of the image: the K noisy copies of N images run as one
batch of N·K rows and each image's loss is the sum over its K rows (one UNet call; ROSE folds the copies
into each sample's gradient exactly). The pairs are buffers of the model: detectors record them through
the model's fingerprint, so a detector fitted at one K refuses a model set to another.

diffusers is an optional dependency (``pip install roseood[diffusion]``); importing roseood never needs it.
"""

from roseood.models.diffusion.config import LOSS_DEFAULTS, unet_config
from roseood.models.diffusion.folders import (
    ROSEOOD_JSON,
    WEIGHTS,
    export_diffusers,
    is_diffusers_folder,
    load_diffusers,
)
from roseood.models.diffusion.library import diffusers_module, quiet_diffusers
from roseood.models.diffusion.model import DiffusionModel, as_diffusion_model
from roseood.settings import DIFFUSION_WEIGHTINGS as WEIGHTINGS

__all__ = [
    "LOSS_DEFAULTS",
    "ROSEOOD_JSON",
    "WEIGHTINGS",
    "WEIGHTS",
    "DiffusionModel",
    "as_diffusion_model",
    "diffusers_module",
    "export_diffusers",
    "is_diffusers_folder",
    "load_diffusers",
    "quiet_diffusers",
    "unet_config",
]
