"""Every `rose bench` experiment runs end to end under the smoke profile; a re-run reuses its work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.conftest import SHARED_DATA, needs_shared_data

from roseood.bench import EXPERIMENTS, Workspace, get_profile, run_experiment
from roseood.bench.report import Row, comparison_table, overview_grid
from roseood.cli import main
from roseood.errors import RoseError


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
    assert main(["bench", "table99", "--profile", "smoke"]) == 2
    assert "unknown experiment" in capsys.readouterr().err
    with pytest.raises(RoseError, match="unknown profile"):
        get_profile("huge")
