"""How long a fit or an evaluation will take here, said before any work: a ROSE's own stages timed on a
batch (``roseood.detectors.rose.cost``), other methods as image passes of the model's per-image loss,
one forward and backward pass timed on a batch."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from roseood import distributed
from roseood.contracts import CountsEvaluations, SharesFishers, TimesItsStages, rows_per_input
from roseood.curvature.memory import saved_bytes
from roseood.data import ImageSet
from roseood.data.tensors import check_model_input
from roseood.detectors import Detector
from roseood.detectors.rose import joinable
from roseood.detectors.rose.cost import StageSeconds
from roseood.evaluation.splits import EvalSpec, FitImages
from roseood.models.base import RoseModel
from roseood.progress import forecast, forecast_rest, note

TIMED_BYTES = 1 << 30  # what the timed batch may keep for its backward pass (a class-conditional
# marginal keeps C·K denoiser rows per image: 64 images took 23 GB)


def pass_weight(detector: Detector, model: RoseModel) -> float:
    """A method's cost per image in the forecast's unit, one forward + backward pass of the model's
    per-image loss: a detector that counts its UNet evaluations (``nfe_per_image``, forward only) costs
    those over the loss's K rows at about three forward passes each (forward, then backward); 1 else."""
    if not isinstance(detector, CountsEvaluations):
        return 1.0
    return detector.nfe_per_image / (3 * rows_per_input(model))


def loss_seconds(model: RoseModel, images: np.ndarray) -> tuple[float, int] | None:
    """Seconds per image of one forward and backward pass of the model's per-image loss, and the images
    timed: a batch of ``images`` after an untimed one-image pass, which also measures what an image keeps
    for the backward pass, so that the timed batch keeps at most ``TIMED_BYTES``; None where there is
    nothing to time. The global RNG is left as it was."""
    if not len(images):
        return None
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
            return None
        finally:
            for p in model.parameters():
                p.grad = None
    return seconds / len(x), len(x)


def timed_stages(det: Detector, images: np.ndarray, beside: Sequence[Hashable] = ()) -> StageSeconds | None:
    """A detector's stages timed on one of its batches of ``images`` (``TimesItsStages``: ROSE, its Fishers
    fitted with ``beside``'s); None for other methods, and under torchrun, where a probe on one process
    would wait for the others."""
    if not isinstance(det, TimesItsStages) or distributed.active() or not len(images):
        return None
    note(f"{det.name}: timing its stages on one batch for the forecast")  # minutes on a slow model
    stages: StageSeconds = det.stage_seconds(torch.as_tensor(images), beside)
    return stages


def forecast_scoring(det: Detector, images: np.ndarray, total: int) -> None:
    """State what scoring ``total`` images with the fitted ``det`` will take here, where it would outlast
    the first progress line: timed with its own ``score`` on ``images`` (a few of them, their scores not
    kept: each image's score is its own); none under torchrun, where a probe on one process would wait
    for the others."""
    if distributed.active() or not worth_forecasting(total, len(images)):
        return
    shown, det.progress = det.progress, False
    try:
        start = time.perf_counter()
        det.score(images, shard=False)
        seconds = (time.perf_counter() - start) / len(images)
    finally:
        det.progress = shown
    forecast_rest(f"scoring {total:,} images", seconds, total, f"timed on {len(images)} of them")


def worth_forecasting(images: int, timed: int) -> bool:
    """Whether a run over ``images`` images is worth a forecast timed on ``timed`` of them: not up to twice
    as many, where the timing costs about as much as the run (a fit of a zoo DDPM on 8 + 8 images took
    twice its time with its forecast) and the run ends about when its forecast would have been said."""
    return images > 2 * timed


