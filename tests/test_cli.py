"""The rose command line end to end on tiny data: clear one-line errors, nothing overwritten."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
import torch

from roseood import progress
from roseood.cli import detect, main
from roseood.data import load_images
from roseood.detectors import ROSE, Detector, Ensemble
from roseood.models import VAE, Glow, load_model, save_model


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A data folder with tiny in-distribution and OOD sets, and a tiny saved VAE."""
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    blobs = (rng.random((1, 28, 28)) > 0.6) * 200
    fm = np.clip(blobs + rng.integers(0, 40, (80, 28, 28)), 0, 255).astype(np.uint8)
    np.savez_compressed(data / "fashion_mnist_train.npz", images=fm, labels=np.zeros(80, np.int64))
    np.savez_compressed(data / "fashion_mnist_test.npz", images=fm[:30], labels=np.zeros(30, np.int64))
    np.savez_compressed(data / "mnist_test.npz", images=255 - fm[:30], labels=np.zeros(30, np.int64))
    torch.manual_seed(0)
    vae = VAE(ngf=4, nz=4)
    vae.train()
    with torch.no_grad():
        vae.train_loss(torch.rand(16, 1, 32, 32))
    save_model(vae.eval(), tmp_path / "model.pt")
    monkeypatch.setenv("ROSEOOD_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str) -> int:
    return main(list(args))


def test_evaluate_writes_json_and_report(workdir, capsys):
    code = run(
        "evaluate",
        "--model",
        "model.pt",
        "--ood",
        "mnist,noise,svhn",
        "--methods",
        "rose-ekfac,rose-diag,nll",
        "--fit-samples",
        "30",
        "--stats-samples",
        "10",
        "--test-samples",
        "20",
        "--json",
        "out.json",
        "--report",
        "rep",
        "--bootstrap",
        "0",
        "--quiet",
    )
    assert code == 0
    out = json.loads((workdir / "out.json").read_text())
    assert set(out["results"]) == {"rose-ekfac", "rose-diag", "nll"}
    assert set(out["results"]["nll"]) == {"mnist", "noise"}
    assert set(out["results"]["nll"]["mnist"]) == {"auroc", "auprc", "fpr80", "fpr95"}
    assert "intervals" not in out and "intervals" not in out["settings"]  # --bootstrap 0
    assert "svhn" in out["missing"]
    assert out["settings"]["seed"] == 2021
    report = (workdir / "rep" / "report.md").read_text()
    assert "no data" in report and "roc_mnist.png" in report
    printed = capsys.readouterr().out
    assert "no data" in printed and '"machine"' not in printed  # the settings JSON only with -v
    assert printed.count(out["missing"]["svhn"]) == 1  # its reason once, not in each metric's table
    assert f"no data for svhn: {out['missing']['svhn']}" in printed


def test_fit_then_score_writes_csv(workdir, capsys, monkeypatch):
    assert (
        run(
            "fit",
            "--model",
            "model.pt",
            "--method",
            "rose-diag",
            "--fit-samples",
            "30",
            "--stats-samples",
            "10",
            "--out",
            "det.pt",
        )
        == 0
    )
    assert (
        run("score", "--model", "model.pt", "--detector", "det.pt", "--data", "mnist", "--out", "s.csv") == 0
    )
    rows = list(csv.DictReader((workdir / "s.csv").open()))
    assert list(rows[0]) == ["index", "file", "label", "score", "ood"] and len(rows) == 30
    det = Detector.load(workdir / "det.pt", load_model(workdir / "model.pt"))
    assert det.threshold_ is not None
    assert all((r["ood"] == "true") == (float(r["score"]) > det.threshold_) for r in rows)
    flagged = sum(r["ood"] == "true" for r in rows)  # the count a user reads without opening the CSV
    assert f"{flagged} of 30 images ({flagged / 30:.1%}) above the threshold: OOD." in capsys.readouterr().out
    # a run longer than the first progress line says its time first, timed on a few images, whose scores
    # it does not keep: the same CSV
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)
    monkeypatch.setattr(detect, "FORECAST_IMAGES", 4)  # 30 images: worth a forecast timed on 4
    args = ("--model", "model.pt", "--detector", "det.pt", "--data", "mnist", "--out", "s2.csv")
    assert run("score", *args) == 0
    err = capsys.readouterr().err
    assert "scoring 30 images: ≈ " in err and "timed on 4 of them" in err
    assert (workdir / "s2.csv").read_text() == (workdir / "s.csv").read_text()
    folder = workdir / "imgs"
    folder.mkdir()
    from PIL import Image

    for i in range(3):
        Image.fromarray(np.full((40, 50, 3), 40 * i, np.uint8)).save(folder / f"{i}.png")
    assert (
        run("score", "--model", "model.pt", "--detector", "det.pt", "--data", str(folder), "--out", "f.csv")
        == 0
    )
    rows = list(csv.DictReader((workdir / "f.csv").open()))
    assert [r["file"] for r in rows] == ["0.png", "1.png", "2.png"]
    args = ("--model", "model.pt", "--detector", "det.pt", "--data", str(folder), "--out", "f.csv")
    assert run("score", *args, "--threshold=-1e9", "--overwrite") == 0
    assert {r["ood"] for r in csv.DictReader((workdir / "f.csv").open())} == {"true"}
    for i, name in enumerate(("cats", "cats", "dogs")):  # a folder of class folders: each class's share
        (workdir / "pets" / name).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((32, 32), 60 * i, np.uint8)).save(workdir / "pets" / name / f"{i}.png")
    capsys.readouterr()
    args = ("--model", "model.pt", "--detector", "det.pt", "--data", "pets", "--out", "p.csv")
    assert run("score", *args, "--threshold=-1e9") == 0
    out = capsys.readouterr().out
    assert "  cats/: 2 of 2 images (100.0%) above the threshold: OOD." in out
    assert "  dogs/: 1 of 1 images (100.0%) above the threshold: OOD." in out
    assert run("score", *args[:-1], "s1.csv", "--data", "pets/@1", "--threshold=-1e9") == 0
    assert "cats/" not in capsys.readouterr().out  # a class selection: the classes it keeps


