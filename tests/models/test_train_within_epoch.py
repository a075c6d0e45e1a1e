"""Checkpoints inside an epoch: a run stopped between two batches (a periodic checkpoint copied away, or a
Ctrl-C) and resumed ends bit for bit where an uninterrupted run ends; a damaged or mismatched position
is refused in one line."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from roseood.errors import CheckpointError
from roseood.models import VAE
from roseood.models.train import TrainConfig, train

CFG = TrainConfig(epochs=2, batch_size=16, seed=3)  # 64 images: 4 batches an epoch, 8 in all


@pytest.fixture(scope="module")
def data() -> torch.Tensor:
    return torch.rand(64, 1, 32, 32, generator=torch.Generator().manual_seed(0))


def vae(after_batch: Callable[[int], None] | None = None) -> VAE:
    """A tiny VAE; ``after_batch(k)`` runs when batch k + 1's loss is asked for (batch k is then stepped
    and its checkpoint, if any, written)."""
    torch.manual_seed(0)
    model = VAE(ngf=4, nz=4)
    if after_batch is not None:
        loss, calls = model.train_loss, [0]

        def hooked(x: torch.Tensor, **kw: Any) -> torch.Tensor:
            after_batch(calls[0])
            calls[0] += 1
            return loss(x, **kw)

        model.train_loss = hooked  # type: ignore[method-assign]
    return model


def weights_and_history(path: Path) -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    obj = torch.load(path, weights_only=True)
    return obj["state_dict"], obj["train_state"]["history"]


def assert_same_run(a: Path, b: Path) -> None:
    (wa, ha), (wb, hb) = weights_and_history(a), weights_and_history(b)
    assert ha == hb
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def uninterrupted(data: torch.Tensor, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "whole.pt"
    train(vae(), data, CFG, path, progress=False, checkpoint_every=None)
    return path


@pytest.mark.parametrize("stopped_after", [1, 6])  # inside the first epoch, inside the second
def test_a_periodic_checkpoint_resumes_at_the_next_batch_exactly(
    data: torch.Tensor, tmp_path: Path, uninterrupted: Path, stopped_after: int
) -> None:
    run, kept = tmp_path / "run.pt", tmp_path / "kept.pt"

    def keep(k: int) -> None:  # every batch checkpoints (every=0): keep the one after `stopped_after`
        if k == stopped_after:
            shutil.copy(run, kept)

    train(vae(keep), data, CFG, run, progress=False, checkpoint_every=0.0)
    state = torch.load(kept, weights_only=True)["train_state"]
    assert state["partial"]["batches"] == stopped_after - 4 * state["epoch"]  # really inside an epoch
    assert state["step"] == stopped_after
    train(vae(), data, CFG, kept, resume=True, progress=False)
    assert_same_run(kept, uninterrupted)
    assert "partial" not in torch.load(kept, weights_only=True)["train_state"]  # an epoch end holds none


def test_ctrl_c_checkpoints_at_the_batch_boundary_and_stops(
    data: torch.Tensor, tmp_path: Path, uninterrupted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run.pt"

    def interrupt(k: int) -> None:  # Ctrl-C while batch 3 (of epoch 1) is about to be stepped
        if k == 2:
            os.kill(os.getpid(), signal.SIGINT)

    # Python's own handler, or "ignore" where a script started the tests in the background (`cmd &`):
    # training takes Ctrl-C either way, and gives back whichever it found
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        train(vae(interrupt), data, CFG, run, progress=True, checkpoint_every=None)
    assert "after batch 3 of 4" in capsys.readouterr().err
    state = torch.load(run, weights_only=True)["train_state"]
    assert (state["epoch"], state["partial"]["batches"], state["step"]) == (0, 3, 3)
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back
    train(vae(), data, CFG, run, resume=True, progress=False)
    assert_same_run(run, uninterrupted)


@pytest.fixture(scope="module")
def stopped_run(data: torch.Tensor, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's checkpoint inside its first epoch, after batch 2."""
    folder = tmp_path_factory.mktemp("stopped")
    run, kept = folder / "run.pt", folder / "kept.pt"

    def keep(k: int) -> None:
        if k == 2:
            shutil.copy(run, kept)

    train(vae(keep), data, CFG, run, progress=False, checkpoint_every=0.0)
    return kept


def rewrite_partial(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    from roseood.serialization import save_file

    obj = torch.load(path, weights_only=True)
    change(obj["train_state"]["partial"])
    save_file(obj, path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(ranks=p["ranks"] * 2), "under 2 process"),
        (lambda p: p.pop("order_generator"), "damaged training state"),
        (lambda p: p.update(epoch=1), "damaged training state"),  # the state says epoch 0 is under way
        (lambda p: p["ranks"][0].update(generator=torch.zeros(3, dtype=torch.uint8)), "damaged"),
    ],
)
def test_a_damaged_or_mismatched_position_is_refused(
    data: torch.Tensor,
    tmp_path: Path,
    stopped_run: Path,
    change: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    kept = Path(shutil.copy(stopped_run, tmp_path / "kept.pt"))
    rewrite_partial(kept, change)
    with pytest.raises(CheckpointError, match=message):
        train(vae(), data, CFG, kept, resume=True, progress=False)


@pytest.mark.parametrize(("option", "every"), [([], 600.0), (["--checkpoint-minutes", "0"], None)])
def test_the_command_line_passes_its_checkpoint_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: list[str], every: float | None
) -> None:
    """`rose train` checkpoints every 10 minutes inside an epoch unless told otherwise (0: epoch ends)."""
    import numpy as np

    import roseood.models.train as training
    from roseood.cli import main

    seen: dict[str, Any] = {}
    monkeypatch.setattr(training, "train", lambda *a, **kw: seen.update(kw))
    images = np.zeros((8, 28, 28), np.uint8)
    np.savez(tmp_path / "train.npz", images=images)
    args = ["train", "vae", "--data", str(tmp_path / "train.npz"), "--ngf", "4", "--nz", "4"]
    assert main([*args, "--out", str(tmp_path / "m.pt"), *option]) == 0
    assert seen["checkpoint_every"] == every
