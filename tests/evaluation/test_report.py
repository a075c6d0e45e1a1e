"""Markdown reports and the HTML index built from a small synthetic evaluation result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from roseood.evaluation.report import (
    markdown_table,
    safe_name,
    write_across_report,
    write_index,
    write_report,
)
from roseood.evaluation.result import AcrossModels, EvaluationResult

METHODS = ("nll", "rose fine")


def synthetic_result() -> EvaluationResult:
    rng = np.random.default_rng(0)
    return EvaluationResult(
        in_name="cifar10",
        settings={"model": "glow", "fisher_samples": 16, "sets": ["svhn", "lsun"], "score": {"z": "z − β"}},
        scores={
            "nll": {
                "cifar10": rng.normal(0, 1, 100),
                "svhn": rng.normal(0.5, 1, 80),
                "lsun": rng.normal(2, 1, 80),
            },
            "rose fine": {
                "cifar10": rng.lognormal(0, 1.5, 100),
                "svhn": rng.lognormal(2, 1.5, 80),
                "lsun": rng.lognormal(0.5, 1.5, 80),
            },
        },
        images_per_second={"nll": 1234.5, "rose fine": 56.7},
        missing={"celeba": "not downloaded"},
    )


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, EvaluationResult]:
    result = synthetic_result()
    out = tmp_path_factory.mktemp("results") / "cifar10_glow"
    assert write_report(result, out, title="CIFAR-10 Glow", notes=["synthetic scores"]) == out / "report.md"
    return out, result


def section(report: str, heading: str) -> list[str]:
    """The lines of the ``## heading`` section."""
    body = report.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line]