def test_fit_score_and_evaluate_an_ensemble_of_models(workdir, capsys, monkeypatch):
    torch.manual_seed(1)
    save_model(VAE(ngf=4, nz=4).eval(), workdir / "other.pt")
    models = ("--model", "model.pt", "--model", "other.pt")
    fit = ("--method", "rose-diag", "--fit-samples", "30", "--stats-samples", "10", "--out", "ens.pt")
    assert run("fit", *models, *fit) == 0
    assert "an ensemble of 2 rose-diag detectors" in capsys.readouterr().out
    assert run("score", *models, "--detector", "ens.pt", "--data", "mnist", "--out", "e.csv") == 0
    scores = [float(r["score"]) for r in csv.DictReader((workdir / "e.csv").open())]
    det = Ensemble.load(
        workdir / "ens.pt", models=[load_model(workdir / f) for f in ("model.pt", "other.pt")]
    )
    assert len(scores) == 30 and np.allclose(scores, det.score(load_images("mnist").images), rtol=1e-5)
    assert (
        run("score", "--model", "model.pt", "--detector", "ens.pt", "--data", "mnist", "--out", "o.csv") == 2
    )
    assert "needs 2 models, got 1" in capsys.readouterr().err
    swapped = ("--model", "other.pt", "--model", "model.pt", "--detector", "ens.pt", "--data", "mnist")
    assert run("score", *swapped, "--out", "o.csv") == 2
    assert "member 0 was fitted on model" in capsys.readouterr().err
    assert run("fit", "--model", "model.pt", "--model", "model.pt", *fit, "--overwrite") == 2
    assert "named twice" in capsys.readouterr().err
    sizes = ("--fit-samples", "30", "--stats-samples", "10", "--test-samples", "20", "--bootstrap", "0")
    evaluate = ("evaluate", *models, "--ensemble", "--methods", "rose-diag,nll", *sizes, "--quiet")
    assert run(*evaluate, "--ood", "mnist", "--json", "a.json", "--cache", "cache") == 0
    loaded = []  # a second run with one more OOD set loads the fitted ensembles from the cache
    from_file = Ensemble.from_file
    monkeypatch.setattr(
        Ensemble,
        "from_file",
        lambda obj, path, model, **k: loaded.append(model) or from_file(obj, path, model, **k),
    )
    assert run(*evaluate, "--ood", "mnist,noise", "--json", "b.json", "--cache", "cache") == 0
    assert len(loaded) == 2 and all(len(m) == 2 for m in loaded)  # rose-diag and nll, each over 2 models
    first, second = (json.loads((workdir / f).read_text()) for f in ("a.json", "b.json"))
    assert first["settings"]["model"] == "ensemble of 2 vae" and set(first["results"]) == {"rose-diag", "nll"}
    assert {m: r["mnist"] for m, r in second["results"].items()} == {
        m: r["mnist"] for m, r in first["results"].items()
    }
    assert run("evaluate", "--model", "model.pt", "--ensemble", *sizes) == 2
    assert "--ensemble needs two or more --model" in capsys.readouterr().err


