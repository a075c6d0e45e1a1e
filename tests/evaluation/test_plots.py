"""Figures: valid PNGs for normal and degenerate inputs, and the data-driven histogram axis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from roseood.evaluation.plots import (
    histogram_scale,
    plot_box,
    plot_histograms,
    plot_image_rows,
    plot_lines,
    plot_roc,
)
from roseood.evaluation.result import EvaluationResult


def assert_png(path: Path) -> None:
    assert path.stat().st_size > 3000  # a blank canvas alone is smaller than a drawn figure
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width > 300 and image.height > 300
        image.verify()


def two_method_result(seed: int = 0) -> EvaluationResult:
    rng = np.random.default_rng(seed)
    return EvaluationResult(
        in_name="cifar10",
        settings={},
        scores={
            "nll": {"cifar10": rng.normal(0, 1, 80), "svhn": rng.normal(1.5, 1, 60)},
            "rose": {"cifar10": rng.lognormal(0, 2, 80), "svhn": rng.lognormal(3, 2, 60)},
        },
    )


def test_roc_and_histograms_are_valid_pngs(tmp_path: Path) -> None:
    result = two_method_result()
    assert_png(plot_roc(result, "svhn", tmp_path / "roc.png"))
    for method in result.methods:
        assert_png(plot_histograms(result, method, tmp_path / f"hist_{method}.png"))


def test_degenerate_scores_do_not_crash(tmp_path: Path) -> None:
    equal = EvaluationResult("in", {}, {"m": {"in": np.full(20, 3.0), "out": np.full(10, 3.0)}})
    assert_png(plot_roc(equal, "out", tmp_path / "roc.png"))
    assert_png(plot_histograms(equal, "m", tmp_path / "hist.png"))
    zeros = EvaluationResult("in", {}, {"m": {"in": np.zeros(5), "out": np.zeros(5)}})
    assert_png(plot_histograms(zeros, "m", tmp_path / "zeros.png"))


def test_histograms_drop_non_finite_and_handle_missing_method(tmp_path: Path) -> None:
    result = EvaluationResult(
        "in", {}, {"m": {"in": np.array([1.0, np.inf, 2.0]), "out": np.array([np.nan])}}
    )
    assert_png(plot_histograms(result, "m", tmp_path / "nonfinite.png"))
    assert_png(plot_histograms(result, "absent", tmp_path / "absent.png"))
    assert_png(plot_roc(result, "absent", tmp_path / "roc_absent.png"))


def test_histogram_scale_follows_the_data() -> None:
    rng = np.random.default_rng(1)
    assert histogram_scale([rng.normal(0, 1, 500)]) == ("linear", 0.0)
    assert histogram_scale([rng.normal(5, 1, 500)]) == ("linear", 0.0)
    assert histogram_scale([rng.lognormal(0, 1, 500), rng.lognormal(12, 1, 50)])[0] == "log"
    scale, linthresh = histogram_scale([rng.normal(0, 1, 500), rng.lognormal(10, 1, 50)])
    assert scale == "symlog" and linthresh > 0


def test_lines_and_box(tmp_path: Path) -> None:
    assert_png(
        plot_lines(
            [1, 10, 100],
            {"svhn": [0.6, 0.8, 0.9], "celeba": [0.5, 0.7, 0.75]},
            tmp_path / "lines.png",
            "Fisher samples",
            "AUROC",
            "AUROC vs samples",
            xscale="log",
        )
    )
    groups = {"1": [0.6, 0.62, 0.58], "10": [0.8], "100": []}
    assert_png(plot_box(groups, tmp_path / "box.png", "Fisher samples", "AUROC", "spread over seeds"))
    with pytest.raises(ValueError, match="2 values for 3"):
        plot_lines([1, 2, 3], {"bad": [1.0, 2.0]}, tmp_path / "bad.png", "x", "y", "t")


@pytest.mark.parametrize("channels", [1, 3])
def test_image_rows_draw_each_row_where_its_label_says(tmp_path: Path, channels: int) -> None:
    """Figure 2's rows: two dark rows over two bright ones come out dark above, bright below."""
    dark, bright = (np.full((8, channels, 32, 32), v, np.uint8) for v in (0, 255))
    rows = {"0": dark, "0 again": dark, "255": bright, "255 again": bright}
    path = plot_image_rows(rows, tmp_path / "rows.png", "four rows")
    assert_png(path)
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L"), float)
    middle = pixels.shape[0] // 2
    assert pixels[:middle].mean() + 60 < pixels[middle:].mean()
    with Image.open(plot_image_rows({}, tmp_path / "none.png", "no rows")) as image:
        image.verify()  # no rows: a figure that says so, not an error
