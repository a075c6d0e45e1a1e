"""``rose train`` is reproducible: the same command twice writes the same bytes, and a run killed
mid-training (SIGKILL, in a subprocess) and resumed ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roseood.cli import main

EPOCHS = 3
ARGS = ("train", "vae", "--subset", "32", "--batch-size", "16", "--ngf", "4", "--nz", "4")


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    rng = np.random.default_rng(3)
    data = tmp_path / "data"
    data.mkdir()
    images = rng.integers(0, 256, (256, 28, 28), dtype=np.uint8)
    np.savez_compressed(data / "fashion_mnist_train.npz", images=images, labels=np.zeros(256, np.int64))
    monkeypatch.setenv("ROSEOOD_DATA", str(data))
    return data


def final_state(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=True)["train_state"]


def test_same_command_twice_writes_identical_checkpoints(data_dir: Path, tmp_path: Path) -> None:
    for name in ("a.pt", "b.pt"):
        assert main([*ARGS, "--epochs", "1", "--out", str(tmp_path / name)]) == 0
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    assert main([*ARGS, "--epochs", "1", "--seed", "1", "--out", str(tmp_path / "c.pt")]) == 0
    assert (tmp_path / "c.pt").read_bytes() != (tmp_path / "a.pt").read_bytes()


@pytest.mark.slow
def test_killed_then_resumed_equals_uninterrupted(data_dir: Path, tmp_path: Path) -> None:
    killed = tmp_path / "killed.pt"
    cmd = [sys.executable, "-m", "roseood.cli", *ARGS, "--epochs", str(EPOCHS), "--out", str(killed)]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not killed.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the first epoch's checkpoint appears: the run is now inside epoch 2
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert 1 <= final_state(killed)["epoch"] < EPOCHS  # really interrupted before the end

    assert main([*ARGS, "--epochs", str(EPOCHS), "--out", str(killed), "--resume"]) == 0
    whole = tmp_path / "whole.pt"
    assert main([*ARGS, "--epochs", str(EPOCHS), "--out", str(whole)]) == 0
    resumed, uninterrupted = final_state(killed)["history"], final_state(whole)["history"]
    assert resumed[-1]["epoch"] == EPOCHS
    assert resumed[-1]["loss_nats"] == uninterrupted[-1]["loss_nats"]
    a, b = (torch.load(p, weights_only=True)["state_dict"] for p in (killed, whole))
    # bit-identical weights: both runs on this CPU with one thread (OMP_NUM_THREADS=1 in the killed process,
    # the session's one thread here), the same batches, kernels and layouts, so the same rounding
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
