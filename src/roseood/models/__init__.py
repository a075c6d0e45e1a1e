"""Models ROSE can analyse: the paper's VAE and Glow, a PixelCNN, the Figure 6 classifiers, checkpoint I/O."""

from roseood.models.base import GenerativeModel
from roseood.models.checkpoint import load_checkpoint, load_model, model_fingerprint, save_model
from roseood.models.classifier import Classifier, train_classifier
from roseood.models.glow import Glow
from roseood.models.pixelcnn import PixelCNN
from roseood.models.vae import VAE, load_authors_vae

MODEL_KINDS: dict[str, type[GenerativeModel]] = {
    "vae": VAE,
    "glow": Glow,
    "pixelcnn": PixelCNN,
    "classifier": Classifier,
}

__all__ = [
    "MODEL_KINDS",
    "VAE",
    "Classifier",
    "GenerativeModel",
    "Glow",
    "PixelCNN",
    "load_authors_vae",
    "load_checkpoint",
    "load_model",
    "model_fingerprint",
    "save_model",
    "train_classifier",
]
