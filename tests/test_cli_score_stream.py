"""`rose score` on a folder as a long job: bad files are reported and skipped, the CSV grows as it goes,
and an interrupted run resumed with --resume ends with the same CSV as one that was never interrupted."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from roseood.cli import main
from roseood.csvfiles import GrowingCsv
from roseood.models import VAE, save_model


@pytest.fixture
def scored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny VAE, a ROSE-diag detector fitted on noise-free blobs, and a folder of 23 images in which
    two files mid-folder cannot be read (one is not an image, one is a truncated PNG)."""
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    fm = np.clip((rng.random((1, 28, 28)) > 0.6) * 200 + rng.integers(0, 40, (60, 28, 28)), 0, 255)
    labels = np.zeros(60, np.int64)
    np.savez_compressed(data / "fashion_mnist_train.npz", images=fm.astype(np.uint8), labels=labels)
    monkeypatch.setenv("ROSEOOD_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    save_model(VAE(ngf=4, nz=4).eval(), tmp_path / "model.pt")
    fit = ["fit", "--model", "model.pt", "--method", "rose-diag", "--fit-samples", "30"]
    assert main([*fit, "--stats-samples", "10", "--out", "det.pt", "-q"]) == 0
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(21):
        Image.fromarray(rng.integers(0, 255, (28, 28), dtype=np.uint8)).save(folder / f"{i:02d}.png")
    (folder / "05b.png").write_bytes(b"not an image at all")
    (folder / "12b.png").write_bytes((folder / "12.png").read_bytes()[:60])
    return tmp_path


def score(*extra: str) -> int:
    base = ["score", "--model", "model.pt", "--detector", "det.pt", "--data", "imgs", "--chunk", "4"]
    return main([*base, *extra, "-q"])


def test_bad_files_mid_folder_are_one_line_each_and_scoring_goes_on(scored: Path, capsys) -> None:
    assert score("--out", "s.csv") == 0
    out, err = capsys.readouterr()
    skipped = [line for line in err.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == 2 and "05b.png" in skipped[0] and "12b.png" in skipped[1]
    assert all(line.startswith("skipped: cannot read image file ") for line in skipped)
    rows = list(csv.DictReader((scored / "s.csv").open()))
    assert len(rows) == 23 and [r["index"] for r in rows] == [str(i) for i in range(23)]
    empty = [r["file"] for r in rows if r["score"] == ""]
    assert empty == ["05b.png", "12b.png"] and all(r["ood"] == "" for r in rows if r["score"] == "")
    assert all(np.isfinite(float(r["score"])) for r in rows if r["score"] != "")
    assert "2 unreadable files skipped" in out and not (scored / "s.csv.partial").exists()


def test_an_interrupted_run_resumes_to_the_csv_of_an_uninterrupted_one(
    scored: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    assert score("--out", "whole.csv") == 0
    appended = GrowingCsv.append
    calls = []

    def interrupted(self: GrowingCsv, rows: object, mark: str | None = None) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        appended(self, rows, mark)  # type: ignore[arg-type]

    monkeypatch.setattr(GrowingCsv, "append", interrupted)
    assert score("--out", "cut.csv") == 130
    monkeypatch.setattr(GrowingCsv, "append", appended)
    assert not (scored / "cut.csv").exists()
    partial = scored / "cut.csv.partial"
    assert len(partial.read_text().splitlines()) == 1 + 8  # two chunks of 4 written before the stop
    with partial.open("a") as f:
        f.write("8,08.png,-1,0.5")  # a row cut short by the interruption: dropped on resume
    capsys.readouterr()
    assert score("--out", "cut.csv") == 2  # neither resumed nor overwritten: refused
    assert "--resume" in capsys.readouterr().err
    scoring = []
    original = GrowingCsv.append
    monkeypatch.setattr(
        GrowingCsv,
        "append",
        lambda self, rows, mark=None: (scoring.append(len(rows)), original(self, rows, mark)),
    )
    assert score("--out", "cut.csv", "--resume") == 0
    assert sum(scoring) == 23 - 8  # only the images not written yet were scored
    assert (scored / "cut.csv").read_bytes() == (scored / "whole.csv").read_bytes()
    assert not partial.exists() and not (scored / "cut.csv.partial.json").exists()


def test_resume_refuses_other_settings_or_changed_images(scored: Path, monkeypatch, capsys) -> None:
    appended = GrowingCsv.append

    def stop(self: GrowingCsv, rows: object, mark: str | None = None) -> None:
        appended(self, rows, mark)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(GrowingCsv, "append", stop)
    assert score("--out", "s.csv") == 130
    monkeypatch.setattr(GrowingCsv, "append", appended)
    capsys.readouterr()
    assert score("--out", "s.csv", "--resume", "--threshold", "0.5") == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot resume ") and "(threshold)" in errors[0]
    (scored / "imgs" / "00.png").rename(scored / "imgs" / "zz.png")
    assert score("--out", "s.csv", "--resume") == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "the images changed" in errors[0]
    assert score("--out", "s.csv", "--overwrite") == 0
    assert len(list(csv.DictReader((scored / "s.csv").open()))) == 23


def _interrupt_after_first_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    appended = GrowingCsv.append

    def stop(self: GrowingCsv, rows: object, mark: str | None = None) -> None:
        appended(self, rows, mark)  # type: ignore[arg-type]
        monkeypatch.setattr(GrowingCsv, "append", appended)
        raise KeyboardInterrupt

    monkeypatch.setattr(GrowingCsv, "append", stop)


@pytest.mark.parametrize("change", ["rewrite a file", "replace an .npz's first images"])
def test_resume_refuses_images_changed_under_the_same_names(
    scored: Path, monkeypatch: pytest.MonkeyPatch, capsys, change: str
) -> None:
    """The rows written are for the pixels read then: a file rewritten under its name (or an ``.npz``
    whose first images were replaced) is found by the digest recorded with each chunk, never resumed."""
    data = "imgs"
    if change.endswith(".npz's first images"):
        rng = np.random.default_rng(1)
        np.savez(scored / "set.npz", images=rng.integers(0, 255, (12, 28, 28), dtype=np.uint8))
        data = "set.npz"
    base = ["score", "--model", "model.pt", "--detector", "det.pt", "--data", data, "--chunk", "4"]
    _interrupt_after_first_chunk(monkeypatch)
    assert main([*base, "--out", "s.csv", "-q"]) == 130
    if data == "imgs":
        Image.fromarray(np.full((28, 28), 7, np.uint8)).save(scored / "imgs" / "01.png")
    else:
        images = np.load(scored / "set.npz")["images"]
        images[0] = 255 - images[0]
        np.savez(scored / "set.npz", images=images)
    capsys.readouterr()
    assert main([*base, "--out", "s.csv", "--resume", "-q"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "images 1–4 are not those the partial CSV was written for" in errors[0]
    assert not (scored / "s.csv").exists()


def test_resume_refuses_rows_edited_by_hand(scored: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A score changed in the partial CSV between the runs survived into the final file; the record's
    SHA-256 of the text written finds it (the length kept, so only the digest can)."""
    _interrupt_after_first_chunk(monkeypatch)
    assert score("--out", "s.csv") == 130
    partial = scored / "s.csv.partial"
    lines = partial.read_bytes().split(b"\r\n")
    cells = lines[1].split(b",")
    digit = next(i for i, c in enumerate(cells[3]) if chr(c).isdigit() and chr(c) != "9")
    cells[3] = cells[3][:digit] + b"9" + cells[3][digit + 1 :]  # one digit of the first score, same length
    partial.write_bytes(b"\r\n".join([lines[0], b",".join(cells), *lines[2:]]))
    capsys.readouterr()
    assert score("--out", "s.csv", "--resume") == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "its rows were changed since they were written" in errors[0]
    assert not (scored / "s.csv").exists()
    record = scored / "s.csv.partial.json"  # a record without a digest: an earlier roseood's, said so
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "sha256"}))
    assert score("--out", "s.csv", "--resume") == 2
    assert "no digest of its rows (written by an earlier roseood)" in capsys.readouterr().err


def test_resume_never_replaces_a_finished_output(scored: Path, capsys) -> None:
    """--resume continues a partial file; a finished CSV (with or without a partial beside it) or report
    folder is replaced only with --overwrite, and the refusal says so."""
    assert score("--out", "s.csv", "--report", "page") == 0
    before = (scored / "s.csv").read_bytes()
    capsys.readouterr()
    assert score("--out", "s.csv", "--resume") == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "--resume to" not in err
    assert score("--out", "other.csv", "--report", "page", "--resume") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (scored / "s.csv").read_bytes() == before and not (scored / "other.csv").exists()


def test_a_partial_record_claiming_more_than_its_file_is_one_line(scored: Path, capsys) -> None:
    assert score("--out", "s.csv") == 0
    (scored / "s.csv").rename(scored / "t.csv.partial")
    (scored / "t.csv.partial.json").write_text(
        '{"settings": {}, "rows": 1000000000000, "bytes": 10000000000000}'
    )
    capsys.readouterr()
    assert score("--out", "t.csv", "--resume") == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot resume") and "claims" in errors[0]