def test_fit_with_an_aggregation_and_an_adjustment_saves_them(workdir):
    args = ["--model", "model.pt", "--method", "rose-diag", "--fit-samples", "30", "--stats-samples", "10"]
    assert run("fit", *args, "--aggregate", "log-z:p=2", "--adjust", "both", "--out", "det.pt") == 0
    det = Detector.load(workdir / "det.pt", load_model(workdir / "model.pt"))
    assert isinstance(det, ROSE) and det.aggregate == "log-z:p=2" and det.adjust == "both"
    assert det.aggregation_.params() == {"beta": 0.0, "p": 2.0, "ties": "keep"}
    assert det.trend_.coef_ is not None and det.trend_.coef_.shape == (4, len(det.layers))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("evaluate", "--model", "missing.pt"), "no such file"),
        (("evaluate", "--model", "model.pt", "--in", "imagenet"), "neither a known dataset"),
        (("fit", "--model", "model.pt", "--in", "imagenet", "--out", "d.pt"), "neither a known dataset"),
        (("evaluate", "--model", "model.pt", "--methods", "magic"), "unknown method"),
        (("evaluate", "--model", "model.pt", "--cache", "model.pt"), "is also an input"),
        (("fit", "--model", "model.pt", "--aggregate", "median", "--out", "d.pt"), "unknown aggregation"),
        (("fit", "--model", "model.pt", "--rows", "each", "--out", "d.pt"), "one row per image"),
        (
            ("score", "--model", "model.pt", "--detector", "model.pt", "--data", "mnist", "--out", "x.csv"),
            "expected a roseood-detector",
        ),
        (("evaluate", "--model", "model.pt", "--ood", "nothere.npz", "--fit-samples", "10"), "nothere"),
    ],
)
def test_bad_input_is_one_clear_line(workdir, capsys, args, message):
    assert run(*args) == 2
    err = capsys.readouterr().err  # besides the error, lines stating a conversion of the images
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in err


def test_detector_for_another_model_is_refused(workdir, capsys):
    run(
        "fit",
        "--model",
        "model.pt",
        "--method",
        "nll",
        "--fit-samples",
        "10",
        "--stats-samples",
        "2",
        "--out",
        "det.pt",
    )
    save_model(VAE(ngf=4, nz=4), workdir / "other.pt")
    assert (
        run("score", "--model", "other.pt", "--detector", "det.pt", "--data", "mnist", "--out", "x.csv") == 2
    )
    assert "fitted on model" in capsys.readouterr().err
    assert not (workdir / "x.csv").exists()


def test_train_refuses_to_overwrite_and_resumes(workdir, capsys):
    args = ("train", "vae", "--subset", "32", "--epochs", "1", "--ngf", "4", "--nz", "4", "--out", "t.pt")
    assert run(*args) == 0
    before = (workdir / "t.pt").read_bytes()
    assert run(*args) == 2 and "--resume" in capsys.readouterr().err
    assert (workdir / "t.pt").read_bytes() == before
    longer = ("train", "vae", "--subset", "32", "--epochs", "2", "--ngf", "4", "--nz", "4", "--out", "t.pt")
    assert run(*longer, "--resume") == 0
    assert load_model(workdir / "t.pt").config()["ngf"] == 4


