"""Training loop shared by every model: per-epoch atomic checkpoints, resume, progress bar.

Defaults follow the paper: VAE — Adam 1e-3 halved every 30 epochs, batch 64, random horizontal flips;
Glow — Adamax 5e-4, batch 64, optional weight decay, warm-up and gradient clipping; PixelCNN (not in
the paper) — Adam 1e-3 halved every 10 epochs, batch 64, flips.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from roseood.data.tensors import as_image_tensor
from roseood.errors import CheckpointError, RoseError
from roseood.models.base import GenerativeModel
from roseood.models.checkpoint import load_checkpoint, save_model


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

    @classmethod
    def for_model(cls, kind: str, **overrides: Any) -> TrainConfig:
        """The paper's defaults for a model kind, with ``overrides`` applied (None values ignored)."""
        base: dict[str, dict[str, Any]] = {
            "vae": {},
            "glow": {"optimizer": "adamax", "lr": 5e-4, "lr_halve_every": 0, "epochs": 50},
            "pixelcnn": {"epochs": 20, "lr_halve_every": 10},
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


def restore_training(
    checkpoint: Path,
    model: GenerativeModel,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    key: str,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """Load weights, optimiser and RNG state of a run to resume into ``model``, ``opt`` and ``gen``; return
    the stored training state. Refuses a checkpoint of another architecture or whose ``train_state[key]``
    differs from ``settings`` in anything but ``epochs``."""
    stored, obj = load_checkpoint(checkpoint)
    ts = obj.get("train_state")
    if ts is None:
        raise CheckpointError(f"{checkpoint}: has no training state to resume from")
    same = ts.get(key, {}) | {"epochs": None} == settings | {"epochs": None}
    if not same or stored.kind != model.kind or stored.config() != model.config():
        raise CheckpointError(f"{checkpoint}: was trained with other settings (only the epochs may change)")
    model.load_state_dict(stored.state_dict())
    opt.load_state_dict(ts["optimizer"])
    gen.set_state(ts["generator"])
    return ts


def train(
    model: GenerativeModel,
    images: Tensor | np.ndarray,
    cfg: TrainConfig,
    checkpoint: str | Path,
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[GenerativeModel, list[dict[str, float]]]:
    """Train ``model`` on uint8/float images, writing ``checkpoint`` after every epoch.

    With ``resume``, an existing checkpoint's weights, optimiser, RNG state and history are restored
    and training continues from the next epoch (its stored config must match ``cfg``).
    Returns the model (eval mode) and the per-epoch history.
    """
    x = as_image_tensor(images, model.in_channels, model.image_size)
    checkpoint = Path(checkpoint)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.to(device)
    opt = _optimizer(model, cfg)
    history: list[dict[str, float]] = []
    start_epoch, step = 0, 0
    if resume and checkpoint.exists():
        ts = restore_training(checkpoint, model, opt, gen, "config", asdict(cfg))
        start_epoch, step, history = ts["epoch"], ts["step"], ts["history"]
    elif checkpoint.exists() and not resume:
        raise RoseError(f"{checkpoint} exists; pass --resume to continue it or choose another output")
    perturb = None
    if cfg.perturb:
        from roseood.data.perturbations import make_perturbation

        perturb = make_perturbation(cfg.perturb)
    n = x.shape[0]
    for epoch in range(start_epoch, cfg.epochs):
        model.train()
        order = torch.randperm(n, generator=gen)
        total, seen, t0 = 0.0, 0, time.time()
        bar = tqdm(range(0, n, cfg.batch_size), desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress)
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
                "seconds": time.time() - t0,
            }
        )
        state = {
            "config": asdict(cfg),
            "optimizer": opt.state_dict(),
            "generator": gen.get_state(),
            "epoch": epoch + 1,
            "step": step,
            "history": history,
        }
        save_model(model, checkpoint, train_state=state)
        if progress:
            h = history[-1]
            tqdm.write(
                f"epoch {h['epoch']}: {h['bits_per_dim']:.4f} bits/dim, {h['seconds']:.0f} s -> {checkpoint}"
            )
    return model.eval(), history
