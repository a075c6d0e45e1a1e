"""Diffusers folders and numbers read from files through the ``rose`` command (issue 34), checked like
``tests/test_cli_bad_input.py``: exit 2, exactly one ``error:`` line naming the file and field, no
traceback, every file byte-identical afterwards. ``python -m docgen.bad_input_table files`` prints the
table."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from roseood.detectors import NLL
from roseood.models import VAE, save_model
from roseood.models.diffusion import WEIGHTS, DiffusionModel, export_diffusers
from roseood.serialization import save_file as save_roseood_file
from tests.test_cli_bad_input import Case, assert_one_error_line, run_case

UNET, SCHEDULER = "unet/config.json", "scheduler/scheduler_config.json"
WEIGHT_FILE = f"unet/{WEIGHTS}.safetensors"


def _json(relative: str, key: str, value: Any) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / relative
        path.write_text(json.dumps(json.loads(path.read_text()) | {key: value}))

    return edit


def _weights(change: Callable[[dict[str, torch.Tensor]], object]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        state = load_file(folder / WEIGHT_FILE)
        change(state)
        save_file(state, folder / WEIGHT_FILE)

    return edit


def _text(relative: str, text: str) -> Callable[[Path], None]:
    def write(folder: Path) -> None:
        (folder / relative).write_text(text)

    return write


# folder name → how it differs from a good exported pipeline
FOLDERS: dict[str, Callable[[Path], object]] = {
    "size4096": _json(UNET, "sample_size", 4096),
    "size100000": _json(UNET, "sample_size", 100000),
    "size-5": _json(UNET, "sample_size", -5),
    "size-abc": _json(UNET, "sample_size", "abc"),
    "groups0": _json(UNET, "norm_num_groups", 0),
    "timesteps0": _json(SCHEDULER, "num_train_timesteps", 0),
    "json-invalid": _text("roseood.json", "{not json"),
    "json-list": _text("roseood.json", "[1, 2]"),
    "json-unknown": _text("roseood.json", '{"evil": 1}'),
    "json-ema-x": _text("roseood.json", '{"ema_decay": "x"}'),
    "json-k1e9": _text("roseood.json", '{"denoising": {"k": 1000000000}}'),
    "missing-tensor": _weights(lambda s: s.pop("conv_in.bias")),
    "extra-tensor": _weights(lambda s: s.update({"evil.weight": torch.zeros(3)})),
    "config-list": _text(UNET, "[1, 2]"),
}


def make_workdir(root: Path) -> Path:
    """A tiny diffusers pipeline and its damaged copies, a VAE with an NLL detector and re-sealed edits of
    that detector's numbers, a dataset to score."""
    data = root / "data"
    data.mkdir(parents=True)
    images = np.random.default_rng(0).integers(0, 256, (8, 28, 28), dtype=np.uint8)
    np.savez_compressed(data / "mnist_test.npz", images=images, labels=np.zeros(8, np.int64))
    torch.manual_seed(0)
    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2})
    good = export_diffusers(model, root / "good")
    for name, edit in FOLDERS.items():
        shutil.copytree(good, root / name)
        edit(root / name)
    vae = VAE(ngf=4, nz=4).eval()
    save_model(vae, root / "model.pt")
    NLL(vae).fit(np.zeros((4, 1, 32, 32), np.uint8)).save(root / "det.pt")
    det = torch.load(root / "det.pt", weights_only=True)
    for name, params in {"k1e9": {"k": 10**9}, "k-3": {"k": -3}, "seed2e70": {"seed": 2**70}}.items():
        save_roseood_file(det | {"params": det["params"] | params}, root / f"det-{name}.pt")
    return root


def _check(what: str, folder: str, message: str) -> Case:
    return Case(what, ("check-model", "--model", f"{{d}}/{folder}"), message)


def _score(what: str, detector: str, message: str) -> Case:
    args = ("score", "--model", "{d}/model.pt", "--detector", f"{{d}}/{detector}", "--data", "mnist")
    return Case(what, (*args, "--out", "{d}/s.csv"), message)


CASES = [
    _check("sample_size 4096", "size4096", "size4096/unet/config.json: sample_size must be at most 2048"),
    _check("sample_size 100000", "size100000", "unet/config.json: sample_size must be at most 2048"),
    _check("sample_size −5", "size-5", "unet/config.json: sample_size must be a positive integer, got -5"),
    _check('sample_size "abc"', "size-abc", "unet/config.json: sample_size must be a positive integer"),
    _check("norm_num_groups 0", "groups0", "unet/config.json: norm_num_groups must be a positive integer"),
    _check("num_train_timesteps 0", "timesteps0", "scheduler_config.json: num_train_timesteps must be"),
    _check("roseood.json invalid JSON", "json-invalid", "roseood.json: not valid JSON"),
    _check("roseood.json a list", "json-list", "roseood.json: must hold a JSON object, found a JSON list"),
    _check("roseood.json unknown key", "json-unknown", "roseood.json: unknown field 'evil'"),
    _check('roseood.json ema_decay "x"', "json-ema-x", "roseood.json: ema_decay must be a number, got 'x'"),
    _check("roseood.json denoising.k 10⁹", "json-k1e9", "lower denoising k"),
    _check("a weight tensor missing", "missing-tensor", "weights do not match the UNet2DModel"),
    _check("an unexpected weight tensor", "extra-tensor", "(unexpected 'evil.weight')"),
    _check(
        "unet/config.json a list", "config-list", "config.json: must hold a JSON object, found a JSON list"
    ),
    _score("detector params.k = 10⁹", "det-k1e9.pt", "k = 1000000000 (that many copies"),
    _score("detector params.k = −3", "det-k-3.pt", "k must be a positive integer, got -3"),
    _score("detector params.seed = 2**70", "det-seed2e70.pt", "seed must be < 2**32"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workdir(tmp_path_factory.mktemp("bad-files"))


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_a_bad_file_gives_one_error_line_and_touches_nothing(
    case: Case, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_one_error_line(case, workdir, monkeypatch)


def test_a_folder_without_a_scheduler_loads_with_one_stated_line(workdir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "no-scheduler"
    shutil.copytree(workdir / "good", folder)
    shutil.rmtree(folder / "scheduler")
    code, err = run_case(Case("no scheduler/", ("check-model", "--model", str(folder)), ""), tmp_path)
    assert code == 0 and err.strip().splitlines() == [
        f"{folder}: no scheduler/scheduler_config.json; using DDPMScheduler's defaults "
        "(1000 timesteps, linear betas 0.0001 to 0.02, ε prediction)"
    ]