def test_train_held_out_images_are_the_test_split_of_the_classes_it_trains_on(tmp_path, capsys):
    """``--data fashion_mnist@1 --held-out N`` holds out test images of class 1 alone (two here, so a third
    is refused); a source naming the test split is refused, since it would hold out what it trains on."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("test", 10)):
        images = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8)
        np.savez(tmp_path / f"fashion_mnist_{split}.npz", images=images, labels=np.arange(n) % 5)
    base = ("train", "vae", "--epochs", "1", "--ngf", "4", "--nz", "4", "--data-dir", str(tmp_path), "-q")
    assert run(*base, "--data", "fashion_mnist@1", "--held-out", "2", "--out", str(tmp_path / "a.pt")) == 0
    assert run(*base, "--data", "fashion_mnist@1", "--held-out", "3", "--out", str(tmp_path / "b.pt")) == 2
    assert "the test split of fashion_mnist@1 has 2" in capsys.readouterr().err
    assert run(*base, "--data", "fashion_mnist:test", "--held-out", "2", "--out", str(tmp_path / "c.pt")) == 2
    assert "could overlap the training images" in capsys.readouterr().err


def test_import_vae_refuses_to_overwrite(workdir, capsys):
    (workdir / "exists.pt").write_bytes(b"keep")
    assert run("import-vae", "--encoder", "a", "--decoder", "b", "--out", "exists.pt") == 2
    assert (workdir / "exists.pt").read_bytes() == b"keep"


def test_evaluate_works_for_glow_with_layer_sets(workdir):
    torch.manual_seed(0)
    glow = Glow(in_channels=1, image_size=32, levels=2, steps=2, hidden=8)
    glow.train()
    with torch.no_grad():
        glow.train_loss(torch.rand(16, 1, 32, 32))
    save_model(glow.eval(), workdir / "glow.pt")
    code = run(
        "evaluate",
        "--model",
        "glow.pt",
        "--ood",
        "mnist",
        "--methods",
        "rose-ekfac,rose-diag,nll",
        "--layers",
        "invconv",
        "--fit-samples",
        "20",
        "--stats-samples",
        "8",
        "--test-samples",
        "10",
        "--json",
        "g.json",
        "--quiet",
    )
    assert code == 0
    out = json.loads((workdir / "g.json").read_text())
    assert out["settings"]["model"] == "glow" and set(out["results"]) == {"rose-ekfac", "rose-diag", "nll"}
    assert "1000 resamples" in out["settings"]["intervals"]  # --bootstrap defaults to 1000
    for method, per_set in out["results"].items():
        for metric, value in per_set["mnist"].items():
            low, high = out["intervals"][method]["mnist"][metric]
            assert low <= value <= high, (method, metric)
    assert run("evaluate", "--model", "glow.pt", "--ood", "mnist", "--layers", "encoder", "--quiet") == 2


def test_pixelcnn_trains_with_a_background_and_every_likelihood_method_runs(workdir):
    arch = ("--subset", "32", "--epochs", "1", "--width", "4", "--blocks", "1")
    assert run("train", "pixelcnn", *arch, "--out", "p.pt") == 0
    assert run("train", "pixelcnn", *arch, "--perturb", "random:0.3", "--out", "bg.pt") == 0
    assert load_model(workdir / "p.pt").config()["width"] == 4
    methods = "rose-ekfac,nll,lratio,ic-png"
    code = run(
        "evaluate",
        "--model",
        "p.pt",
        "--background",
        "bg.pt",
        "--ood",
        "mnist",
        "--methods",
        methods,
        "--layers",
        "last",
        "--fit-samples",
        "20",
        "--stats-samples",
        "8",
        "--test-samples",
        "10",
        "--json",
        "p.json",
        "--bootstrap",
        "0",
        "--quiet",
    )
    assert code == 0
    out = json.loads((workdir / "p.json").read_text())
    assert out["settings"]["model"] == "pixelcnn" and set(out["results"]) == set(methods.split(","))


USER_MODEL = """
import torch
from torch import nn
import roseood


def build():
    net = nn.Sequential(nn.Conv2d(1, 2, 4, 4), nn.Flatten(), nn.Linear(2 * 8 * 8, 3), nn.LayerNorm(3))
    return roseood.wrap(net, lambda x: net(x).pow(2).sum(1), layers=["0", "2"], input_shape=(1, 32, 32))


def tokens():
    net = nn.Sequential(nn.Linear(4, 1))
    return roseood.wrap(net, lambda x: net(x.float())[:, 0], input_kind="tokens", input_shape=(4,))
