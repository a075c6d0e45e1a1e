"""docs/diffusion.md's commands at tiny size: train a diffusion model, save it as a diffusers folder,
evaluate ROSE and the diffusion detectors on that folder."""

from __future__ import annotations

import json

import numpy as np

from roseood.data import load_images
from roseood.detectors import ROSE, Detector
from roseood.models import load_model
from roseood.models.diffusion import DiffusionModel
from tests.conftest import FULL
from tests.test_cli import run, workdir  # noqa: F401 - the fixture


def test_train_export_and_evaluate_a_diffusers_folder(workdir, capsys):  # noqa: F811
    assert run(
        "train", "diffusion", "--data", "fashion_mnist", "--subset", "40", "--epochs", "1",
        "--size", "16", "--widths", "8,16", "--rose-k", "2", "--out", "diff.pt",
    ) == 0  # fmt: skip
    model = load_model("diff.pt")
    assert isinstance(model, DiffusionModel) and model.k == 2 and model.input_shape == (1, 16, 16)
    assert run("export-diffusers", "--model", "diff.pt", "--out", "diff-folder") == 0
    assert (workdir / "diff-folder" / "unet" / "config.json").is_file()
    code = run(
        "evaluate", "--model", "diff-folder", "--ood", "mnist",
        "--methods", "rose-ekfac,rose-diag,denoising,diffpath,msma",
        "--fit-samples", "12", "--stats-samples", "4", "--test-samples", "4", "--bootstrap", "0",
        "--json", "result.json", "--quiet",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    methods = ["rose-ekfac", "rose-diag", "denoising", "diffpath", "msma"]
    if FULL:  # DDPM-OOD runs 1250 UNet passes per image at its defaults (30 s here): on the fewest images
        code = run(
            "evaluate", "--model", "diff-folder", "--ood", "mnist", "--methods", "reconstruction",
            "--fit-samples", "4", "--stats-samples", "2", "--test-samples", "2", "--bootstrap", "0",
            "--json", "reconstruction.json", "--quiet",
        )  # fmt: skip
        assert code == 0, capsys.readouterr().err
        methods.append("reconstruction")
    files = ("result.json", "reconstruction.json") if FULL else ("result.json",)
    text = json.dumps([json.loads((workdir / f).read_text()) for f in files])
    for method in methods:
        assert method in text
    # --rows each: every (image, pair) row its own ROSE column, kept in the detector file
    code = run(
        "fit", "--model", "diff-folder", "--method", "rose-diag", "--rows", "each", "--layers", "mid",
        "--fit-samples", "12", "--stats-samples", "4", "--out", "rows.pt", "--quiet",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    det = Detector.load(workdir / "rows.pt", load_model("diff-folder"))
    assert isinstance(det, ROSE) and det.rows == "each"
    assert det.mean_ is not None and det.mean_.shape == (2 * len(det.layers),)
    # --rose-k / --rose-t-range: the pairs set on the model, recorded in the detector file, set again
    # when `rose score` loads it onto the folder's own (k = 2, t in [0, 1)) model, and shown
    code = run(
        "fit", "--model", "diff-folder", "--method", "rose-diag", "--layers", "mid", "--rose-k", "3",
        "--rose-t-range", "0,0.5", "--fit-samples", "12", "--stats-samples", "4", "--out", "pairs.pt",
        "--quiet",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "per-image loss: k = 3, t_min = 0.0, t_max = 0.5" in capsys.readouterr().err
    model = load_model("diff-folder")
    det = Detector.load(workdir / "pairs.pt", model)
    assert isinstance(model, DiffusionModel) and model.k == 3 and model.denoising["t_max"] == 0.5
    assert max(model.row_labels()) < 500  # the midpoints of 3 strata of [0, 0.5) of T = 1000
    code = run(
        "score", "--model", "diff-folder", "--detector", "pairs.pt", "--data", "mnist", "--subset", "3",
        "--out", "pairs.csv",
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "as the detector was fitted: k = 3, t_min = 0.0, t_max = 0.5" in captured.out
    assert "loss settings set as the detector was fitted" in captured.err
    assert run("fit", "--model", "model.pt", "--rose-k", "3", "--out", "vae.pt") == 2
    assert "this model's loss has none" in capsys.readouterr().err
    assert run("fit", "--model", "diff-folder", "--rose-t-range", "0.5,0.5", "--out", "x.pt") == 2
    assert "needs LO < HI" in capsys.readouterr().err


def test_sample_draws_a_grid_from_a_vae_and_refuses_a_model_that_cannot(workdir, capsys):  # noqa: F811
    """`rose sample` on a VAE (the workdir's tiny one) writes its PNG grid; on a Glow, one line."""
    from PIL import Image

    from roseood.models import Glow, save_model

    assert run("sample", "--model", "model.pt", "--out", "grid.png", "--images", "6") == 0
    assert "6 images drawn from the vae model" in capsys.readouterr().out
    with Image.open(workdir / "grid.png") as grid:
        assert grid.mode == "L" and min(grid.size) >= 32
    assert run("sample", "--model", "model.pt", "--out", "deeper/still/grid.png", "--images", "2") == 0
    assert (workdir / "deeper" / "still" / "grid.png").is_file()  # its folder made, as for every output
    capsys.readouterr()
    # many images: progress lines with their ETA as every long command shows them; none with -q
    assert run("sample", "--model", "model.pt", "--out", "many.png", "--images", "200") == 0
    assert "sampling 200 images: 4/4 (100 %)" in capsys.readouterr().err
    assert run("sample", "--model", "model.pt", "--out", "many2.png", "--images", "200", "-q") == 0
    assert "sampling" not in capsys.readouterr().err
    assert run("sample", "--model", "model.pt", "--out", "huge.png", "--images", "1000000000") == 2
    err = capsys.readouterr().err
    assert "draw fewer --images" in err and len(err.strip().splitlines()) == 1
    assert run("sample", "--model", "model.pt", "--out", "grid2.png", "--steps", "5") == 2
    assert "without options, not steps" in capsys.readouterr().err
    save_model(Glow(in_channels=1, levels=1, steps=1, hidden=4), workdir / "glow.pt")
    assert run("sample", "--model", "glow.pt", "--out", "glow.png") == 2
    err = capsys.readouterr().err
    assert "cannot draw images from" in err and len(err.strip().splitlines()) == 1


def test_sample_writes_an_image_set_that_scores_and_refuses_other_files_first(workdir, capsys):  # noqa: F811
    """`rose sample --out X.npz` keeps the drawn images as a set `--data` reads (the grid's images, in
    order); any other suffix is refused in one line before the model is read (it failed after the draw)."""
    from PIL import Image

    assert run("sample", "--model", "model.pt", "--out", "drawn.npz", "--images", "3") == 0
    assert run("sample", "--model", "model.pt", "--out", "drawn.png", "--images", "3") == 0
    with np.load(workdir / "drawn.npz") as f:
        assert list(f) == ["images"] and f["images"].dtype == np.uint8 and f["images"].shape == (3, 1, 32, 32)
        first = f["images"][0, 0]
    with Image.open(workdir / "drawn.png") as grid:  # the same draw: the grid's first tile
        assert np.array_equal(np.asarray(grid)[2:34, 2:34], first)
    assert np.array_equal(load_images(str(workdir / "drawn.npz")).images[0, 0], first)  # as --data reads it
    capsys.readouterr()
    for bad in ("drawn.txt", "drawn"):
        assert run("sample", "--model", "no-such-model.pt", "--out", bad) == 2
        err = capsys.readouterr().err
        assert f"--out {bad}: name a .png or .npz file" in err and len(err.strip().splitlines()) == 1
