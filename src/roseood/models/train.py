"""Training loop shared by every model: per-epoch atomic checkpoints, resume, progress bar.

Defaults follow the paper: VAE — Adam 1e-3 halved every 30 epochs, batch 64, random horizontal flips;
Glow — Adamax 5e-4, batch 64, optional weight decay, warm-up and gradient clipping.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roseood.data.tensors import as_image_tensor
from roseood.errors import CheckpointError, RoseError
from roseood.models.base import GenerativeModel
from roseood.models.checkpoint import load_checkpoint, save_model
from roseood.progress import note
from roseood.progress import progress as progress_bar
from roseood.serialization import array_digest
from roseood.validation import check_float, check_int, check_seed


@dataclass
class TrainConfig:
    """Optimisation settings; stored in every checkpoint so a resumed run continues identically."""

    epochs: int = 100
    batch_size: int = 64
    optimizer: str = "adam"  # adam | adamax
    lr: float = 1e-3
    lr_halve_every: int = 30  # epochs; 0 disables
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 0.0  # max gradient norm; 0 disables
    hflip: bool = True
    perturb: str | None = None  # e.g. "random:0.3" for a Likelihood-Ratio background model
    seed: int = 0

    def __post_init__(self) -> None:
        check_int(self.epochs, "epochs")
        check_int(self.batch_size, "batch_size")
        check_float(self.lr, "lr", low=0.0, low_open=True)
        check_int(self.lr_halve_every, "lr_halve_every", low=0)
        check_int(self.warmup_steps, "warmup_steps", low=0)
        check_float(self.weight_decay, "weight_decay", low=0.0)
        check_float(self.grad_clip, "grad_clip", low=0.0)
        check_seed(self.seed)

    @classmethod
    def for_model(cls, kind: str, **overrides: Any) -> TrainConfig:
        """The paper's defaults for a model kind, with ``overrides`` applied (None values ignored)."""
        base: dict[str, dict[str, Any]] = {
            "vae": {},
            "glow": {"optimizer": "adamax", "lr": 5e-4, "lr_halve_every": 0, "epochs": 50},
        }
        if kind not in base:
            raise RoseError(f"unknown model kind {kind!r}")
        return cls(**(base[kind] | {k: v for k, v in overrides.items() if v is not None}))


