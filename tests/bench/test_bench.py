"""The VAE/Glow experiments run end to end under the smoke profile and check their numbers; a re-run
reuses its work; the report tables and the experiment list."""

from __future__ import annotations

import json

import numpy as np
import pytest

from roseood.bench import EXPERIMENTS, experiment_table, get_profile, run_experiment
from roseood.bench.experiments.common import compare_rows
from roseood.bench.paper import PAPER
from roseood.bench.report import Row, comparison_table, overview_grid
from roseood.cli import main
from roseood.errors import RoseError
from roseood.evaluation.result import EvaluationResult
from roseood.models import VAE
from tests.bench.smoke import Smoke, smoke_workspace
from tests.bench.smoke import test_experiment_report as test_experiment_report  # run on this GROUP
from tests.bench.smoke import test_table_aurocs_match_saved_scores as test_table_aurocs_match_saved_scores
from tests.conftest import SHARED_DATA, needs_shared_data

GROUP = 0


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
    assert all(r.interval is None for r in rows)  # no bootstrap asked for
    result.add_intervals(resamples=50, seed=0)
    rows = compare_rows(
        result, "table2", "vae/fashion_mnist", ["mnist", "noise", "kmnist"], {"rose-ekfac": "rose-ekfac"}
    )
    assert rows[0].interval == (1.0, 1.0) and rows[0].paper_outside  # 0.995 < 1.0: beyond image noise
    low, high = rows[1].interval or (np.nan, np.nan)
    assert low < 0.5 < high and rows[2].interval is None


@needs_shared_data
def test_missing_sets_say_no_data(smoke_run: Smoke) -> None:
    """SVHN / KMNIST / LSUN files are absent here: their rows stay, marked, instead of disappearing."""
    ws, reports = smoke_run
    payload = json.loads((reports["table2"].parent / "results.json").read_text())
    rows = {tuple(r["labels"]): r for r in payload["comparison"]}
    sets = {"fashion_mnist": "kmnist", "cifar10": "svhn"}  # an OOD set of each in-distribution set
    for ood in [sets[d] for d in ws.select_data()]:
        row = rows[(ood, "rose-ekfac")]
        if not (SHARED_DATA / f"{ood}_test.npz").exists():
            assert row["ours"] is None and row["why"] == "no data"
    assert rows[("overall", "rose-ekfac")]["ours"] is not None
    # each number names the report's table it sits in (the paper page groups rows by it)
    headings = {line[3:] for line in reports["table2"].read_text().splitlines() if line.startswith("## ")}
    assert {r["table"] for r in payload["comparison"]} <= headings
    assert len({r["table"] for r in payload["comparison"]}) > 1
    low, high = rows[("mnist", "rose-ekfac")]["interval"]  # the smoke profile's 5 resamples
    assert low <= rows[("mnist", "rose-ekfac")]["ours"] <= high
    assert "† marks a paper number outside it" in reports["table2"].read_text()


@needs_shared_data
def test_rerun_reuses_models_and_scores(smoke_run: Smoke) -> None:
    ws, _ = smoke_run
    cache = ws.root / "cache"
    before = sorted(p.name for p in cache.rglob("*") if p.is_file())
    run_experiment("table6", ws)
    assert ws.trained and all(t.get("reused") for t in ws.trained.values())
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == before


@needs_shared_data
def test_index_links_every_report(smoke_run: Smoke) -> None:
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


def test_comparison_table_gives_intervals_and_marks_paper_numbers_outside_them() -> None:
    table = comparison_table(
        ("OOD set", "method"),
        [
            Row(("mnist", "rose"), 0.90, 0.995, interval=(0.88, 0.92)),
            Row(("noise", "rose"), 0.99, 0.995, interval=(0.98, 1.0)),
        ],
    )
    lines = table.splitlines()
    assert lines[2] == "| mnist | rose | 0.995 | 0.900 [0.880, 0.920] † | **-0.095** |"
    assert lines[3] == "| noise | rose | 0.995 | 0.990 [0.980, 1.000] | -0.005 |"


def test_comparison_table_adds_a_notes_column_and_rows_round_trip_through_json() -> None:
    """The summary's "why they differ" column; a row read back from results.json is the row written."""
    rows = [Row(("claim a",), 0.9, 0.995, interval=(0.88, 0.92)), Row(("claim b",), 0.99, 0.995)]
    lines = comparison_table(("claim",), rows, ("why", ["short training", "agree"])).splitlines()
    assert lines[0] == "| claim | paper | ours | Δ | why |"
    assert lines[2] == "| claim a | 0.995 | 0.900 [0.880, 0.920] † | **-0.095** | short training |"
    for row in [*rows, Row(("svhn", "rose"), None, 1.0, "no data")]:
        assert Row.from_json(json.loads(json.dumps(row.to_json("T")))) == row


def test_a_given_model_file_stands_in_for_its_recipe_and_must_match_it(tmp_path) -> None:
    """``--model-file RECIPE=FILE`` (the authors' released VAE): the file is used instead of training and
    recorded as given; a file of another architecture is refused in one line."""
    import torch

    from roseood.models import save_model

    ws = smoke_workspace(tmp_path)
    recipe = ws.vae("fashion_mnist")
    torch.manual_seed(5)
    given = recipe.build()
    save_model(given, tmp_path / "given.pt")
    save_model(ws.vae("fashion_mnist", capacity=2.0).build(), tmp_path / "wider.pt")
    ws.given = {recipe.name: tmp_path / "given.pt"}
    model = ws.model(recipe)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), given.state_dict().values(), strict=True)
    )
    assert ws.trained == {recipe.name: {"file": str(tmp_path / "given.pt")}}
    assert not (tmp_path / "cache").exists()  # nothing trained
    ws.given = {recipe.name: tmp_path / "wider.pt"}
    with pytest.raises(RoseError, match=r"wider.pt: a vae model .* not the vae of vae-fashion_mnist"):
        ws.model(recipe)


