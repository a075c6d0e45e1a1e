"""How long an evaluation will take here, said before any work: one forward and backward pass of the
model's per-image loss timed on a batch, times the image passes each method will make."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from roseood.contracts import CountsEvaluations, SharesFishers, rows_per_input
from roseood.curvature.memory import saved_bytes
from roseood.data import ImageSet
from roseood.data.tensors import check_model_input
from roseood.detectors import Detector
from roseood.evaluation.splits import EvalSpec
from roseood.models.base import RoseModel
from roseood.progress import forecast

TIMED_BYTES = 1 << 30  # what the timed batch may keep for its backward pass (a class-conditional
# marginal keeps C·K denoiser rows per image: 64 images took 23 GB)


def pass_weight(detector: Detector, model: RoseModel) -> float:
    """A method's cost per image in the forecast's unit, one forward + backward pass of the model's
    per-image loss: a detector that counts its UNet evaluations (``nfe_per_image``, forward only) costs
    those over the loss's K rows at about three forward passes each (forward, then backward); 1 else."""
    if not isinstance(detector, CountsEvaluations):
        return 1.0
    return detector.nfe_per_image / (3 * rows_per_input(model))


def forecast_images(model: RoseModel, images: np.ndarray, passes: int, what: str, models: int = 1) -> None:
    """State what ``passes`` image passes (each image fitted on or scored, per method) will take here: one
    forward and backward pass of the model's per-image loss timed on a batch of ``images`` (after an
    untimed one-image pass, which also measures what an image keeps for the backward pass, so that the
    timed batch keeps at most ``TIMED_BYTES``), times ``passes`` and the ``models`` of an ensemble. A rough
    guide (methods differ: a likelihood needs no backward pass, ROSE's EKFAC fits in two passes); the
    global RNG is left as it was.
    """
    if not len(images):
        return
    loss = model.rose_loss
    device = next(model.parameters(), torch.empty(0)).device
    x = check_model_input(images, model).to(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        try:
            with saved_bytes({p.data_ptr() for p in model.parameters()}) as kept:
                loss(x[:1]).sum().backward()
            x = x[: max(1, min(len(x), TIMED_BYTES // max(kept(), 1)))]
            t0 = time.perf_counter()
            loss(x).sum().backward()
            seconds = time.perf_counter() - t0
        except RuntimeError:  # no gradient to time (frozen weights): the run itself will say what is wrong
            return
        finally:
            for p in model.parameters():
                p.grad = None
    per_image = seconds / len(x)
    basis = f"{per_image * 1000:.3g} ms per image pass, timed on {len(x)}"
    forecast(what, per_image * passes * models, basis)


def forecast_evaluation(
    spec: EvalSpec,
    models: list[RoseModel],
    detectors: dict[str, Detector],
    fit: ImageSet,
    tested: list[ImageSet],
) -> None:
    """Say before any work how long the whole evaluation will take here (``forecast_images``);
    ``detectors``: each method's, built for the first model."""
    first = models[0]
    limits = [spec.test_limits.get(m) for m in spec.methods]
    sets = [len(s) for s in tested]
    scored = [sum(min(n, lim or n) for n in sets) for lim in limits]  # images each method scores
    members = [detectors[m] for m in spec.methods]
    weights = [pass_weight(d, first) for d in members]
    seen: set[Any] = set()
    for i, d in enumerate(members):  # a ROSE variant on an earlier one's Fishers reads its layer scores
        key = d.score_key if isinstance(d, SharesFishers) else None
        if key is not None:
            if key in seen:
                weights[i] = 0.0
            seen.add(key)
    passes = round(sum(w * (len(fit) + n) for w, n in zip(weights, scored, strict=True)))
    each = f"fitted on {len(fit)} images, {sum(scored) // len(limits)} scored"
    what = f"evaluating {len(spec.methods)} method{'s' if len(limits) > 1 else ''} ({each})"
    forecast_images(first, fit.images[: spec.batch_size], passes, what, len(models))