def row(lines: list[str], label: str) -> list[str]:
    """Cells of the table row labelled ``label``."""
    line = next(line for line in lines if line.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_markdown_table_formatting() -> None:
    table = markdown_table(["r1", "r|2"], ["a", "b"], lambda r, c: f"{r}{c}", corner="x")
    assert table.splitlines() == [
        "| x | a | b |",
        "|---|---|---|",
        "| r1 | r1a | r1b |",
        r"| r\|2 | r\|2a | r\|2b |",
    ]
    assert markdown_table([], ["a"], lambda r, c: "") == "|  | a |\n|---|---|"


def test_safe_name() -> None:
    assert safe_name("rose fine/v2:ø") == "rose_fine_v2__"
    assert safe_name("a-b_c.d") == "a-b_c.d"


def test_report_has_settings_metrics_throughput_and_notes(report_dir: tuple[Path, EvaluationResult]) -> None:
    out, result = report_dir
    report = (out / "report.md").read_text()
    assert report.startswith("# CIFAR-10 Glow\n")
    settings = section(report, "Settings")
    assert row(settings, "model") == ["glow"] and row(settings, "fisher_samples") == ["16"]
    assert row(settings, "sets") == ['["svhn", "lsun"]']
    assert row(settings, "score") == ['{"z": "z − β"}']  # characters, not \u escapes

    metrics = result.metrics()
    for heading, metric, best in [
        ("AUROC (higher is better)", "auroc", max),
        ("FPR at 95 % TPR (lower is better)", "fpr95", min),
    ]:
        lines = section(report, heading)
        assert lines[0] == "| OOD set | nll | rose fine |"
        assert [line.split("|")[1].strip() for line in lines[2:]] == ["svhn", "lsun", "celeba"]
        for ood_set in ("svhn", "lsun"):
            values = {m: metrics[m][ood_set][metric] for m in METHODS}
            winner = best(values, key=lambda m: values[m])
            cells = dict(zip(METHODS, row(lines, ood_set), strict=True))
            assert cells[winner] == f"**{values[winner]:.3f}**"
            loser = next(m for m in METHODS if m != winner)
            assert cells[loser] == f"{values[loser]:.3f}"
        assert row(lines, "celeba") == ["no data"] * 2  # why, once under the tables
    assert report.count("not downloaded") == 1 and "- no data for celeba: not downloaded" in report
    assert "## AUPRC, in-distribution positive (higher is better)" in report
    assert "## FPR at 80 % TPR (lower is better)" in report
    assert row(section(report, "Throughput"), "rose fine") == ["56.7"]
    assert row(section(report, "Throughput"), "nll") == ["1,234.5"]
    assert section(report, "Notes") == ["- synthetic scores"]


def test_report_figures_exist_and_are_embedded(report_dir: tuple[Path, EvaluationResult]) -> None:
    out, _ = report_dir
    report = (out / "report.md").read_text()
    for name in ("roc_svhn.png", "roc_lsun.png", "hist_nll.png", "hist_rose_fine.png"):
        assert f"]({name})" in report
        assert (out / name).stat().st_size > 3000
        with Image.open(out / name) as image:
            assert image.format == "PNG"
            image.verify()
    assert not list(out.glob("roc_celeba*"))


def test_results_json_and_scores(report_dir: tuple[Path, EvaluationResult]) -> None:
    out, result = report_dir
    data = json.loads((out / "results.json").read_text())
    assert data["settings"] == result.settings
    assert set(data["results"]) == set(METHODS)
    assert set(data["results"]["nll"]) == {"svhn", "lsun"}
    assert data["results"]["rose fine"]["svhn"]["auroc"] == pytest.approx(
        result.metrics()["rose fine"]["svhn"]["auroc"]
    )
    with np.load(out / "scores.npz") as scores:
        np.testing.assert_array_equal(scores["nll/cifar10"], result.scores["nll"]["cifar10"])  # written as is


def test_index_links_every_report(tmp_path: Path) -> None:
    for name, title in [("b run", "Second"), ("a/nested", "First & <best>")]:
        (tmp_path / name).mkdir(parents=True)
        text = f"# {title}\n\n## Table\n\n" + markdown_table(["svhn"], ["m"], lambda r, c: "**0.900**")
        (tmp_path / name / "report.md").write_text(text + "\n\n![ROC a vs b](roc_b.png)\n\n- a note\n")
    index = write_index(tmp_path)
    assert index == tmp_path / "index.html"
    page = index.read_text()
    assert page.index('href="a/nested/report.html"') < page.index('href="b%20run/report.html"')
    assert "First &amp; &lt;best&gt;" in page and "Second" in page and 'href="a/nested/report.md"' in page
    rendered = (tmp_path / "a" / "nested" / "report.html").read_text()
    assert "<h1>First &amp; &lt;best&gt;</h1>" in rendered and "<h2>Table</h2>" in rendered
    assert "<th>m</th>" in rendered and "<td><strong>0.900</strong></td>" in rendered
    assert '<img alt="ROC a vs b" src="roc_b.png">' in rendered and "<li>a note</li>" in rendered


def test_index_of_real_report_and_of_empty_tree(
    report_dir: tuple[Path, EvaluationResult], tmp_path: Path
) -> None:
    out, _ = report_dir
    page = write_index(out.parent).read_text()
    assert 'href="cifar10_glow/report.html"' in page and "CIFAR-10 Glow" in page
    rendered = (out / "report.html").read_text()
    assert "no data for celeba: not downloaded" in rendered and 'src="hist_rose_fine.png"' in rendered
    assert "No reports found." in write_index(tmp_path / "empty").read_text()


def test_report_cells_carry_bootstrap_intervals(tmp_path: Path) -> None:
    result = synthetic_result()
    result.add_intervals(resamples=50, seed=0)
    report = write_report(result, tmp_path / "r").read_text()
    lines = section(report, "AUROC (higher is better)")
    for ood_set in ("svhn", "lsun"):
        for method, cell in zip(METHODS, row(lines, ood_set), strict=True):
            low, high = result.interval(method, ood_set, "auroc") or (np.nan, np.nan)
            assert cell.endswith(f" [{low:.3f}, {high:.3f}]") and low < high, cell
    assert "50 resamples" in row(section(report, "Settings"), "intervals")[0]
    result.scores["nll"]["one image"] = np.array([3.0])  # a set of one image: its value, no interval
    assert result.interval("nll", "one image", "auroc") is None
    assert result.intervals()["nll"]["one image"] == {}


def test_across_models_report_has_the_spread_each_model_and_its_own_report(tmp_path: Path) -> None:
    results = {}
    for k, name in enumerate(("seed 0", "seed 1", "seed 2")):
        result = synthetic_result()
        result.scores["nll"]["svhn"] = result.scores["nll"]["svhn"] + 0.3 * k  # models differ
        result.settings["model_fingerprint"] = f"fp{k}"
        results[name] = result
    across = AcrossModels(results)
    report = write_across_report(across, tmp_path / "r", title="Glow seeds")
    assert report == tmp_path / "r" / "report.md"
    text = report.read_text()
    assert text.startswith("# Glow seeds across 3 models")
    spread = across.spread()
    cell = spread["nll"]["svhn"]["auroc"]
    shown = row(section(text, "AUROC (higher is better)"), "svhn")[0].replace("**", "")
    assert shown == f"{cell['mean']:.3f} ± {cell['sd']:.3f} ({cell['min']:.3f}–{cell['max']:.3f})"
    assert cell["sd"] > 0 and spread["rose fine"]["svhn"]["auroc"]["sd"] == 0
    shared = [line.split("|")[1].strip() for line in section(text, "Shared settings")]
    assert "model" in shared and "model_fingerprint" not in shared  # alike in every model, or not
    per_model = section(text, "AUROC of each model")
    for name, result in results.items():
        cells = row(per_model, name)
        assert cells[0] == f"{result.metrics()['nll']['svhn']['auroc']:.3f}"
        assert cells[-1] == f"[{name}]({name.replace(' ', '_')}/report.md)"
        assert (tmp_path / "r" / name.replace(" ", "_") / "report.md").exists()
    Image.open(tmp_path / "r" / "auroc_models.png").verify()
    assert set(json.loads((tmp_path / "r" / "results.json").read_text())["models"]) == set(results)
    # the index finds the summary and every model's report
    assert write_index(tmp_path / "r").read_text().count("report.html") == 4
