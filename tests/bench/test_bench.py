"""Every `rose bench` experiment runs end to end under the smoke profile; a re-run reuses its work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import SHARED_DATA, needs_shared_data

from roseood.bench import EXPERIMENTS, Workspace, experiment_table, get_profile, run_experiment
from roseood.bench.experiments.common import compare_rows
from roseood.bench.paper import PAPER
from roseood.bench.report import Row, comparison_table, overview_grid
from roseood.cli import main
from roseood.errors import RoseError
from roseood.evaluation.result import EvaluationResult


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, dict[str, Path]]:
    """All experiments once, sharing one results folder (as `rose bench all --profile smoke`)."""
    ws = Workspace(
        root=tmp_path_factory.mktemp("bench"),
        profile=get_profile("smoke"),
        data_dir=SHARED_DATA,
        progress=False,
    )
    return ws, {name: run_experiment(name, ws) for name in EXPERIMENTS}


def _figures(report: Path) -> list[Path]:
    return [report.parent / m for m in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report.read_text())]


@needs_shared_data
@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_experiment_writes_a_report_with_settings_and_figures(
    smoke_run: tuple[Workspace, dict[str, Path]], name: str
) -> None:
    ws, reports = smoke_run
    report = reports[name]
    text = report.read_text()
    assert report == ws.root / "smoke" / name / "report.md"
    assert "Profile **smoke**" in text and "## Run" in text and "machine" in text
    payload = json.loads((report.parent / "results.json").read_text())
    assert payload["experiment"] == name and payload["profile"]["name"] == "smoke"
    assert payload["results"], "an experiment must record what it measured"
    figures = _figures(report)
    for fig in figures:
        assert fig.is_file() and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig
    if name.startswith("figure"):
        assert figures, f"{name} must draw its figure"
    if name.startswith("table") or name == "brightness":
        assert "| paper | ours | Δ |" in text
        compared = [r for r in payload["comparison"] if r["paper"] is not None and r["ours"] is not None]
        assert compared, "a table experiment must put our numbers beside the paper's"
        assert all(0.0 <= r["ours"] <= 1.0 for r in compared)


def _auroc(s_in: np.ndarray, s_out: np.ndarray) -> float:
    """Mann-Whitney AUROC, in-distribution positive (lower score), ties counted half: independent of
    the package's metrics."""
    a, b = s_in[:, None], s_out[None, :]
    return float(((a < b) + 0.5 * (a == b)).mean())


@needs_shared_data
@pytest.mark.parametrize("name", ["table2", "table6", "table7", "table10", "table11"])
def test_table_numbers_are_the_auroc_of_the_saved_scores(
    smoke_run: tuple[Workspace, dict[str, Path]], name: str
) -> None:
    """Every AUROC recomputed from a sub-report's raw scores is one of the table's numbers for that
    (OOD set, method) cell, and the paper column holds the paper's numbers."""
    _, reports = smoke_run
    payload = json.loads((reports[name].parent / "results.json").read_text())
    cells: dict[tuple[str, ...], list[float]] = {}
    for row in payload["comparison"]:
        cells.setdefault(tuple(row["labels"]), []).append(row["ours"])
    checked = 0
    for npz in reports[name].parent.glob("*/scores.npz"):
        scores = np.load(npz)
        in_name = npz.parent.name.split("-", 1)[1]  # vae-cifar10, rnd-cifar10, glow-fashion_mnist, ...
        for key in scores.files:
            method, ood = key.split("/")
            if ood != in_name and (ood, method) in cells:
                ours = _auroc(scores[f"{method}/{in_name}"], scores[key])
                assert any(ours == pytest.approx(x) for x in cells[(ood, method)]), (npz, key)
                checked += 1
    assert checked
    papers = {v for t in PAPER.values() for v in t.values()}
    assert {r["paper"] for r in payload["comparison"]} - {None} <= papers


@needs_shared_data
def test_sweep_and_layerwise_figures_hold_their_numbers(smoke_run: tuple[Workspace, dict[str, Path]]) -> None:
    ws, reports = smoke_run
    p = ws.profile
    fig5 = json.loads((reports["figure5"].parent / "results.json").read_text())["results"]["auroc"]
    assert list(fig5) == [str(n) for n in p.fisher_sizes]
    for per_set in fig5.values():
        assert "overall" in per_set
        assert all(len(v) == p.fisher_repeats and all(0 <= x <= 1 for x in v) for v in per_set.values())
    fig6 = json.loads((reports["figure6"].parent / "results.json").read_text())["results"]
    for arch, entry in fig6.items():
        assert entry["auroc"], arch
        assert all(len(v) == len(entry["layers"]) for v in entry["auroc"].values()), arch
    bright = json.loads((reports["brightness"].parent / "results.json").read_text())
    expected: list[float] = []  # mean and std over the brightness levels, per set with data and method
    for per in bright["results"]["auroc"].values():
        if any(x is not None for values in per.values() for x in values):
            for values in per.values():
                v = np.array([np.nan if x is None else x for x in values])
                expected += [float(np.nanmean(v)), float(np.nanstd(v))]
    assert [r["ours"] for r in bright["comparison"]] == pytest.approx(expected)


