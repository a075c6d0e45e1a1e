"""A training run's learning curve: after every epoch the mean training loss and the model's held-out
figures (under the evaluated weights, timed apart from training), written as CSV rows with the training
seconds so far, continued on resume."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from roseood import distributed
from roseood.contracts import HeldOutMetrics
from roseood.models.base import input_dims


def _held_out_metrics(
    model: Any, x: Tensor, device: str | torch.device, batch: int = 256
) -> dict[str, float]:
    """The model's own held-out figures (``HeldOutMetrics``), else its mean NLL in bits/dim; evaluated
    weights, no gradients, and the training's random generators left where they were (a VAE's NLL draws
    latent noise); the model returns to training mode."""
    where = torch.device(device)
    model.eval()
    try:
        with torch.random.fork_rng(devices=[where.index or 0] if where.type == "cuda" else []):
            if isinstance(model, HeldOutMetrics):
                return model.held_out_metrics(x)
            with torch.no_grad():
                nll = [model.nll(x[i : i + batch].to(device)).double().cpu() for i in range(0, len(x), batch)]
            return {"bits_per_dim": float(torch.cat(nll).mean()) / (input_dims(model) * math.log(2))}
    finally:
        model.train()


class Curve:
    """A learning curve as CSV rows (epoch, step, seconds of training, the epoch's figures), appended to
    on resume, the seconds continuing from its last row (and the checkpointed part of the epoch a run
    stopped in); written by the main process only."""

    def __init__(self, path: Path, state: dict[str, Any]) -> None:
        self.path, self.offset = path, 0.0
        if state["step"] and path.exists():  # a resumed run: its clock continues where the file stops
            lines = path.read_text().strip().splitlines()
            if len(lines) > 1:
                self.offset = float(lines[-1].split(",")[2])
        elif path.exists():
            path.unlink()
        partial = state.get("partial")  # stopped inside an epoch: the seconds it had trained of it
        if isinstance(partial, dict) and isinstance(partial.get("seconds"), float):
            self.offset += partial["seconds"]
        self.start = time.monotonic()

    def write(self, epoch: int, step: int, row: dict[str, float]) -> None:
        new = not self.path.exists()
        with self.path.open("a") as f:
            if new:
                f.write(",".join(["epoch", "step", "seconds", *row]) + "\n")
            seconds = self.offset + time.monotonic() - self.start
            f.write(
                ",".join([str(epoch), str(step), f"{seconds:.1f}", *(f"{v:.6g}" for v in row.values())])
                + "\n"
            )


class Recorder:
    """An epoch's history row: the mean training loss per input and per dimension (bits per dimension of
    an NLL, else the objective per dimension), then the held-out figures (timed apart from training),
    also written to the ``curve`` CSV when there is one (by the main process alone)."""

    def __init__(
        self,
        model: Any,
        state: dict[str, Any],
        device: str | torch.device,
        held: Tensor | None,
        curve: str | Path | None,
    ) -> None:
        self.model, self.objective, self.state = model, model.train_objective, state
        self.device, self.held = device, held
        self.log = Curve(Path(curve), state) if curve is not None and distributed.is_main() else None
        nll, dims = self.objective == "nll", input_dims(model)
        self.unit: str = "bpd" if nll else self.objective
        self.per_dim: float = dims * math.log(2) if nll else dims

    def postfix(self, loss: float) -> str:
        """A batch's loss as the progress bar shows it, per dimension."""
        return f"{self.unit}={loss / self.per_dim:.4g}"

    def __call__(self, sums: dict[str, float]) -> dict[str, float]:
        mean = sums["loss"] / sums["seen"]
        if self.objective == "nll":
            row = {"loss_nats": mean, "bits_per_dim": mean / self.per_dim}
        else:
            row = {"loss": mean, self.objective: mean / self.per_dim}
        if self.held is not None:
            started = time.monotonic()
            row |= {
                f"held_out_{k}": v for k, v in _held_out_metrics(self.model, self.held, self.device).items()
            }
            if self.log is not None:  # the curve's clock counts training, not this evaluation
                self.log.offset -= time.monotonic() - started
        if self.log is not None:
            self.log.write(self.state["epoch"] + 1, self.state["step"], row)
        return row