def test_model_file_option_is_checked_before_any_work(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "table2", "--profile", "smoke", "--model-file", "vae-x"]) == 2
    assert "expected RECIPE=FILE" in capsys.readouterr().err
    assert main(["bench", "table2", "--model-file", f"vae-x={tmp_path / 'none.pt'}"]) == 2
    assert "no such model file" in capsys.readouterr().err


def test_overview_grid_lays_out_rows_like_the_paper() -> None:
    rows = [
        Row(("mnist", "rose"), 0.9, 0.995),
        Row(("mnist", "nll"), 0.2, None),
        Row(("svhn", "rose"), None, 1.0, "no data"),
        Row(("noise", "rose"), 0.99, 0.995, interval=(0.98, 1.0)),
        Row(("noise", "nll"), 0.5, 0.7, interval=(0.45, 0.55)),
    ]
    lines = overview_grid(("OOD set", "method"), rows).splitlines()
    assert lines[0] == "| OOD set / method: ours (paper) | rose | nll |"
    assert lines[2] == "| mnist | 0.900 (0.995) | 0.200 (–) |"
    assert lines[3] == "| svhn | no data |  |"
    assert lines[4] == "| noise | 0.990 (0.995) | 0.500 † (0.700) |"  # † as in the comparison table


def test_list_and_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXPERIMENTS)
    table = experiment_table().splitlines()
    assert len(table) == 2 + len(EXPERIMENTS)
    for e in EXPERIMENTS.values():  # each names its data and outputs; models exactly where methods run
        assert e.uses and e.uses.data and e.uses.outputs and bool(e.uses.models) == bool(e.uses.methods)
    assert main(["bench", "table99", "--profile", "smoke"]) == 2
    assert "unknown experiment" in capsys.readouterr().err
    with pytest.raises(RoseError, match="unknown profile"):
        get_profile("huge")


def test_a_selection_reports_into_its_own_folder(tmp_path) -> None:
    """A run on some models or datasets never replaces the report of a run on the default ones."""
    assert smoke_workspace(tmp_path).report_folder("ablation") == "ablation"
    reordered = smoke_workspace(tmp_path, models=("glow", "vae"), datasets=("cifar10", "fashion_mnist"))
    assert reordered.report_folder("table2") == "table2"
    assert smoke_workspace(tmp_path, datasets=("cifar10",)).report_folder("ablation") == "ablation-cifar10"
    both = smoke_workspace(tmp_path, models=("pixelcnn", "vae"), datasets=("fashion_mnist",))
    assert both.report_folder("table2") == "table2-fashion_mnist-vae+pixelcnn"


@needs_shared_data
@pytest.mark.parametrize("name", ["table3", "figure3"])
def test_compared_numbers_are_the_evaluations_metrics(smoke_run: Smoke, name: str) -> None:
    """Each compared AUROC is the one its evaluation recorded for that set (Table 3: per capacity)."""
    _, reports = smoke_run
    payload = json.loads((reports[name].parent / "results.json").read_text())
    recorded = [
        (ood, m["auroc"])
        for res in payload["results"].values()
        for per in res["results"].values()
        for ood, m in per.items()
    ]
    ours = [r for r in payload["comparison"] if r["ours"] is not None]
    assert ours
    for row in ours:
        ood = row["labels"][0]
        assert (ood, row["ours"]) in recorded, row


@needs_shared_data
def test_table2_runs_on_the_gated_pixelcnn(tmp_path) -> None:
    """``--models pixelcnn``: the bench trains the gated PixelCNN (the measured recipe), ROSE scores it on
    its vertical stack, and its rows carry our numbers with no paper column (it is not in the paper)."""
    ws = smoke_workspace(tmp_path, models=("pixelcnn",), datasets=("fashion_mnist",))
    recipe = ws.recipe("pixelcnn", "fashion_mnist")
    assert recipe.name == "pixelcnn-fashion_mnist-c1-width4-blocks1-gated-n64-s0"
    report = run_experiment("table2", ws)
    assert report.parent == tmp_path / "smoke" / "table2-fashion_mnist-pixelcnn"  # beside a full run's
    payload = json.loads((report.parent / "results.json").read_text())
    rows = {tuple(r["labels"]): r for r in payload["comparison"] if r["labels"][1] == "rose-ekfac"}
    assert 0.0 <= rows[("mnist", "rose-ekfac")]["ours"] <= 1.0
    assert all(r["paper"] is None for r in payload["comparison"])
    assert ws.model(recipe).layer_sets()["vertical"] == ["input.vertical", "body.0.vertical"]


@needs_shared_data
def test_natural_image_sets_get_a_twin_in_the_in_distribution_sets_jpeg_history(tmp_path) -> None:
    """Our CIFAR-10 is decoded JPEG (quality 75, 4:2:0): every natural-image OOD set is judged beside its
    twin put through that history, the rest as they are; Fashion-MNIST shows no history, so no twins."""
    ws = smoke_workspace(tmp_path)
    sets = ["svhn", "celeba", "mnist", "noise", "overall"]
    assert ws.ood_sets("cifar10", sets) == ["svhn", "svhn+jpeg75", "celeba", "celeba+jpeg75", *sets[2:]]
    assert ws.ood_sets("fashion_mnist", ["mnist", "cifar10"]) == ["mnist", "cifar10"]
    spec = ws.spec(VAE(in_channels=3, ngf=4, nz=4), "cifar10", ["celeba", "noise"], ["nll"])
    assert list(spec.ood) == ["celeba", "celeba+jpeg75", "noise"]
