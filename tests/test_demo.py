"""``rose demo`` runs offline from the embedded assets and prints both AUROCs; ``rose demo --folders``
writes the guides' example folders from the same assets."""

import numpy as np

from roseood.cli import main
from roseood.data import load_images
from roseood.demo import FOLDERS


def test_demo_runs_from_embedded_assets(capsys, monkeypatch):
    monkeypatch.delenv("ROSEOOD_DATA", raising=False)
    # small counts run the demo's whole path (Fisher, statistics, both AUROCs) as 200 and 100 did, at a
    # third of the CPU time; the 50 statistics images are the demo's own minimum
    assert main(["demo", "--fit-samples", "40", "--test-samples", "20"]) == 0
    out = capsys.readouterr().out
    assert "40 Fashion-MNIST training images for the Fisher, 50 for layer stats" in out
    assert "NLL:" in out and "ROSE-EKFAC:" in out
    assert out.rstrip().endswith(
        "next, your own images: rose demo --folders . writes example folders of PNG files; "
        "docs/own-images.md fits on one, scores another"
    )


def test_demo_folders_are_what_the_guides_name(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ROSEOOD_DATA", raising=False)
    assert main(["demo", "--folders", str(tmp_path / "examples")]) == 0
    out = capsys.readouterr().out
    assert "clothes/: 1500 Fashion-MNIST training images" in out
    counts = {name: len(list((tmp_path / "examples" / name).iterdir())) for name in FOLDERS}
    assert counts == {"clothes": 1500, "photos": 200, "held_out_clothes": 200, "odd_images": 200}
    assert not [p for p in (tmp_path / "examples").iterdir() if p.name.startswith(".")]  # no temporaries
    photos = sorted(p.name for p in (tmp_path / "examples" / "photos").iterdir())
    assert photos[0] == "digit_000.png" and photos[-1] == "fashion_149.png"
    # the shipped sample's pixels, unchanged (28×28, as the data sets store them), and no image twice
    read = {name: load_images(str(tmp_path / "examples" / name), size=None).images for name in FOLDERS}
    assert read["clothes"].shape == (1500, 1, 28, 28)
    every = np.concatenate([images.reshape(len(images), -1) for images in read.values()])
    assert len(np.unique(every, axis=0)) == len(every)


def test_demo_folders_refuse_an_existing_folder(tmp_path, capsys):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "mine.png").write_bytes(b"")
    assert main(["demo", "--folders", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "photos exists" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in (tmp_path / "photos").iterdir()] == ["mine.png"]
    assert not (tmp_path / "clothes").exists()