def forecast_fit(
    det: Detector, models: int, images: np.ndarray, fisher_images: int, held_out: int, what: str
) -> None:
    """State what fitting ``det`` (the first model's detector; ``models`` of them for an ensemble) on
    ``fisher_images`` and ``held_out`` images will take here, where ``worth_forecasting``: a ROSE's own
    stages timed on a batch of ``images`` (``timed_stages``); another method's cost as image passes of its
    model's loss (``loss_seconds``: fitted on all, the held-out ones scored again)."""
    if not worth_forecasting(fisher_images + held_out, len(images)):
        return
    stages = timed_stages(det, images)
    if stages is not None:
        forecast(what, stages.fit(fisher_images, held_out) * models, stages.basis())
        return
    timed = loss_seconds(det.model, images) if det.model is not None else None
    if timed is not None:
        passes = fisher_images + 2 * held_out
        forecast(what, timed[0] * passes * models, _loss_basis(*timed))


def _loss_basis(per_image: float, images: int) -> str:
    return f"{per_image * 1000:.3g} ms per image pass, timed on {images}"


def forecast_evaluation(
    spec: EvalSpec,
    models: list[RoseModel],
    detectors: dict[str, Detector],
    fit: FitImages,
    tested: list[ImageSet],
) -> float | None:
    """Say before any work how long the whole evaluation will take here; ``detectors``: each method to run
    (those the cache does not hold), built for the first model, where ``worth_forecasting``. A ROSE's
    stages are timed on a batch of the fit images (``timed_stages``), once for variants that share their
    layer scores; the first ROSE fits the Fishers of the later ones that ``FisherPool`` fits beside it
    (``joinable``), which then count only their layer scores; other methods count image passes of the
    model's loss (``loss_seconds``, weighted by ``pass_weight``). Returns the seconds said (None: none
    said), from which ``evaluate``'s per-method lines count down."""
    first, methods = models[0], list(detectors)
    limits = [spec.test_limits.get(m) for m in methods]
    sets = [len(s) for s in tested]
    scored = [sum(min(n, lim or n) for n in sets) for lim in limits]  # images each method scores
    n_fisher, held_out, n_fit = len(fit.fisher), len(fit.held_out), len(fit.whole)
    sample = fit.whole.images[: spec.batch_size]
    if not worth_forecasting(n_fit + max(scored), len(sample)):
        return None
    per_pass = loss_seconds(first, sample)
    seconds, seen = 0.0, set()
    roses = [d for d in detectors.values() if isinstance(d, SharesFishers)]
    leads: list[SharesFishers] = []  # the ROSEs whose fits fit the later ones' Fishers too
    for method, n in zip(methods, scored, strict=True):
        d = detectors[method]
        key = d.score_key if isinstance(d, SharesFishers) else None
        if key is not None and key in seen:  # a ROSE variant on an earlier one's layer scores
            continue
        seen.add(key)
        fitted = isinstance(d, SharesFishers) and any(joinable(x, d.fisher_arguments) for x in leads)
        beside: list[Hashable] = []
        if isinstance(d, SharesFishers) and not fitted:
            leads.append(d)
            wanted = dict.fromkeys(o.fisher_arguments for o in roses if joinable(d, o.fisher_arguments))
            beside = [a for a in wanted if a != d.fisher_arguments]
        stages = timed_stages(d, sample, beside)
        if stages is not None:
            own = held_out * stages.scoring if fitted else stages.fit(n_fisher, held_out)
            seconds += own + n * stages.scoring
        elif per_pass is None:  # nothing to time this method by: no forecast rather than one that omits it
            return None
        else:
            seconds += per_pass[0] * pass_weight(d, first) * (n_fit + n)
    each = f"fitted on {n_fit} images, {sum(scored) // len(limits)} scored"
    what = f"evaluating {len(methods)} method{'s' if len(limits) > 1 else ''} ({each})"
    timed = any(isinstance(d, TimesItsStages) for d in detectors.values())
    basis = "ROSE's stages timed on a batch, " if timed else ""
    if per_pass is not None:
        basis += _loss_basis(*per_pass)
    forecast(what, seconds * len(models), basis)
    return seconds * len(models)
