"""Training loop shared by every model: per-epoch atomic checkpoints, resume, progress bar.

Any model with a per-sample ``train_loss`` trains here (built-in families and ``roseood.wrap`` models,
whose loss is their NLL). Family defaults live in the family registry and follow the paper:
VAE — Adam 1e-3 halved every 30 epochs, batch 64, random horizontal flips;
Glow — Adamax 5e-4, batch 64, optional weight decay, warm-up and gradient clipping.
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

from roseood.data.tensors import check_model_input
from roseood.errors import CheckpointError, RoseError
from roseood.models.base import RoseModel, input_dims, model_config, model_name
from roseood.models.checkpoint import MODEL_FORMAT, save_model
from roseood.serialization import safe_load


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
    hflip: bool = True  # image models only
    perturb: str | None = None  # e.g. "random:0.3" for a Likelihood-Ratio background model
    seed: int = 0

    @classmethod
    def for_model(cls, kind: str | None, **overrides: Any) -> TrainConfig:
        """The registered family's defaults for a model kind (None: a user model, the plain defaults),
        with ``overrides`` applied (None values ignored)."""
        from roseood.models.families import get_family

        defaults = get_family(kind).train_defaults if kind is not None else {}
        return cls(**(defaults | {k: v for k, v in overrides.items() if v is not None}))


def _optimizer(model: Any, cfg: TrainConfig) -> torch.optim.Optimizer:
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
    model: Any,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    key: str,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """Load weights, optimiser and RNG state of a run to resume into ``model``, ``opt`` and ``gen``; return
    the stored training state. Refuses a checkpoint of another architecture or whose ``train_state[key]``
    differs from ``settings`` in anything but ``epochs``."""
    obj = safe_load(checkpoint, MODEL_FORMAT)
    ts = obj.get("train_state")
    if ts is None:
        raise CheckpointError(f"{checkpoint}: has no training state to resume from")
    same = ts.get(key, {}) | {"epochs": None} == settings | {"epochs": None}
    arch = (obj.get("kind"), obj.get("config"))
    if not same or arch != (model_name(model), model_config(model)):
        raise CheckpointError(f"{checkpoint}: was trained with other settings (only the epochs may change)")
    try:
        model.load_state_dict(obj["state_dict"])
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(
            f"{checkpoint}: weights do not match the model ({type(exc).__name__})"
        ) from None
    opt.load_state_dict(ts["optimizer"])
    gen.set_state(ts["generator"])
    return ts


def train(
    model: RoseModel,
    images: Tensor | np.ndarray,
    cfg: TrainConfig,
    checkpoint: str | Path,
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[RoseModel, list[dict[str, float]]]:
    """Train ``model`` on its inputs (uint8/float images, tensors, tokens), writing ``checkpoint`` after
    every epoch; random horizontal flips (``cfg.hflip``) apply to image models only.

    With ``resume``, an existing checkpoint's weights, optimiser, RNG state and history are restored
    and training continues from the next epoch (its stored config must match ``cfg``).
    Returns the model (eval mode) and the per-epoch history.
    """
    train_loss = getattr(model, "train_loss", None)
    if not callable(train_loss):
        raise RoseError(f"{model_name(model)} models have no train_loss: they are not trained here")
    x = check_model_input(images, model)
    dims = input_dims(model)
    flips = cfg.hflip and model.input_kind == "image"
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
    if cfg.perturb and model.input_kind != "image":
        raise RoseError(f"perturb={cfg.perturb!r} perturbs images; this model takes {model.input_kind} inputs")
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
            if flips:
                flip = torch.rand(batch.shape[0], generator=gen) < 0.5
                batch = torch.where(flip[:, None, None, None], batch.flip(3), batch)
            if perturb is not None:
                batch = perturb(batch, gen)
            for group in opt.param_groups:
                group["lr"] = _lr(cfg, epoch, step)
            loss = train_loss(batch.to(device)).mean()
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
            bar.set_postfix(bpd=f"{loss.item() / (dims * math.log(2)):.3f}")
        history.append(
            {
                "epoch": epoch + 1,
                "loss_nats": total / seen,
                "bits_per_dim": total / seen / (dims * math.log(2)),
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