def test_compare_rows_read_the_right_metric_and_paper_cell() -> None:
    """A separable toy case has AUROC 1.0, a tied one 0.5; the paper column is the keyed paper cell."""
    result = EvaluationResult(in_name="fashion_mnist", settings={}, missing={"kmnist": "absent"})
    result.scores["rose-ekfac"] = {
        "fashion_mnist": np.array([0.0, 1.0]),
        "mnist": np.array([2.0, 3.0]),
        "noise": np.array([1.0, 1.0, 0.0, 0.0]),
    }
    rows = compare_rows(
        result, "table2", "vae/fashion_mnist", ["mnist", "noise", "kmnist"], {"rose-ekfac": "rose-ekfac"}
    )
    assert [r.ours for r in rows] == [1.0, 0.5, None]
    assert rows[0].paper == PAPER["table2"]["vae/fashion_mnist/mnist/rose-ekfac/auroc"] == 0.995
    assert rows[2].why == "no data"


@needs_shared_data
def test_missing_sets_say_no_data(smoke_run: tuple[Workspace, dict[str, Path]]) -> None:
    """SVHN / KMNIST / LSUN files are absent here: their rows stay, marked, instead of disappearing."""
    _, reports = smoke_run
    payload = json.loads((reports["table2"].parent / "results.json").read_text())
    rows = {tuple(r["labels"]): r for r in payload["comparison"]}
    for ood in ("kmnist", "svhn"):
        row = rows[(ood, "rose-ekfac")]
        if not (SHARED_DATA / f"{ood}_test.npz").exists():
            assert row["ours"] is None and row["why"] == "no data"
    assert rows[("overall", "rose-ekfac")]["ours"] is not None


@needs_shared_data
def test_rerun_reuses_models_and_scores(smoke_run: tuple[Workspace, dict[str, Path]]) -> None:
    ws, _ = smoke_run
    cache = ws.root / "cache"
    before = sorted(p.name for p in cache.rglob("*") if p.is_file())
    run_experiment("table6", ws)
    assert ws.trained and all(t.get("reused") for t in ws.trained.values())
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == before


@needs_shared_data
def test_index_links_every_report(smoke_run: tuple[Workspace, dict[str, Path]]) -> None:
    ws, reports = smoke_run
    index = (ws.root / "index.html").read_text()
    for report in reports.values():
        assert report.with_suffix(".html").relative_to(ws.root).as_posix() in index


def test_comparison_table_marks_large_differences_and_missing_data() -> None:
    table = comparison_table(
        ("OOD set", "method"),
        [
            Row(("mnist", "rose"), 0.90, 0.995),
            Row(("svhn", "rose"), None, 0.9, "no data"),
            Row(("x", "y"), 0.5, None),
        ],
    )
    lines = table.splitlines()
    assert lines[0] == "| OOD set | method | paper | ours | Δ |"
    assert "**-0.095**" in lines[2]
    assert "no data" in lines[3] and lines[3].endswith("| – |")
    assert lines[4] == "| x | y | – | 0.500 | – |"


def test_overview_grid_lays_out_rows_like_the_paper() -> None:
    rows = [
        Row(("mnist", "rose"), 0.9, 0.995),
        Row(("mnist", "nll"), 0.2, None),
        Row(("svhn", "rose"), None, 1.0, "no data"),
    ]
    lines = overview_grid(("OOD set", "method"), rows).splitlines()
    assert lines[0] == "| OOD set / method: ours (paper) | rose | nll |"
    assert lines[2] == "| mnist | 0.900 (0.995) | 0.200 (–) |"
    assert lines[3] == "| svhn | no data |  |"


def test_list_and_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXPERIMENTS)
    table = experiment_table().splitlines()
    assert len(table) == 2 + len(EXPERIMENTS) and all(
        e.uses and e.uses.models and e.uses.outputs for e in EXPERIMENTS.values()
    )
    assert main(["bench", "table99", "--profile", "smoke"]) == 2
    assert "unknown experiment" in capsys.readouterr().err
    with pytest.raises(RoseError, match="unknown profile"):
        get_profile("huge")
