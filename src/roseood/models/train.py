"""Training loop shared by every model: atomic checkpoints (every epoch, every few minutes inside one, at
Ctrl-C and when the time budget is spent), exact resume, progress bar.

Any model with a per-sample ``train_loss`` trains here (built-in families and ``roseood.wrap`` models,
whose loss is their NLL). Family defaults live in the family registry and follow the paper:
VAE — Adam 1e-3 halved every 30 epochs, batch 64, random horizontal flips;
Glow — Adamax 5e-4, batch 64, optional weight decay, warm-up and gradient clipping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roseood import distributed
from roseood.catalogue import CHECKPOINT_EVERY_S
from roseood.contracts import Trainable
from roseood.data.tensors import check_model_input
from roseood.errors import RoseError
from roseood.models.base import RoseModel, model_name
from roseood.models.checkpoint import save_model
from roseood.models.curve import Recorder
from roseood.models.resume import deferred_interrupts, resume_within, start_run
from roseood.progress import duration, eta, forecast, note, resolve
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
    hflip: bool = True  # image models only
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

    def describe(self) -> str:
        """The settings as a reader takes them in: what is on, said once (``3 epochs, batch 64, Adam lr
        0.001, 100 warm-up steps, ...``); the field names are in the checkpoint."""
        parts = [
            f"{self.epochs} epoch{'s' if self.epochs != 1 else ''}",
            f"batch {self.batch_size}",
            f"{self.optimizer.capitalize()} lr {self.lr:g}",
            f"halved every {self.lr_halve_every} epochs" if self.lr_halve_every else "",
            f"{self.warmup_steps} warm-up steps" if self.warmup_steps else "",
            f"weight decay {self.weight_decay:g}" if self.weight_decay else "",
            f"gradient clipping at {self.grad_clip:g}" if self.grad_clip else "",
            "random horizontal flips" if self.hflip else "",
            f"inputs perturbed ({self.perturb})" if self.perturb else "",
            f"seed {self.seed}",
        ]
        return ", ".join(part for part in parts if part)

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


StepFn = Callable[[Tensor, int, int], tuple[Tensor, dict[str, float]]]


class _Warmup:
    """The training forecast: the first batches of a run timed (the very first, which pays for one-off
    set-up, left out), extrapolated to every batch left of its ``epochs`` (less the ``done`` batches of an
    epoch it resumes inside) and stated once."""

    BATCHES = 3  # timed batches after the first

    def __init__(self, epochs: int, enabled: bool) -> None:
        self.epochs, self.enabled = epochs, enabled
        self.seen, self.start, self.done = 0, 0.0, 0

    def batch_done(self, per_epoch: int) -> None:
        if not self.enabled:
            return
        self.seen += 1
        if self.seen == 1:
            self.start = time.monotonic()
        elif self.seen == self.BATCHES + 1 or self.seen == per_epoch:
            self.enabled = False
            per_batch = (time.monotonic() - self.start) / (self.seen - 1)
            what = f"training {self.epochs} epoch{'s' if self.epochs > 1 else ''}"
            what += f" from batch {self.done + 1}" if self.done else ""
            left = per_epoch * self.epochs - self.done
            forecast(what, per_batch * left, f"from {self.seen - 1} timed batches")


@dataclass
class TrainingRun:
    """One training run: the model, its optimizer, the shuffling generator ``gen``, the checkpoint and the
    resumable ``state`` (epoch, step, history), and how it trains: ``n`` examples for ``epochs`` epochs,
    the family's ``step(indices, epoch, step) -> (mean loss, summed statistics)``, ``record(sums)`` →
    the epoch's history row, optional ``batches`` (index order → batches; default ``batch_size`` each),
    gradient clipping, progress, the bar's ``postfix`` and a time ``budget`` in seconds."""

    model: Any
    opt: torch.optim.Optimizer
    gen: torch.Generator
    checkpoint: Path
    state: dict[str, Any]
    n: int
    epochs: int
    step: StepFn
    record: Callable[[dict[str, float]], dict[str, float]]
    batches: Callable[[Tensor], list[Tensor]] | None = None
    batch_size: int = 64
    grad_clip: float = 0.0
    progress: bool | None = None
    postfix: Callable[[float], str] = "loss={:.3f}".format
    budget: float | None = None
    every: float | None = CHECKPOINT_EVERY_S  # seconds between checkpoints inside an epoch (None: ends only)
    resumes: bool = False  # the caller resumes from the checkpoint itself: the same command continues
    deadline: float | None = field(default=None, init=False)  # the budget's end on the monotonic clock

    def __post_init__(self) -> None:
        if self.every is not None:
            check_float(self.every, "checkpoint_every", low=0.0)

    def run(self) -> list[dict[str, float]]:
        """The one training loop: every epoch shuffles with ``gen``, steps every batch (backpropagates,
        clips, steps), records the epoch and writes the checkpoint atomically with the RNG states, so a
        resumed run continues exactly. History holds no wall times: the same run gives the same checkpoint
        bytes. Under torchrun every process steps on its shard of each batch with gradients averaged over
        processes (data parallel), sums are added up, and rank 0 writes the checkpoints."""
        distributed.share_module(self.model)  # rank 0's weights everywhere
        shown = resolve(self.progress) and distributed.is_main()
        first, started = self.state["epoch"], time.monotonic()
        self.deadline = None if self.budget is None else started + self.budget
        warmup = _Warmup(self.epochs - first, enabled=shown)
        for epoch in range(first, self.epochs):
            t0 = time.time()
            sums = self._epoch(epoch, shown, warmup)
            if sums is None:  # the budget ran out inside the epoch, checkpointed there
                break
            self._end_epoch(epoch, sums)
            if shown:
                h = self.state["history"][-1]
                summary = ", ".join(f"{k} {v:.4g}" for k, v in h.items() if k != "epoch")
                left = eta(epoch + 1 - first, self.epochs - first, time.monotonic() - started)
                note(
                    f"epoch {h['epoch']}/{self.epochs}: {summary}, {duration(time.time() - t0)} -> "
                    f"{self.checkpoint}" + (f"; {left}" if left else "")
                )
            if epoch + 1 < self.epochs and distributed.any_process(self._over_budget())[0]:
                self._stopped(shown, f"after {epoch + 1} of {self.epochs} epochs")
                break
        return self.state["history"]

    def _over_budget(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _continues(self) -> str:
        """How a stopped run goes on: a caller that resumes by itself (``rose bench``, ``rose train
        --resume``) needs only the same command again."""
        return "the same command again continues" if self.resumes else "--resume continues"

    def _stopped(self, shown: bool, where: str) -> None:
        if shown and self.budget is not None:
            note(
                f"stopping {where}: the budget of {duration(self.budget)} is spent ({self.checkpoint} "
                f"holds the run; {self._continues()})"
            )

    def _epoch(self, epoch: int, shown: bool, warmup: _Warmup) -> dict[str, float] | None:
        """Step every batch of one epoch (from where a resumed run stopped inside it); the summed loss,
        examples seen and the step's statistics, or None when the budget ran out inside it. Every
        ``every`` seconds, at the budget's end and at a Ctrl-C or SIGTERM (which then stops the run), the
        position is checkpointed: the epoch's order, batches done, sums and every process's generators, so
        ``--resume`` continues at the next batch exactly."""
        self.model.train()
        world, started = distributed.world(), time.monotonic()
        done, sums, seconds = 0, {"loss": 0.0, "seen": 0}, 0.0
        order_state = self.gen.get_state()  # what draws the epoch's order: kept so a resume draws it again
        partial = self.state.pop("partial", None)
        if partial is None:
            order = torch.randperm(self.n, generator=self.gen)
        else:  # the generators where the run stopped; the order drawn again from the epoch's start
            order_state, done, sums, seconds = resume_within(
                partial, epoch, self.gen, self.model, self.checkpoint
            )
            here = self.gen.get_state()
            order = torch.randperm(self.n, generator=self.gen.set_state(order_state))
            self.gen.set_state(here)
        split = self.batches(order) if self.batches is not None else list(order.split(self.batch_size))
        if partial is not None and shown:
            note(f"epoch {epoch + 1}/{self.epochs}: resuming after batch {done} of {len(split)}")
            warmup.done = done
        bar = progress_bar(
            split[done:], f"epoch {epoch + 1}/{self.epochs}", enabled=shown, total=len(split), initial=done
        )
        last = started
        with deferred_interrupts() as stop:
            for i, idx in enumerate(bar, start=done + 1):
                if len(idx) >= world:
                    bar.set_postfix_str(self.postfix(self._batch(idx, world, sums)))
                    warmup.batch_done(len(split))
                due = self.every is not None and time.monotonic() - last >= self.every
                due, halt, over = distributed.any_process(due, stop[0], self._over_budget())
                over = over and i < len(split)  # at the epoch's last batch: its end checkpoints and stops
                if due or halt or over:
                    spent = seconds + time.monotonic() - started
                    self._save(
                        {"epoch": epoch, "batches": i, "order_generator": order_state, "seconds": spent}, sums
                    )
                    last = time.monotonic()
                if over and not halt:
                    bar.close()
                    self._stopped(shown, f"in epoch {epoch + 1} after batch {i} of {len(split)}")
                    return None
                if halt:
                    bar.close()
                    if shown:
                        note(
                            f"interrupted in epoch {epoch + 1} after batch {i} of {len(split)}: "
                            f"{self.checkpoint} holds the run there; {self._continues()} from the next batch"
                        )
                    raise KeyboardInterrupt
        return sums

    def _batch(self, idx: Tensor, world: int, sums: dict[str, float]) -> float:
        """One optimisation step on batch ``idx``, its loss and statistics added to ``sums``; its loss."""
        # under torchrun each process takes its shard of the batch; gradients are averaged so the
        # step is that of the whole batch's mean loss (the weight is exactly 1.0 in one process)
        whole, idx = len(idx), idx[distributed.shard(len(idx))]
        loss, stats = self.step(idx, self.state["epoch"], self.state["step"])
        if not math.isfinite(loss.item()):
            raise RoseError(
                f"training diverged at epoch {self.state['epoch'] + 1} (loss {loss.item()}); lower the lr"
            )
        self.opt.zero_grad(set_to_none=True)
        (loss * (len(idx) * world / whole)).backward()
        distributed.average_gradients(self.model)
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.opt.step()
        self.state["step"] += 1
        sums["loss"] += loss.item() * idx.shape[0]
        sums["seen"] += idx.shape[0]
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + v
        return loss.item()

    def _save(self, partial: dict[str, Any] | None = None, sums: dict[str, float] | None = None) -> None:
        """Write the checkpoint atomically (rank 0): weights, optimiser, generators and, inside an epoch,
        ``partial`` (where it stands) with every process's generators and sums."""
        if partial is not None:
            mine = {
                "generator": self.gen.get_state(),
                "torch_rng": torch.get_rng_state(),
                "sums": dict(sums or {}),
            }
            if distributed.active():  # each process's own buffers (BatchNorm statistics) until the epoch ends
                mine["buffers"] = {k: b.detach().cpu() for k, b in self.model.named_buffers()}
            partial["ranks"] = distributed.gather_objects(mine)
        state = self.state | {
            "optimizer": self.opt.state_dict(),
            "generator": self.gen.get_state(),
            "torch_rng": torch.get_rng_state(),
        }
        if partial is not None:
            state["partial"] = partial
        if distributed.is_main():
            save_model(self.model, self.checkpoint, train_state=state)
        distributed.barrier()  # no rank runs ahead to read (--resume) a checkpoint rank 0 is writing

    def _end_epoch(self, epoch: int, sums: dict[str, float]) -> None:
        """Add the processes' sums, record the epoch in the history and write the checkpoint."""
        if distributed.active():
            totals = distributed.all_reduce(torch.tensor(list(sums.values()), dtype=torch.float64))
            sums = dict(zip(sums, totals.tolist(), strict=True))
            distributed.share_module(self.model, average_buffers=True)  # e.g. BatchNorm statistics
            self.gen.set_state(distributed.broadcast(self.gen.get_state()))  # unequal shards drew unequally
        self.state["history"].append({"epoch": epoch + 1, **self.record(sums)})
        self.state["epoch"] = epoch + 1
        self._save()


def _batch_step(
    kind: str,
    loss: Callable[..., Tensor],
    x: Tensor,
    cfg: TrainConfig,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    device: str | torch.device,
    labels: Tensor | None = None,
) -> Callable[[Tensor, int, int], tuple[Tensor, dict[str, float]]]:
    """One training step's loss (``loss``, of a model taking ``kind`` inputs) on ``x[idx]`` (and their
    class ``labels``): flipped (images, ``cfg.hflip``) and perturbed (``cfg.perturb``) by ``gen``, the
    step's learning rate set."""
    flips = cfg.hflip and kind == "image"
    if cfg.perturb and kind != "image":
        raise RoseError(f"perturb={cfg.perturb!r} perturbs images; this model takes {kind} inputs")
    from roseood.data.perturbations import make_perturbation

    perturb = make_perturbation(cfg.perturb) if cfg.perturb else None

    def step(idx: Tensor, epoch: int, n_step: int) -> tuple[Tensor, dict[str, float]]:
        batch = x[idx]
        if flips:
            flip = torch.rand(batch.shape[0], generator=gen) < 0.5
            batch = torch.where(flip[:, None, None, None], batch.flip(3), batch)
        if perturb is not None:
            batch = perturb(batch, gen)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, epoch, n_step)
        if labels is None:
            return loss(batch.to(device)).mean(), {}
        return loss(batch.to(device), labels=labels[idx].to(device)).mean(), {}

    return step


