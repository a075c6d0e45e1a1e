"""The HTML pages of ``rose score --report`` and ``rose evaluate --report``: every image they show exists
and decodes, names are escaped, the threshold is drawn."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from PIL import Image

from roseood.evaluation.gallery import extremes
from roseood.evaluation.html_report import (
    display_name,
    evaluation_thresholds,
    write_evaluation_page,
    write_score_page,
)
from roseood.evaluation.plots import plot_score_histograms
from roseood.evaluation.result import EvaluationResult

NASTY = ['<script>alert("x")</script>.png', "a&b 'c'.png", "bad\udcff.png"]  # the last: a non-UTF-8 byte


class Page(HTMLParser):
    """The image sources and the visible text of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.sources: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.sources.append(dict(attrs)["src"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def checked_page(path: Path) -> Page:
    """Parse ``path``, then open every image it shows (relative to its folder) with Pillow."""
    page = Page(path.read_text(encoding="utf-8"))
    assert page.sources
    for src in page.sources:
        file = path.parent / src
        assert file.resolve().is_relative_to(path.parent.resolve()), src
        with Image.open(file) as img:
            img.load()
            assert img.format == "PNG" and min(img.size) > 0
    return page


def red_pixels(path: Path) -> int:
    """Pixels of the pure red the threshold line is drawn in."""
    rgb = np.asarray(Image.open(path).convert("RGB")).astype(int)
    return int(np.sum((rgb[..., 0] >= 230) & (rgb[..., 1] <= 40) & (rgb[..., 2] <= 40)))


def test_extremes_ranks_by_score_and_reads_only_what_it_keeps():
    scores = np.array([0.5, 3.0, np.nan, -1.0, 3.0, 2.0])
    reads: list[int] = []

    def read(i: int) -> np.ndarray:
        reads.append(i)
        return np.full((1, 4, 4), i, np.uint8)

    shown = extremes(scores, read, [f"f{i}" for i in range(6)], k=2)
    assert [e.index for e in shown.most] == [1, 4]  # ties in the set's order
    assert [e.index for e in shown.least] == [3, 0]
    assert [e.name for e in shown.most] == ["f1", "f4"] and shown.least[0].score == -1.0
    assert sorted(reads) == [0, 1, 3, 4]  # NaN left out; nothing else read
    assert shown.most[0].image[0, 0, 0] == 1
    assert [e.name for e in extremes(scores, read, None, k=1).most] == ["#1"]


def test_threshold_line_is_drawn(tmp_path):
    scores = {"set": np.random.default_rng(0).normal(size=200)}
    with_line = plot_score_histograms(scores, tmp_path / "a.png", "t", threshold=0.5)
    without = plot_score_histograms(scores, tmp_path / "b.png", "t")
    assert red_pixels(with_line) > 50 and red_pixels(without) == 0


def test_score_page_shows_every_image_with_escaped_names(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (6, 3, 20, 20), dtype=np.uint8)
    scores = np.array([1.0, 5.0, 0.5, 2.0, 4.0, 3.0])
    files = [*NASTY, "d.png", "e.png", "f.png"]
    shown = extremes(scores, images.__getitem__, files, k=2)
    page_path = write_score_page(
        tmp_path / "rep",
        scores,
        shown,
        method="rose-ekfac",
        data_name="my <folder>",
        source="/x/my <folder>",
        threshold=2.5,
        csv="s.csv",
    )
    page = checked_page(page_path)
    raw = page_path.read_text(encoding="utf-8")
    assert "<script>" not in raw and "&lt;script&gt;" in raw and "&lt;folder&gt;" in raw
    assert "script" not in page.tags
    text = "".join(page.text)
    assert display_name(NASTY[2]) == "bad\\xff.png" and "bad\\xff.png" in text  # shown, not dropped
    assert NASTY[0] in text and "3 of 6 images (50.0%) above the threshold" in text
    assert len([s for s in page.sources if s.startswith("thumbs/")]) == 4
    assert raw.count('class="ood"') == 2  # the two most OOD are above 2.5, the two least below
    assert red_pixels(page_path.parent / "figures" / "hist_0.png") > 0


def test_evaluation_page_has_roc_curves_histograms_and_galleries(tmp_path):
    rng = np.random.default_rng(1)
    sets = {"in": rng.normal(0, 1, 40), "far & <away>": rng.normal(3, 1, 30)}
    result = EvaluationResult(in_name="in", settings={"model": "vae <tiny>"}, scores={"nll": sets})
    images = {s: rng.integers(0, 256, (len(v), 1, 8, 8), dtype=np.uint8) for s, v in sets.items()}
    result.examples["nll"] = {s: extremes(v, images[s].__getitem__, None, k=3) for s, v in sets.items()}
    page_path = write_evaluation_page(result, tmp_path / "rep")
    page = checked_page(page_path)
    assert {"figures/roc_0.png", "figures/hist_0.png"} <= set(page.sources)
    assert len([s for s in page.sources if s.startswith("thumbs/")]) == 2 * 2 * 3
    raw = page_path.read_text(encoding="utf-8")
    assert "far &amp; &lt;away&gt;" in raw and "vae &lt;tiny&gt;" in raw
    cut = evaluation_thresholds(result)["nll"]
    assert cut in sets["in"] and np.mean(sets["in"] <= cut) >= 0.95
    assert red_pixels(page_path.parent / "figures" / "hist_0.png") > 0