def _optimizer(model: GenerativeModel, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamax":
        return torch.optim.Adamax(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise RoseError(f"unknown optimizer {cfg.optimizer!r}; use adam or adamax")


def _lr(cfg: TrainConfig, epoch: int, step: int) -> float:
    lr = cfg.lr * (0.5 ** (epoch // cfg.lr_halve_every) if cfg.lr_halve_every else 1.0)
    return lr * min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else lr


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed Python's, numpy's and torch's global generators and use torch's deterministic algorithms
    inside the block (restoring the previous algorithm setting after it), so that model initialisation
    and training repeat bit for bit on a CPU."""
    check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def restore_training(
    checkpoint: Path,
    model: GenerativeModel,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    key: str,
    settings: dict[str, Any],
    data_digest: str | None = None,
) -> dict[str, Any]:
    """Load weights, optimiser and RNG states of a run to resume into ``model``, ``opt``, ``gen`` and
    torch's global generator; return the stored training state. Refuses a checkpoint of another
    architecture, whose ``train_state[key]`` differs from ``settings`` in anything but ``epochs``, or
    (given ``data_digest``) that was trained on other images."""
    stored, obj = load_checkpoint(checkpoint)
    ts = obj.get("train_state")
    if ts is None:
        raise CheckpointError(f"{checkpoint}: has no training state to resume from")
    same = ts.get(key, {}) | {"epochs": None} == settings | {"epochs": None}
    if not same or stored.kind != model.kind or stored.config() != model.config():
        raise CheckpointError(f"{checkpoint}: was trained with other settings (only the epochs may change)")
    if data_digest is not None and ts.get("data_digest") != data_digest:
        raise CheckpointError(
            f"{checkpoint}: was trained on other images (digest {ts.get('data_digest')}, now {data_digest}); "
            "resume with the same data, subset and seed"
        )
    model.load_state_dict(stored.state_dict())
    opt.load_state_dict(ts["optimizer"])
    gen.set_state(ts["generator"])
    if "torch_rng" in ts:
        torch.set_rng_state(ts["torch_rng"])
    return ts


def train(
    model: GenerativeModel,
    images: Tensor | np.ndarray,
    cfg: TrainConfig,
    checkpoint: str | Path,
    resume: bool = False,
    progress: bool | None = None,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
) -> tuple[GenerativeModel, list[dict[str, float]]]:
    """Train ``model`` on uint8/float images, writing ``checkpoint`` after every epoch.

    Torch's global generator (latent and dequantisation noise) is seeded with ``cfg.seed`` and its state
    is stored in every checkpoint with the data-order generator's, so a run resumed with ``resume``
    (weights, optimiser, RNG states and history restored; same config and images required) ends exactly
    as an uninterrupted one. An existing ``checkpoint`` is replaced only with ``overwrite``.
    Returns the model (eval mode) and the per-epoch history.
    """
    x = as_image_tensor(images, model.in_channels, model.image_size)
    checkpoint = Path(checkpoint)
    digest = array_digest(x.numpy())
    gen = torch.Generator().manual_seed(cfg.seed)
    model.to(device)
    opt = _optimizer(model, cfg)
    history: list[dict[str, float]] = []
    start_epoch, step = 0, 0
    if resume and checkpoint.exists():
        ts = restore_training(checkpoint, model, opt, gen, "config", asdict(cfg), digest)
        start_epoch, step, history = ts["epoch"], ts["step"], ts["history"]
    elif checkpoint.exists() and not overwrite:
        raise RoseError(f"{checkpoint} exists; pass --resume to continue it or choose another output")
    else:
        torch.manual_seed(cfg.seed)
    perturb = None
    if cfg.perturb:
        from roseood.data.perturbations import make_perturbation

        perturb = make_perturbation(cfg.perturb)
    n = x.shape[0]
    for epoch in range(start_epoch, cfg.epochs):
        model.train()
        order = torch.randperm(n, generator=gen)
        total, seen, t0 = 0.0, 0, time.time()
        bar = progress_bar(range(0, n, cfg.batch_size), f"epoch {epoch + 1}/{cfg.epochs}", enabled=progress)
        for i in bar:
            batch = x[order[i : i + cfg.batch_size]]
            if cfg.hflip:
                flip = torch.rand(batch.shape[0], generator=gen) < 0.5
                batch = torch.where(flip[:, None, None, None], batch.flip(3), batch)
            if perturb is not None:
                batch = perturb(batch, gen)
            for group in opt.param_groups:
                group["lr"] = _lr(cfg, epoch, step)
            loss = model.train_loss(batch.to(device)).mean()
            if not math.isfinite(loss.item()):
                raise RoseError(f"training diverged at epoch {epoch + 1} (loss {loss.item()}); lower the lr")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            step += 1
            total += loss.item() * batch.shape[0]
            seen += batch.shape[0]
            bar.set_postfix(bpd=f"{loss.item() / (model.dims * math.log(2)):.3f}")
        history.append(
            {
                "epoch": epoch + 1,
                "loss_nats": total / seen,
                "bits_per_dim": total / seen / (model.dims * math.log(2)),
            }
        )
        state = {
            "config": asdict(cfg),
            "data_digest": digest,
            "optimizer": opt.state_dict(),
            "generator": gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "epoch": epoch + 1,
            "step": step,
            "history": history,
        }
        save_model(model, checkpoint, train_state=state)
        if progress is not False:
            h = history[-1]
            note(
                f"epoch {h['epoch']}: loss {h['loss_nats']!r} nats, {h['bits_per_dim']:.4f} bits/dim, "
                f"{time.time() - t0:.0f} s -> {checkpoint}"
            )
    return model.eval(), history
