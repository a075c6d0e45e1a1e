"""Training the image classifiers of the paper's layer-wise study (Appendix, Figure 6) on labelled
images; the classifiers themselves are ``roseood.models.classifier``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from roseood.data.tensors import as_image_tensor
from roseood.errors import DataError
from roseood.models.classifier import ARCHS, Classifier
from roseood.models.resume import start_run
from roseood.models.train import TrainingRun

__all__ = ["ARCHS", "Classifier", "train_classifier"]


def _as_labels(labels: Tensor | np.ndarray, n: int, num_classes: int) -> Tensor:
    """Check that ``labels`` are ``n`` integers in [0, num_classes) and return them as int64."""
    y = torch.from_numpy(np.asarray(labels)) if isinstance(labels, np.ndarray) else labels
    if not isinstance(y, Tensor):
        raise DataError(f"expected labels as an array or tensor, got {type(labels).__name__}")
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"expected {n} labels (one per image) of shape ({n},), got shape {tuple(y.shape)}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise DataError(f"labels must be integers, got dtype {y.dtype}")
    y = y.long()
    if y.min() < 0 or y.max() >= num_classes:
        raise DataError(f"labels must lie in [0, {num_classes}), got range [{y.min()}, {y.max()}]")
    return y


def train_classifier(
    model: Classifier,
    images: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    epochs: int,
    batch_size: int = 128,
    lr: float = 1e-3,
    checkpoint: str | Path,
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> tuple[Classifier, list[dict[str, float]]]:
    """Train ``model`` with Adam on the cross-entropy with the true labels, checkpointing every epoch.

    The paper names no optimiser for its classifiers; Adam at a constant ``lr`` is the one it uses for
    its VAEs and needs no schedule. No augmentation. With ``resume``, weights, optimiser, shuffling RNG
    and history are restored and training continues from the next epoch (only ``epochs`` may differ).
    Returns the model (eval mode) and per-epoch history (loss in nats, training accuracy)."""
    x = as_image_tensor(images, model.in_channels, model.image_size)
    y = _as_labels(labels, x.shape[0], model.num_classes)
    if x.shape[0] < 2:
        raise DataError("training a classifier with BatchNorm needs at least 2 images")
    checkpoint = Path(checkpoint)
    gen = torch.Generator().manual_seed(seed)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    settings = {"batch_size": batch_size, "lr": lr, "seed": seed}
    state = start_run(checkpoint, model, opt, gen, resume, "settings", settings)

    def batches(order: Tensor) -> list[Tensor]:
        split = list(order.split(batch_size))
        if len(split) > 1 and len(split[-1]) == 1:  # BatchNorm cannot train on a single 1×1 map
            split[-2:] = [torch.cat(split[-2:])]
        return split

    def step(idx: Tensor, epoch: int, n_step: int) -> tuple[Tensor, dict[str, float]]:
        logits = model.logits(x[idx].to(device))
        target = y[idx].to(device)
        return F.cross_entropy(logits, target), {"correct": int((logits.argmax(1) == target).sum())}

    def record(sums: dict[str, float]) -> dict[str, float]:
        return {"loss": sums["loss"] / sums["seen"], "accuracy": sums["correct"] / sums["seen"]}

    history = TrainingRun(
        model,
        opt,
        gen,
        checkpoint,
        state,
        n=x.shape[0],
        epochs=epochs,
        step=step,
        record=record,
        batches=batches,
        progress=progress,
        resumes=resume,
    ).run()
    return model.eval(), history