"""


def test_model_module_fits_scores_and_checks_a_user_model(workdir, capsys):
    (workdir / "user.py").write_text(USER_MODEL)
    torch.manual_seed(0)
    common = ("--model-module", "user.py:build", "--fit-samples", "20", "--stats-samples", "8")
    assert run("fit", *common, "--method", "rose-kfac", "--out", "det.pt") == 0
    assert (
        run(
            "score",
            "--model-module",
            "user.py:build",
            "--detector",
            "det.pt",
            "--data",
            "mnist",
            "--out",
            "s.csv",
        )
        == 2
    )
    assert "fitted on model" in capsys.readouterr().err  # a fresh build() has other random weights
    from roseood.models import load_factory

    torch.save(load_factory("user.py:build").state_dict(), workdir / "w.pt")  # plain weights file
    assert run("fit", *common, "--model", "w.pt", "--out", "det2.pt") == 0
    args = ("score", "--model-module", "user.py:build", "--model", "w.pt", "--detector", "det2.pt")
    assert run(*args, "--data", "mnist", "--out", "s.csv") == 0
    assert len((workdir / "s.csv").read_text().splitlines()) == 31
    assert run("check-model", "--model-module", "user.py:build") == 0
    out = capsys.readouterr().out
    # layer, type, handler, params, usable, the layer sets it is in
    assert "layer sets for --layers, the first the default: default (2);" in out
    assert re.search(r"^0 +Conv2d +\S+ +\d+ +yes +default$", out, re.M), out
    assert re.search(r"^3 +LayerNorm +norm-affine +6 +yes +-$", out, re.M), out
    assert run("fit", "--model-module", "user.py:tokens", "--out", "t.pt") == 2
    assert "takes tokens inputs, not images" in capsys.readouterr().err
    assert run("fit", "--out", "t.pt") == 2
    assert "--model-module" in capsys.readouterr().err


def test_train_module_trains_a_user_model_that_loads_back_with_its_module(workdir, capsys):
    (workdir / "user.py").write_text(USER_MODEL)
    args = ("train", "module", "--model-module", "user.py:build", "--subset", "16", "--epochs", "1")
    assert run(*args, "--out", "u.pt") == 0
    assert load_model(workdir / "u.pt", model_module="user.py:build").rose_layers() == ["0", "2"]
    assert run("check-model", "--model", "u.pt") == 2  # the file names its code but never runs it
    assert "pass --model-module" in capsys.readouterr().err
    checked = run("check-model", "--model", "u.pt", "--model-module", "user.py:build")
    assert checked == 0 and "of 3 parameterised layers" in capsys.readouterr().out


def test_evaluate_several_models_reports_their_spread(workdir, capsys):
    torch.manual_seed(1)
    save_model(VAE(ngf=4, nz=4).eval(), workdir / "other.pt")
    common = ["--ood", "mnist", "--methods", "rose-diag,nll", "--fit-samples", "30", "--stats-samples"]
    common += ["10", "--test-samples", "20", "--bootstrap", "0", "--quiet"]
    code = run(
        "evaluate", "--model", "model.pt", "--model", "other.pt", *common, "--json", "o.json", "--report", "r"
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "=== model model (model.pt) ===" in printed and "=== model other (other.pt) ===" in printed
    assert "AUROC across 2 models: mean ± sd (min–max)" in printed
    out = json.loads((workdir / "o.json").read_text())
    assert set(out["models"]) == {"model", "other"}
    per_model = [out["models"][m]["results"]["nll"]["mnist"]["auroc"] for m in ("model", "other")]
    cell = out["across_models"]["nll"]["mnist"]["auroc"]
    assert cell["n"] == 2 and cell["mean"] == pytest.approx(np.mean(per_model))
    assert (cell["min"], cell["max"]) == (min(per_model), max(per_model))
    assert (workdir / "r" / "report.md").exists() and (workdir / "r" / "other" / "report.md").exists()
    # the same checkpoint twice is a mistake, said before any work
    assert run("evaluate", "--model", "model.pt", "--model", "model.pt", *common) == 2
    assert "a model is named twice" in capsys.readouterr().err
    # a bad second model is refused before the first is evaluated (not after its hours of work)
    assert run("evaluate", "--model", "model.pt", "--model", "missing.pt", *common) == 2
    out = capsys.readouterr()
    assert "missing.pt: no such file" in out.err and "=== model" not in out.out


def test_evaluate_resumes_from_its_cache(workdir, monkeypatch):
    """A several-model run that died after its first model: the re-run fits and scores that model no
    more, and its numbers are the first run's."""
    torch.manual_seed(1)
    save_model(VAE(ngf=4, nz=4).eval(), workdir / "other.pt")
    common = ["--ood", "mnist", "--methods", "rose-diag,nll", "--fit-samples", "30", "--stats-samples"]
    common += ["10", "--test-samples", "20", "--bootstrap", "0", "--quiet", "--cache", "c"]
    assert run("evaluate", "--model", "model.pt", *common, "--json", "one.json") == 0
    assert any((workdir / "c" / "detectors").iterdir()) and any((workdir / "c" / "scores").iterdir())
    fitted: list[str] = []
    real_fit = ROSE.fit_fisher

    def counted(self, x, fishers=None):
        if fishers is None:  # a fit, not Fishers taken
            fitted.append("rose")
        return real_fit(self, x, fishers)

    monkeypatch.setattr(ROSE, "fit_fisher", counted)
    args = ["evaluate", "--model", "model.pt", "--model", "other.pt", *common, "--json", "two.json"]
    assert run(*args) == 0
    assert fitted == ["rose"]  # other.pt only
    one = json.loads((workdir / "one.json").read_text())["results"]
    two = json.loads((workdir / "two.json").read_text())["models"]["model"]["results"]
    assert two == one


def test_nll_fit_and_score_repeat_run_to_run(workdir):
    """The VAE's NLL samples its latent per image from the detector's seed: the threshold and every
    score are the same in each run (they differed in the fourth digit before, issue 30)."""
    fit = ("fit", "--model", "model.pt", "--method", "nll", "--seed", "3", "--fit-samples", "20")
    score = ("score", "--model", "model.pt", "--data", "mnist", "--chunk", "7")
    for i, global_seed in enumerate((0, 1)):
        torch.manual_seed(global_seed)
        assert run(*fit, "--out", f"nll{i}.pt") == 0
        assert run(*score, "--detector", f"nll{i}.pt", "--out", f"s{i}.csv") == 0
    thresholds = [torch.load(f"nll{i}.pt", weights_only=True)["threshold"] for i in (0, 1)]
    assert thresholds[0] is not None and thresholds[0] == thresholds[1]
    assert (workdir / "s0.csv").read_text() == (workdir / "s1.csv").read_text()


