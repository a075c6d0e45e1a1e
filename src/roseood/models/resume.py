"""A training run's state: seeded global generators, and a run started fresh or restored from its
checkpoint (weights, optimiser, generators, history) to resume exactly where it stopped."""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roseood import distributed
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import same
from roseood.models.base import model_config, model_name
from roseood.models.checkpoint import MODEL_FORMAT
from roseood.serialization import safe_load
from roseood.validation import check_seed


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
    model: Any,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    key: str,
    settings: dict[str, Any],
    data_digest: str | None = None,
) -> dict[str, Any]:
    """Load weights, optimiser and RNG states of a run to resume into ``model``, ``opt``, ``gen`` and
    torch's global generator; return the stored training state. Refuses a checkpoint of another
    architecture, whose ``train_state[key]`` differs from ``settings`` in anything but ``epochs``, or
    (given ``data_digest``) that was trained on other data."""
    obj = safe_load(checkpoint, MODEL_FORMAT)
    ts = obj.get("train_state")
    if ts is None:
        raise CheckpointError(f"{checkpoint}: has no training state to resume from")
    stored = ts.get(key, {})
    arch = (obj.get("kind"), obj.get("config"))
    if (
        not isinstance(stored, dict)
        or not same(stored | {"epochs": None}, settings | {"epochs": None})
        or not same(arch, (model_name(model), model_config(model)))
    ):
        raise CheckpointError(f"{checkpoint}: was trained with other settings (only the epochs may change)")
    if data_digest is not None and ts.get("data_digest") is None:
        raise CheckpointError(
            f"{checkpoint}: records no digest of its training data (written before roseood checked it), "
            f"so resuming cannot confirm the data is the same; the data now has digest {data_digest}"
        )
    if data_digest is not None and not same(ts.get("data_digest"), data_digest):
        raise CheckpointError(
            f"{checkpoint}: was trained on other data (digest {ts.get('data_digest')}, now {data_digest}); "
            "resume with the same data, subset and seed"
        )
    try:
        model.load_state_dict(obj["state_dict"])
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(
            f"{checkpoint}: weights do not match the model ({type(exc).__name__})"
        ) from None
    try:  # a hand-edited training state is the file's fault: one line, not a torch traceback
        opt.load_state_dict(ts["optimizer"])
        gen.set_state(ts["generator"])
        if "torch_rng" in ts:
            torch.set_rng_state(ts["torch_rng"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise CheckpointError(
            f"{checkpoint}: damaged training state ({type(exc).__name__}); train afresh with --overwrite"
        ) from None
    return ts


def start_run(
    checkpoint: Path,
    model: Any,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    resume: bool,
    key: str,
    settings: dict[str, Any],
    data_digest: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """The training state a run starts from: fresh, or restored from ``checkpoint`` with ``resume``
    (same settings and, given ``data_digest``, same data); an existing checkpoint is otherwise replaced
    only with ``overwrite``."""
    state: dict[str, Any] = {key: settings, "epoch": 0, "step": 0, "history": []}
    if data_digest is not None:
        state["data_digest"] = data_digest
    if resume and checkpoint.exists():
        ts = restore_training(checkpoint, model, opt, gen, key, settings, data_digest)
        state.update(epoch=ts["epoch"], step=ts.get("step", 0), history=ts["history"])
        if "partial" in ts:  # stopped inside an epoch: where, to continue from that batch
            state["partial"] = ts["partial"]
    elif checkpoint.exists() and not overwrite:
        raise RoseError(f"{checkpoint} exists; resume it (--resume / resume=True) or choose another output")
    return state


def resume_within(
    partial: Any, epoch: int, gen: torch.Generator, model: torch.nn.Module, checkpoint: Path
) -> tuple[Tensor, int, dict[str, float], float]:
    """Where a run stopped inside ``epoch`` (``train_state["partial"]``): the generator state that drew
    the epoch's order, the batches done, this process's sums and the training seconds spent; ``gen``,
    torch's generator and (under torchrun) ``model``'s buffers set to this process's own at that point.
    Another process count is refused."""
    ranks = partial.get("ranks") if isinstance(partial, dict) else None
    if isinstance(ranks, list) and len(ranks) != distributed.world():
        raise CheckpointError(
            f"{checkpoint}: stopped inside an epoch under {len(ranks)} process(es); resume it with "
            f"{len(ranks)} (the count may change at an epoch's end)"
        )
    try:
        if partial["epoch"] != epoch:  # the position of another epoch than the one the state is in
            raise ValueError
        mine = ranks[distributed.rank()]  # type: ignore[index]
        gen.set_state(mine["generator"])
        torch.set_rng_state(mine["torch_rng"])
        with torch.no_grad():
            for name, b in model.named_buffers() if "buffers" in mine else ():
                b.copy_(mine["buffers"][name])
        sums = {str(k): v for k, v in mine["sums"].items()}
        return partial["order_generator"], int(partial["batches"]), sums, float(partial["seconds"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
        raise CheckpointError(
            f"{checkpoint}: damaged training state ({type(exc).__name__}); train afresh with --overwrite"
        ) from None


@contextmanager
def deferred_interrupts() -> Iterator[list[bool]]:
    """A Ctrl-C (SIGINT) or SIGTERM inside the block sets the yielded flag instead of stopping the process
    mid-step, so the loop can write a whole checkpoint at its next batch boundary and then stop; a second
    signal acts at once (the handlers before the block are back). Outside the main thread: no handlers."""
    flag = [False]
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous = {sig: signal.SIG_DFL if h is None else h for sig, h in previous.items()}  # set outside Python

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def defer(signum: int, frame: object) -> None:
        flag[0] = True
        restore()

    for sig in previous:
        signal.signal(sig, defer)
    try:
        yield flag
    finally:
        restore()