def _with_labels(x: Tensor, labels: Tensor | np.ndarray | None) -> tuple[Tensor | None, str]:
    """The inputs' class labels as a long tensor (None: none given; another count is refused) and the
    digest of inputs and labels that a resumed run must match."""
    if labels is None:
        return None, array_digest(x.cpu().numpy())
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if y.shape != (x.shape[0],):
        raise RoseError(f"labels: one class per input ({x.shape[0]}), got shape {tuple(y.shape)}")
    return y, array_digest(x.cpu().numpy()) + array_digest(y.numpy())


def train(
    model: RoseModel,
    images: Tensor | np.ndarray,
    cfg: TrainConfig,
    checkpoint: str | Path,
    resume: bool = False,
    progress: bool | None = None,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
    budget: float | None = None,
    held_out: Tensor | np.ndarray | None = None,
    curve: str | Path | None = None,
    labels: Tensor | np.ndarray | None = None,
    checkpoint_every: float | None = CHECKPOINT_EVERY_S,
) -> tuple[RoseModel, list[dict[str, float]]]:
    """Train ``model`` on its inputs (images, tensors, tokens), writing ``checkpoint`` at each epoch's end,
    every ``checkpoint_every`` seconds inside one (None: ends only) and at Ctrl-C or SIGTERM (then stops).

    Torch's global generator is seeded with ``cfg.seed`` and stored in every checkpoint with the
    data-order generator (inside an epoch: the position and sums too): a run resumed with ``resume`` (same
    config and data) ends exactly as an uninterrupted one. An existing ``checkpoint`` is replaced only
    with ``overwrite``. ``budget``: the seconds this call may train; it then stops at the next batch,
    checkpointed. ``device``: cpu, cuda[:i], mps or auto (see ``roseood.distributed.device``);
    ``progress`` reports each epoch and forecasts the run's time (unset: when stderr is a terminal).
    ``held_out``: inputs scored after every epoch under the evaluated weights (``held_out_metrics``, else
    the NLL in bits/dim), recorded as ``held_out_*``; ``curve``: a CSV of the same rows with the training
    seconds so far (appended on resume); ``labels``: each input's class (for a class-conditional model's
    ``train_loss``). Returns the model (eval mode) and the per-epoch history."""
    if not isinstance(model, Trainable):
        raise RoseError(f"{model_name(model)} models have no train_loss: they are not trained here")
    x, device = check_model_input(images, model), distributed.device(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.to(device).train()  # before the optimiser takes the parameters: a DDPM makes its copy here
    opt = _optimizer(model, cfg)
    y, digest = _with_labels(x, labels)
    step = _batch_step(model.input_kind, model.train_loss, x, cfg, opt, gen, device, y)
    held = None if held_out is None else check_model_input(held_out, model)  # refusals before the checkpoint
    state = start_run(Path(checkpoint), model, opt, gen, resume, "config", asdict(cfg), digest, overwrite)
    if state["epoch"] == 0:
        torch.manual_seed(cfg.seed)
    record = Recorder(model, state, device, held, curve)
    history = TrainingRun(
        model,
        opt,
        gen,
        Path(checkpoint),
        state,
        n=x.shape[0],
        epochs=cfg.epochs,
        step=step,
        record=record,
        batch_size=cfg.batch_size,
        grad_clip=cfg.grad_clip,
        progress=progress,
        postfix=record.postfix,
        budget=budget,
        every=checkpoint_every,
        resumes=resume,
    ).run()
    return model.eval(), history