def _folder(path, count: int, shade: int) -> str:
    """A folder of ``count`` small colour PNGs around ``shade``, named 00.png, 01.png, ..."""
    from PIL import Image

    path.mkdir()
    rng = np.random.default_rng(shade)
    for i in range(count):
        pixels = np.clip(shade + rng.integers(-30, 30, (24, 24, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(path / f"{i:02d}.png")
    return str(path)


def test_evaluate_on_own_folders_writes_decisions_and_a_detector_for_score(workdir, capsys):
    """One command from folders to decisions: --in a folder is split at random (stated in one line), every
    test image gets its score and decision at the calibrated threshold, and the saved detector scores
    as evaluate did."""
    mine, other = _folder(workdir / "mine", 40, 90), _folder(workdir / "other", 10, 200)
    sizes = ["--fit-samples", "20", "--stats-samples", "10", "--test-samples", "10", "--bootstrap", "0"]
    args = ["evaluate", "--model", "model.pt", "--in", mine, "--ood", other, "--methods", "rose-diag", *sizes]
    assert run(*args, "-q", "-v", "--scores", "d.csv", "--save-detector", "det.pt") == 0
    out, err = capsys.readouterr()
    assert '"in_distribution"' in out  # -v: every setting
    # 40 images: a fifth (8) to test, then half of the other 32 at most (10) held out
    assert "40 images split at random (seed 2021): 22 to fit, 10 held out" in err and "8 to test" in err
    rows = list(csv.DictReader((workdir / "d.csv").open()))
    assert list(rows[0]) == ["method", "set", "index", "file", "label", "score", "ood"]
    test_rows, ood_rows = [r for r in rows if r["set"] == mine], [r for r in rows if r["set"] == other]
    assert len(test_rows) == 8 and [r["file"] for r in ood_rows] == [f"{i:02d}.png" for i in range(10)]
    det = Detector.load(workdir / "det.pt", load_model(workdir / "model.pt"))
    assert det.threshold_ is not None
    assert all((r["ood"] == "true") == (float(r["score"]) > det.threshold_) for r in rows)
    for name, part in ((mine, test_rows), (other, ood_rows)):  # each set's share, said without the CSV
        n = sum(r["ood"] == "true" for r in part)
        assert f"  rose-diag, {name}: {n} of {len(part)} images ({n / len(part):.1%}) above the" in out
    assert run("score", "--model", "model.pt", "--detector", "det.pt", "--data", other, "--out", "s.csv") == 0
    scored = list(csv.DictReader((workdir / "s.csv").open()))
    assert [(r["file"], r["score"], r["ood"]) for r in scored] == [
        (r["file"], r["score"], r["ood"]) for r in ood_rows
    ]
    # rose fit takes the folder too (30 of its images, none to test); two methods are not one detector
    fit = ["fit", "--model", "model.pt", "--in", mine, *sizes[:4], "--method", "nll"]
    assert run(*fit, "--out", "n.pt") == 0
    assert "30 images split at random (seed 2021): 20 to fit, 10 held out" in capsys.readouterr().err
    assert run(*args, "--methods", "rose-diag,nll", "--save-detector", "two.pt") == 2
    assert "--save-detector saves one detector" in capsys.readouterr().err


def test_a_colour_model_is_told_its_data_and_a_zoo_model_knows_its_own(workdir, capsys):
    """Without --in, the default (fashion_mnist, grayscale) is refused for an RGB model in one line, before
    any work; a zoo model's name gives its training data."""
    import argparse

    from roseood.cli.common import in_data_arg

    save_model(VAE(in_channels=3, ngf=4, nz=4).eval(), workdir / "rgb.pt")
    args = ["--model", "rgb.pt", "--method", "nll", "--fit-samples", "8", "--stats-samples", "4"]
    assert run("fit", *args, "--out", "d.pt") == 2
    err = capsys.readouterr().err
    assert "name the model's in-distribution data with --in" in err and "3-channel" in err
    assert not (workdir / "d.pt").exists()
    rgb = VAE(in_channels=3, ngf=4, nz=4)
    zoo = argparse.Namespace(in_data=None, model="ddpm-cifar10-s0")
    assert in_data_arg(zoo, rgb) == "cifar10"
    assert in_data_arg(argparse.Namespace(in_data=None, model=["ddpm-fmnist-s1"]), rgb) == "fashion_mnist"
    assert in_data_arg(argparse.Namespace(in_data="svhn", model="ddpm-cifar10-s0"), rgb) == "svhn"
    gray = VAE(ngf=4, nz=4)
    assert in_data_arg(argparse.Namespace(in_data=None, model="model.pt"), gray) == "fashion_mnist"
    own = argparse.Namespace(in_data=None, fit_data="photos/", model="rgb.pt")
    assert in_data_arg(own, rgb) == "photos/"  # the user's own images are the in-distribution


@pytest.mark.parametrize("under_torchrun", [False, True])
def test_the_console_command_exits_with_mains_status_and_skips_teardown_under_torchrun(
    monkeypatch: pytest.MonkeyPatch, under_torchrun: bool
) -> None:
    """``rose`` (``roseood.cli.run``) exits with ``main()``'s status; a torchrun process leaves by
    ``os._exit`` after flushing, past the interpreter exit where gloo's threads can abort."""
    import roseood.cli as cli

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setenv("WORLD_SIZE", "2" if under_torchrun else "1")  # what torchrun sets
    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    with pytest.raises(Exited if under_torchrun else SystemExit) as caught:
        cli.run()
    assert caught.value.args[0] == 3 if under_torchrun else caught.value.code == 3


def test_fit_and_evaluate_take_the_model_familys_method_when_none_is_named(workdir, capsys):
    """A Glow's default is rose-gmm-all (the near-OOD bench's verdict), said in one line by `rose fit`;
    `rose evaluate` puts it before rose-ekfac, rose-diag and nll; a VAE's is the paper's rose-ekfac."""
    from roseood.detectors import ROSE

    torch.manual_seed(0)
    save_model(Glow(in_channels=1, image_size=32, levels=1, steps=1, hidden=4).eval(), workdir / "glow.pt")
    args = ("--model", "glow.pt", "--fit-samples", "40", "--stats-samples", "30")
    assert run("fit", *args, "--out", "det.pt", "--quiet") == 0
    assert "--method rose-gmm-all: the default for this kind of model" in capsys.readouterr().err
    det = Detector.load(workdir / "det.pt", load_model(workdir / "glow.pt"))
    assert (
        isinstance(det, ROSE)
        and det.features == "layers,stats,complexity"
        and det.aggregate.startswith("gmm")
    )
    code = run(
        "evaluate", *args, "--ood", "mnist", "--test-samples", "10", "--bootstrap", "0", "--json", "r.json"
    )
    assert code == 0, capsys.readouterr().err
    methods = list(json.loads((workdir / "r.json").read_text())["results"])
    assert methods == ["rose-gmm-all", "rose-ekfac", "rose-diag", "nll"]
    vae = ("--model", "model.pt", "--fit-samples", "40", "--stats-samples", "30")
    assert run("fit", *vae, "--out", "vae-det.pt", "--quiet") == 0
    assert "--method rose-ekfac: the default for this kind of model" in capsys.readouterr().err


# -- the compression check beyond rose evaluate (issue 73) --------------------------------------------


@pytest.fixture
def stored(workdir):
    """A colour VAE and photo-like sets stored three ways: decoded JPEG (quality 75), lossless, and one
    whose first half (the images fitted on) is JPEG and second half (held out) lossless."""
    from roseood.data.jpeg import JpegHistory
    from tests.data.test_data_jpeg import photos

    q75 = JpegHistory(75)
    np.savez(workdir / "jpeg.npz", images=q75.apply(photos(40, seed=1)))
    np.savez(workdir / "lossless.npz", images=photos(24, seed=2))
    np.savez(
        workdir / "mixed.npz", images=np.concatenate([q75.apply(photos(20, seed=3)), photos(20, seed=4)])
    )
    torch.manual_seed(0)
    save_model(VAE(in_channels=3, ngf=4, nz=4).eval(), workdir / "rgb.pt")
    return ("--model", "rgb.pt", "--method", "nll", "--fit-samples", "20", "--stats-samples", "20", "-q")


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning")]


def test_fit_records_how_its_images_were_stored_and_score_warns_of_images_stored_otherwise(
    workdir, stored, capsys
):
    """The detector file holds its fit images' JPEG history; `rose score` checks the images it scores
    against it as `rose evaluate` checks OOD sets: one warning line naming the suffix that matches them,
    none once they are matched."""
    from roseood.data.jpeg import JpegHistory

    assert run("fit", *stored, "--fit-data", "jpeg.npz", "--out", "det.pt") == 0
    assert _warnings(capsys.readouterr().err) == []
    det = Detector.load(workdir / "det.pt", load_model(workdir / "rgb.pt"))
    assert det.fit_storage_ is not None and det.fit_storage_.name == "jpeg.npz"
    assert det.fit_storage_.history == JpegHistory(75, "4:2:0") and 0 <= det.fit_storage_.change <= 1
    score = ("score", "--model", "rgb.pt", "--detector", "det.pt", "-q")
    assert run(*score, "--data", "lossless.npz", "--out", "s.csv") == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line.startswith("warning: lossless.npz: not stored like the detector's fit images (jpeg.npz)")
    assert "decoded JPEG (quality 75, 4:2:0)" in line and line.endswith("--data lossless.npz+jpeg75")
    assert len(list(csv.DictReader((workdir / "s.csv").open()))) == 24  # warned, still scored
    assert run(*score, "--data", "lossless.npz+jpeg75", "--out", "m.csv") == 0
    assert run(*score, "--data", "jpeg.npz", "--out", "j.csv") == 0
    assert _warnings(capsys.readouterr().err) == []


def test_fit_warns_where_its_held_out_images_were_stored_unlike_those_it_fits_on(workdir, stored, capsys):
    """The threshold is set on the held-out images: stored otherwise than the fitted ones, one line says
    so and how to put the whole fit set through one round-trip."""
    assert run("fit", *stored, "--fit-data", "mixed.npz", "--out", "det.pt") == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line.startswith(
        "warning: the 20 held-out images of mixed.npz: not stored like the 20 images it is fitted on"
    )
    assert line.endswith("--fit-data mixed.npz+jpeg75")


def test_a_detector_file_without_the_record_loads_and_score_says_so_in_one_line(workdir, stored, capsys):
    """A file written before the record existed loads and scores, with one line that its fit images'
    history is unknown; a damaged record is refused in one line naming the field."""
    from roseood.detectors.files import DETECTOR_FORMAT
    from roseood.serialization import safe_load, save_file

    assert run("fit", *stored, "--fit-data", "jpeg.npz", "--out", "det.pt") == 0
    obj = safe_load(workdir / "det.pt", DETECTOR_FORMAT)
    save_file({k: v for k, v in obj.items() if k != "fit_storage"}, workdir / "old.pt")
    assert Detector.load(workdir / "old.pt", load_model(workdir / "rgb.pt")).fit_storage_ is None
    capsys.readouterr()
    score = ("score", "--model", "rgb.pt", "--data", "lossless.npz", "-q")
    assert run(*score, "--detector", "old.pt", "--out", "s.csv") == 0
    err = capsys.readouterr().err
    assert _warnings(err) == [] and err.count("records no compression history of its fit images") == 1
    save_file(
        obj | {"fit_storage": {"name": "x", "jpeg": {"quality": 101}, "change": 0.0}}, workdir / "bad.pt"
    )
    assert run(*score, "--detector", "bad.pt", "--out", "b.csv") == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert "bad.pt: field 'fit_storage'" in error


# -- outputs that would block (issue 73) ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["fit", "score"])
def test_an_out_that_is_a_fifo_is_refused_in_one_line_before_any_work(workdir, capsys, command):
    """A FIFO with no reader blocked the write forever (issue 73); now refused before the model loads
    (the detector named does not even exist). An alarm fails the test instead of hanging it."""
    import os
    import signal

    os.mkfifo(workdir / "pipe")

    def hung(*_: object) -> None:
        raise TimeoutError(f"rose {command} --out pipe blocked")

    args = {"fit": ("--method", "nll"), "score": ("--detector", "none.pt", "--data", "mnist")}[command]
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        code = run(command, "--model", "model.pt", *args, "--out", "pipe")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines() == [
        "error: pipe exists and is not a regular file (a FIFO, a device or a socket); name a file for this "
        "output, or - for standard output where the command takes it"
    ]


def test_bench_says_in_one_line_where_the_research_experiments_run(capsys):
    """The experiments beyond the paper are not installed: `rose bench NAME` names the command that runs
    NAME from a checkout, and `rose bench --list` says in one line where they are."""
    assert main(["bench", "near-ood", "--profile", "smoke"]) == 2
    assert capsys.readouterr().err == (
        "error: near-ood: beyond the paper, not in rose bench; from a checkout of the repository run "
        "python -m research near-ood\n"
    )
    assert main(["bench", "--list"]) == 0
    paper, _, research = capsys.readouterr().out.partition("beyond the paper (")
    assert "table2" in paper and "near-ood" not in paper and "python -m research" in research


def test_datasets_lists_every_named_set_and_how_a_name_is_written(tmp_path, capsys):
    """`rose datasets`: each set with its files' state, then the forms a name takes (a split, classes,
    a JPEG history), each of which the loader reads."""
    from roseood.data import DATASETS

    assert run("datasets", "--data-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"data directory: {tmp_path}" and len(out) == len(DATASETS) + 3
    # a file roseood can fetch says so; one placed by hand is missing
    assert "fashion_mnist  train: download, test: download" in out[1] and "generated" in out[-3]
    assert next(line for line in out if line.startswith("  lsun ")).split()[1:3] == ["test:", "missing"]
    assert out[-2].startswith("download: fetched on first use; missing: its file placed by hand")
    forms = re.findall(r"NAME(\S+)", out[-1])
    assert forms == [":train", "@7", "+jpeg75"]
    images, labels = np.zeros((8, 28, 28), np.uint8), np.arange(8)
    np.savez_compressed(tmp_path / "mnist_train.npz", images=images, labels=labels)
    loaded = load_images("mnist" + "".join(forms), data_dir=tmp_path)
    assert loaded.name == "mnist:train@7+jpeg75" and list(loaded.labels) == [7]
