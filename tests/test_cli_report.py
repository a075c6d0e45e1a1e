"""``rose score --report`` and ``rose evaluate --report`` write an HTML page whose every image exists and
decodes, with the images' names escaped."""

from __future__ import annotations

import csv

import numpy as np
from PIL import Image

from tests.evaluation.test_html_report import checked_page, red_pixels
from tests.test_cli import run, workdir  # noqa: F401 (the fixture)

FIT = ("--fit-samples", "30", "--stats-samples", "10")


def test_score_report_shows_a_folders_most_and_least_ood_images(workdir):  # noqa: F811
    assert run("fit", "--model", "model.pt", "--method", "nll", *FIT, "--out", "det.pt", "--quiet") == 0
    folder = workdir / "imgs"
    folder.mkdir()
    names = ['<b>"x" y.png', "a&b.png", *(f"{i}.png" for i in range(4))]
    for i, name in enumerate(names):
        Image.fromarray(np.full((40, 50, 3), 40 * i, np.uint8)).save(folder / name)
    args = ("score", "--model", "model.pt", "--detector", "det.pt", "--data", str(folder), "--out", "f.csv")
    assert run(*args, "--report", "rep", "--gallery", "2", "--quiet") == 0
    page = checked_page(workdir / "rep" / "index.html")
    assert len([s for s in page.sources if s.startswith("thumbs/")]) == 4
    rows = {r["file"]: float(r["score"]) for r in csv.DictReader((workdir / "f.csv").open())}
    text = "".join(page.text)
    for name in sorted(rows, key=rows.__getitem__)[:2] + sorted(rows, key=rows.__getitem__)[-2:]:
        assert name in text  # the two least and the two most OOD files
    raw = (workdir / "rep" / "index.html").read_text()
    assert "<b>" not in raw and "&lt;b&gt;&quot;x&quot; y.png" in raw
    assert red_pixels(workdir / "rep" / "figures" / "hist_0.png") > 0
    assert run(*args, "--report", "rep", "--overwrite", "--quiet") == 0  # --overwrite replaces the page
    assert run(*args[:-1], "g.csv", "--report", "rep", "--quiet") == 2  # else it is refused
    for i, name in enumerate(("cats", "cats", "dogs")):  # a folder of class folders: a share and a
        (workdir / "pets" / name).mkdir(parents=True, exist_ok=True)  # histogram for each class
        Image.fromarray(np.full((32, 32), 60 * i, np.uint8)).save(workdir / "pets" / name / f"{i}.png")
    args = ("score", "--model", "model.pt", "--detector", "det.pt", "--data", "pets", "--out", "p.csv")
    assert run(*args, "--threshold=-1e9", "--report", "pets_rep", "--quiet") == 0
    raw = (workdir / "pets_rep" / "index.html").read_text()
    assert "<li><code>cats/</code>: 2 of 2 images (100.0%) above the threshold: OOD.</li>" in raw
    assert "<li><code>dogs/</code>: 1 of 1 images (100.0%) above the threshold: OOD.</li>" in raw


def test_evaluate_report_writes_an_html_page_beside_the_markdown(workdir):  # noqa: F811
    args = ("evaluate", "--model", "model.pt", "--ood", "mnist,noise", "--methods", "rose-diag,nll", *FIT)
    assert run(*args, "--test-samples", "20", "--bootstrap", "0", "--report", "rep", "--quiet") == 0
    page = checked_page(workdir / "rep" / "index.html")
    thumbs = [s for s in page.sources if s.startswith("thumbs/")]
    assert len(thumbs) == 2 * 3 * 2 * 8  # methods × sets × ends × --gallery default
    assert {"figures/roc_0.png", "figures/roc_1.png", "figures/hist_1.png"} <= set(page.sources)
    assert (workdir / "rep" / "report.md").exists()
    assert 'href="report.md"' in (workdir / "rep" / "index.html").read_text()


def test_a_report_never_replaces_another_commands_page_without_overwrite(workdir, capsys):  # noqa: F811
    """issue 48: evaluate refused only when report.md existed, so it wiped a page `rose score --report`
    wrote; score replaced a folder holding only thumbs/. Each output a page writes now blocks."""
    assert run("fit", "--model", "model.pt", "--method", "nll", *FIT, "--out", "det.pt", "--quiet") == 0
    score = ("score", "--model", "model.pt", "--detector", "det.pt", "--data", "mnist", "--subset", "8")
    assert run(*score, "--out", "s.csv", "--report", "rep", "--quiet") == 0
    page = (workdir / "rep" / "index.html").read_text()
    evaluate = ("evaluate", "--model", "model.pt", "--ood", "noise", "--methods", "nll", *FIT)
    assert run(*evaluate, "--test-samples", "8", "--bootstrap", "0", "--report", "rep", "--quiet") == 2
    assert "index.html exists" in capsys.readouterr().err
    assert (workdir / "rep" / "index.html").read_text() == page
    (workdir / "only").mkdir()
    (workdir / "only" / "thumbs").mkdir()
    assert run(*score, "--out", "t.csv", "--report", "only", "--quiet") == 2
    assert "thumbs exists" in capsys.readouterr().err
