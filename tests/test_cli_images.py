"""Your images at their own resolution: every built-in family trains at the data's size and channels,
the checkpoint records the preprocessing, and scoring other images states the conversion in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from roseood.cli import main
from roseood.data.preprocess import Preprocessing
from roseood.models import load_model

TINY = {
    "vae": ["--ngf", "2", "--nz", "2"],
    "glow": ["--steps", "1", "--hidden", "2"],
    "pixelcnn": ["--width", "3", "--blocks", "1"],
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Preprocessing]]:
    """A colour 64×64 folder of class folders, a colour 96×96 folder and a grayscale 28×28 npz."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name, size in (("c64", 64), ("c96", 96)):
        for i in range(4):
            folder = root / name / ("cats" if i % 2 else "dogs")
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    np.savez(root / "g28.npz", images=rng.integers(0, 256, (4, 28, 28), dtype=np.uint8))
    return {
        "c64": (root / "c64", Preprocessing(3, 64)),
        "c96": (root / "c96", Preprocessing(3, 96)),
        "g28": (root / "g28.npz", Preprocessing(1, 28)),
    }


@pytest.mark.parametrize("source", ["c64", "c96", "g28"])
@pytest.mark.parametrize("kind", list(TINY))
def test_each_family_trains_at_the_datas_own_size_and_channels(
    sources, kind: str, source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, expected = sources[source]
    out = tmp_path / "m.pt"
    train = ["train", kind, "--data", str(data), "--out", str(out), "--epochs", "1", "--batch-size", "2"]
    assert main([*train, *TINY[kind], "-q"]) == 0
    err = capsys.readouterr().err
    assert f"{data}: images used as they are ({expected.describe()})" in err.splitlines()
    model = load_model(out)
    assert model.input_shape == (expected.channels, expected.size, expected.size)
    assert model.preprocessing == expected  # type: ignore[attr-defined]
    x = torch.rand(2, *model.input_shape)
    assert torch.isfinite(model.nll(x)).all()


def test_size_and_channels_can_be_overridden_and_are_stated(sources, tmp_path: Path, capsys) -> None:
    data, _ = sources["c96"]
    out = tmp_path / "m.pt"
    args = ["train", "vae", "--data", str(data), "--out", str(out), "--epochs", "1", *TINY["vae"], "-q"]
    assert main([*args, "--size", "32", "--channels", "1", "--resize", "stretch"]) == 0
    line = f"{data}: 96×96 stretched (bilinear, aspect ratio not kept) to 32×32; RGB converted to grayscale"
    assert f"{line} (luma) (32×32 grayscale, resize: stretch)" in capsys.readouterr().err.splitlines()
    assert load_model(out).preprocessing == Preprocessing(1, 32, "stretch")  # type: ignore[attr-defined]
    assert main([*args, "--size", "30", "--overwrite"]) == 2
    assert "28, 32, 48, 64, 96 or 128 (--size)" in capsys.readouterr().err


def test_scoring_images_of_another_size_states_the_conversion(sources, tmp_path: Path, capsys) -> None:
    c64, c96, g28 = (sources[k][0] for k in ("c64", "c96", "g28"))
    model, det = tmp_path / "m.pt", tmp_path / "d.pt"
    main(["train", "vae", "--data", str(c64), "--out", str(model), "--epochs", "1", *TINY["vae"], "-q"])
    fit = ["fit", "--model", str(model), "--in", str(c64), "--fit-data", str(c64), "--method", "nll"]
    assert main([*fit, "--fit-samples", "2", "--stats-samples", "2", "--out", str(det), "-q"]) == 0
    capsys.readouterr()
    score = ["score", "--model", str(model), "--detector", str(det), "--out", str(tmp_path / "s.csv")]
    assert main([*score, "--data", str(g28), "-q"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{g28}: 28×28 resized (bilinear) to 64×64; grayscale repeated to RGB (64×64 RGB, resize: crop)"
    ]
    assert main([*score, "--data", str(c64), "-q", "--overwrite"]) == 0
    assert capsys.readouterr().err == ""  # the model's own size and channels: nothing to state
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[1].startswith("0,cats/1.png,0,") and rows[3].startswith("2,dogs/0.png,1,")  # labels: folders
    report = tmp_path / "r.json"
    evaluate = [
        "evaluate",
        "--model",
        str(model),
        "--in",
        str(c64),
        "--fit-data",
        str(c64),
        "--ood",
        str(c96),
    ]
    sizes = ["--fit-samples", "2", "--stats-samples", "2", "--test-samples", "4", "--methods", "nll"]
    assert main([*evaluate, *sizes, "--bootstrap", "0", "--json", str(report), "-q"]) == 0
    settings = json.loads(report.read_text())["settings"]
    assert settings["preprocessing"] == "64×64 RGB, resize: crop"
    assert settings["conversions"] == {str(c96): "96×96 resized (bilinear) to 64×64"}
    assert f"{c96}: 96×96 resized (bilinear) to 64×64 (64×64 RGB, resize: crop)" in capsys.readouterr().err


def test_file_and_folder_names_of_any_bytes_are_written_escaped_and_lose_no_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / os.fsdecode(b"imgs\xfe")
    try:
        folder.mkdir()
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    rng = np.random.default_rng(0)
    names = [b"bad\xff.png", "é.png".encode(), b"ok.png"]
    for name in names:
        Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(folder / os.fsdecode(name))
    model, det, scores = tmp_path / "m.pt", tmp_path / "d.pt", tmp_path / "s.csv"
    data = ["--data", str(folder)]
    assert main(["train", "vae", *data, "--out", str(model), "--epochs", "1", *TINY["vae"], "-q"]) == 0
    fit = ["fit", "--model", str(model), "--in", str(folder), "--fit-data", str(folder), "--method", "nll"]
    assert main([*fit, "--fit-samples", "2", "--stats-samples", "1", "--out", str(det), "-q"]) == 0
    score = ["score", "--model", str(model), "--detector", str(det), *data, "-q"]
    assert main([*score, "--out", str(scores)]) == 0
    rows = [row.split(",") for row in scores.read_bytes().decode("utf-8").splitlines()]  # valid UTF-8
    assert [r[1] for r in rows[1:]] == ["bad\\xff.png", "ok.png", "é.png"]  # sorted by the real names
    assert all(np.isfinite(float(r[3])) for r in rows[1:])
    out = capsys.readouterr().out
    assert f"{tmp_path}/imgs\\xfe" in out
    report, results = tmp_path / "rep", tmp_path / "r.json"
    evaluate = ["evaluate", "--model", str(model), "--in", str(folder), "--fit-data", str(folder)]
    sizes = ["--methods", "nll", "--fit-samples", "2", "--stats-samples", "1", "--bootstrap", "0"]
    other = ["--ood", "noise", "--test-samples", "3", "--report", str(report), "--json", str(results)]
    assert main([*evaluate, *sizes, *other, "-q"]) == 0
    assert "imgs\\xfe" in (report / "report.md").read_bytes().decode("utf-8")
    assert json.loads(results.read_text())["settings"]["in_distribution"].startswith(f"{tmp_path}/imgs\\xfe")
    assert np.load(report / "scores.npz").files == [f"nll/{tmp_path}/imgs\\xfe", "nll/noise"]


def test_16_bit_float_and_transparent_images_are_read_by_their_range_and_stated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)
    folder = tmp_path / "mixed"
    folder.mkdir()
    Image.fromarray(x.astype(np.uint16) * 257).save(folder / "a16.png")
    Image.fromarray((x / 255).astype(np.float32)).save(folder / "b01.tif")
    Image.fromarray(np.dstack([x, x, x, np.zeros_like(x)])).save(folder / "clear.png")
    train = ["train", "vae", "--data", str(folder), "--out", str(tmp_path / "m.pt"), *TINY["vae"], "-q"]
    assert main([*train, "--epochs", "1"]) == 0
    line = (
        f"{folder}: 1 of 3 images: 16-bit read as 8-bit (high byte); 1 of 3 images: float values (0–1) "
        "scaled from 0–1 to 0–255; 1 of 3 images: alpha composited over white; 2 of 3 images: grayscale "
        "repeated to RGB (28×28 RGB, resize: crop)"
    )
    assert capsys.readouterr().err.splitlines() == [line]
    Image.fromarray(np.full((28, 28), np.nan, np.float32)).save(folder / "c.tif")
    assert main([*train, "--overwrite"]) == 2
    assert (
        capsys.readouterr().err
        == f"error: cannot read image file {folder / 'c.tif'}: its float pixels include NaN or infinity\n"
    )
