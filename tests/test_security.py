"""Acceptance tests of issue 30: a checkpoint that names code (a payload file, a relative one, a dotted
module such as ``os:abort``) never gets it run, by any command or loader; each gives a one-line error,
or, for a built-in family, a clean load of the weights only. The payload would write ``PWNED``."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roseood.bench.profiles import get_profile
from roseood.bench.workspace import Workspace
from roseood.cli import main
from roseood.detectors import NLL, Detector
from roseood.errors import CheckpointError
from roseood.integrity import seal
from roseood.models import VAE, load_checkpoint, load_model, model_fingerprint, save_model
from roseood.serialization import save_file

PAYLOAD = """
from pathlib import Path
Path(__file__).with_name("PWNED").write_text("a data file ran code")
def build():
    raise SystemExit("payload ran")
"""
FACTORIES = {
    "poison-file.pt": "{d}/payload.py:build",
    "poison-relative.pt": "payload.py:build",
    "poison-abort.pt": "os:abort",
    "poison-dotted.pt": "subprocess:getoutput",
}


@pytest.fixture
def poisoned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a tiny VAE, a detector fitted on it, the payload, and checkpoints of the VAE's
    weights that name code: as a user model (no family rebuilds it) and as a VAE."""
    torch.manual_seed(0)
    vae = VAE(ngf=4, nz=4).eval()
    save_model(vae, tmp_path / "model.pt")
    (tmp_path / "payload.py").write_text(PAYLOAD)
    obj = torch.load(tmp_path / "model.pt", weights_only=True)
    for name, factory in FACTORIES.items():
        save_file(obj | {"kind": "wrapped", "factory": factory.format(d=tmp_path)}, tmp_path / name)
    save_file(obj | {"factory": f"{tmp_path}/payload.py:build"}, tmp_path / "poison-vae.pt")
    rng = np.random.default_rng(0)
    NLL(vae).fit(rng.integers(0, 256, (4, 1, 32, 32), dtype=np.uint8)).save(tmp_path / "det.pt")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("fashion_mnist_train", "fashion_mnist_test", "mnist_test"):
        images = rng.integers(0, 256, (24, 28, 28), dtype=np.uint8)
        np.savez(data / f"{name}.npz", images=images, labels=np.zeros(24, np.int64))
    monkeypatch.setenv("ROSEOOD_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    return code, err.getvalue()


def _one_line(code: int, err: str, phrase: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("error")]
    assert code == 2 and len(lines) == 1 and phrase in lines[0] and "Traceback" not in err, err


COMMANDS = {
    "score": ("score", "--detector", "det.pt", "--data", "mnist", "--out", "s.csv", "--model"),
    "fit": ("fit", "--method", "nll", "--fit-samples", "4", "--out", "d.pt", "--model"),
    "evaluate": ("evaluate", "--ood", "mnist", "--methods", "nll", "--fit-samples", "8", "--model"),
    "check-model": ("check-model", "--model"),
    "evaluate --background": (
        "evaluate",
        "--ood",
        "mnist",
        "--methods",
        "lratio",
        "--fit-samples",
        "8",
        "--model",
        "model.pt",
        "--background",
    ),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("file", FACTORIES)
def test_no_command_runs_the_code_a_checkpoint_names(poisoned: Path, command: str, file: str) -> None:
    code, err = _run(*COMMANDS[command], file)
    _one_line(code, err, "whose code is never run from a file: built by")
    assert "pass --model-module" in err and not (poisoned / "PWNED").exists()


def test_a_poisoned_copy_of_a_built_in_model_loads_its_weights_only(poisoned: Path) -> None:
    code, err = _run(*COMMANDS["score"], "poison-vae.pt")  # the detector accepts it: same weights
    assert code == 0, err
    assert len((poisoned / "s.csv").read_text().splitlines()) == 25
    model, _ = load_checkpoint(poisoned / "poison-vae.pt")
    assert isinstance(model, VAE)
    assert model_fingerprint(model) == model_fingerprint(load_model(poisoned / "model.pt"))
    assert not (poisoned / "PWNED").exists()


@pytest.mark.parametrize("file", FACTORIES)
def test_no_api_loader_runs_it(poisoned: Path, file: str) -> None:
    for loader in (load_model, load_checkpoint):
        with pytest.raises(CheckpointError, match="never run from a file"):
            loader(poisoned / file)
    model = load_model(poisoned / "model.pt")
    assert Detector.load(poisoned / "det.pt", model).method == "nll"
    assert not (poisoned / "PWNED").exists()


def test_a_detector_file_naming_code_is_refused(poisoned: Path) -> None:
    obj = torch.load(poisoned / "det.pt", weights_only=True)
    model = load_model(poisoned / "model.pt")
    edits: dict[str, dict[str, Any]] = {
        "method as a module": {"method": "os:system"},
        "callable parameter": {"method": "rose", "params": {"loss_fn": "os:system"}},
    }
    for what, edit in edits.items():
        torch.save(seal(obj | edit), poisoned / "edited.pt")
        with pytest.raises(CheckpointError, match=r"unknown detector method|loss_fn.*not a valid value"):
            Detector.load(poisoned / "edited.pt", model)
        assert not (poisoned / "PWNED").exists(), what


def test_python_dash_m_roseood_refuses_os_abort(poisoned: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "roseood", "check-model", "--model", "poison-abort.pt"],
        capture_output=True,
        text=True,
        env=env,
        cwd=poisoned,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr  # not -6: os.abort was never called
    assert "pass --model-module os:abort" in done.stderr and "Traceback" not in done.stderr


def test_a_bench_cache_model_that_names_code_is_never_run(poisoned: Path) -> None:
    ws = Workspace(root=poisoned / "bench", profile=get_profile("smoke"), progress=False)
    recipe = ws.vae("fashion_mnist")
    cached = poisoned / "bench" / "cache" / "models" / f"{recipe.name}.pt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes((poisoned / "poison-file.pt").read_bytes())
    with pytest.raises(CheckpointError, match="never run from a file"):
        ws.model(recipe)
    obj = torch.load(poisoned / "poison-vae.pt", weights_only=True)
    save_file(obj | {"train_state": {"epoch": recipe.epochs}}, cached)  # finished: loaded, not trained
    assert isinstance(ws.model(recipe), VAE)
    assert not (poisoned / "PWNED").exists()


def test_score_to_standard_output(poisoned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*COMMANDS["score"][:-3], "--out", "-", "--model", "model.pt"]) == 0
    captured = capsys.readouterr()
    rows = captured.out.splitlines()
    assert rows[0] == "index,file,label,score,ood" and len(rows) == 25
    assert "to standard output" in captured.err
