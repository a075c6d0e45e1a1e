"""The documentation site's build hooks: the generated CLI reference covers every command and option, and
only the pages other branches are still writing may be missing from the nav."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

from roseood.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "hooks"


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HOOKS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parsers(parser: argparse.ArgumentParser, path: str):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_cli_reference_has_every_command_and_option():
    hook = _hook("cli_reference")
    page = hook.on_page_markdown(f"# CLI\n\n{hook.MARKER}\n", None, None, None)
    assert hook.MARKER not in page
    commands = list(_parsers(build_parser(), "rose"))
    assert len(commands) > 10
    for path, parser in commands:
        section = page.split(f"## {path} {{#", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section or f", {option}" in section, (path, option)
            if action.help and not isinstance(action, argparse._SubParsersAction) and action.dest != "help":
                assert action.help.split()[0] in section, (path, action.dest)
    assert "2\\*\\*32" in page  # Markdown emphasis characters in help texts are escaped


def test_pages_without_a_marker_are_left_alone():
    hook = _hook("cli_reference")
    assert hook.on_page_markdown("# Other\n", None, None, None) == "# Other\n"


def test_only_optional_missing_pages_leave_the_nav(tmp_path):
    hook = _hook("optional_pages")
    (tmp_path / "index.md").write_text("# x")
    nav = [
        {"Home": "index.md"},
        {"Guide": [{"Speed": "speed.md"}, {"Diffusion": "diffusion.md"}]},
        {"Typo": "missing.md"},
    ]
    config = SimpleNamespace(nav=nav, docs_dir=str(tmp_path))
    assert hook.on_config(config).nav == [{"Home": "index.md"}, {"Typo": "missing.md"}]
    (tmp_path / "speed.md").write_text("# speed")
    config = SimpleNamespace(nav=nav, docs_dir=str(tmp_path))
    assert hook.on_config(config).nav[1] == {"Guide": [{"Speed": "speed.md"}]}


def test_the_recorded_bad_input_table_has_exactly_the_tests_cases_in_order():
    """bad-input.md's full table is recorded output (the build inserts it): a case added, removed or
    renamed in tests/test_cli_bad_input.py needs the table regenerated."""
    from tests.test_cli_bad_input import CASES

    hook = _hook("bad_input_table")
    recorded = hook.recorded_cases(hook.TABLE.read_text(encoding="utf-8"))
    assert recorded == [case.what for case in CASES], f"regenerate it: {hook.REGENERATE}"
    page = hook.on_page_markdown(f"# Bad input\n\n{hook.MARKER}\n", None, None, None)
    assert hook.MARKER not in page and f"`{CASES[0].what}`" in page


def test_the_decision_table_is_one_table_on_every_page_and_follows_the_catalogue():
    """README, detectors.md and diffusion.md hold exactly the table ``docgen.decision_table`` renders
    (its rows: docs/generated/decisions.json), and every built-in family's default appears in it, taken
    from the catalogue that `rose fit` and `rose evaluate` read."""
    from docgen import decision_table

    from roseood.catalogue import TRAIN_OPTIONS
    from roseood.models.zoo import ZOO_FAMILIES

    for page in decision_table.PAGES:
        text = (decision_table.ROOT / page).read_text(encoding="utf-8")
        assert decision_table.current(text) == decision_table.block(page), (
            f"{page}: rewrite it with python -m docgen.decision_table --write"
        )
    families = {row.get("family") for row in decision_table.rows()}
    assert set(TRAIN_OPTIONS) <= families
    kinds = {row.get("variety", row.get("family")) for row in decision_table.rows()}
    assert set(ZOO_FAMILIES) <= kinds, "every kind the zoo holds has its row"
    rendered = decision_table.render()
    for name, options in TRAIN_OPTIONS.items():
        assert f"`{options.method}` (the default for this family)" in rendered, name
        for variety, method in options.varieties.items():  # a variety a rule judged apart: its own row
            assert any(r.get("family") == name and r.get("variety") == variety for r in decision_table.rows())
            assert f"`{method}` (the default for these models)" in rendered, (name, variety)


def test_detectors_md_holds_the_table_of_roses_declared_settings():
    """docs/detectors.md holds exactly the table ``docgen.settings_table`` renders from ROSE's one
    declaration of its settings: one row per setting, with its default and its option where it has one."""
    from docgen import settings_table
    from docgen.decision_table import ROOT as PAGES_ROOT
    from docgen.decision_table import current

    from roseood.settings import ROSE_SETTINGS

    text = (PAGES_ROOT / settings_table.PAGE).read_text(encoding="utf-8")
    shown = current(text, settings_table.BEGIN, settings_table.END)
    assert shown == settings_table.block(), "rewrite it with python -m docgen.settings_table --write"
    rows = [line for line in shown.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == [s.name for s in ROSE_SETTINGS]
    assert "| `max_size` | `'auto'` | `--max-size` |" in shown


def test_diffusion_md_holds_the_table_of_the_declared_loss_settings():
    """docs/diffusion.md holds exactly the table ``docgen.settings_table`` renders from the one
    declaration of a diffusion model's per-image loss settings: one row per setting, a range's two keys
    in one row with its one option."""
    from docgen import settings_table
    from docgen.decision_table import ROOT as PAGES_ROOT
    from docgen.decision_table import current

    from roseood.settings import LOSS_SETTINGS

    text = (PAGES_ROOT / settings_table.LOSS_PAGE).read_text(encoding="utf-8")
    shown = current(text, settings_table.LOSS_BEGIN, settings_table.LOSS_END)
    assert shown == settings_table.loss_block(), "rewrite it with python -m docgen.settings_table --write"
    rows = shown.splitlines()[4:-2]  # the marker, a blank line, the header and its rule; a blank, the marker
    assert [r.split("`")[1] for r in rows] == [s.keys[0] for s in LOSS_SETTINGS]
    assert "| `t_min`, `t_max` | `0.0`, `1.0` | `--rose-t-range` |" in shown


def test_results_stays_a_summary():
    """docs/results.md holds headline tables only (issue 61: ≤ 300 lines); full tables go to docs/lab/."""
    lines = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text().splitlines()
    assert len(lines) <= 300, f"docs/results.md has {len(lines)} lines: move full tables to docs/lab/"


def test_the_paper_page_is_what_its_committed_results_render():
    """docs/paper.md is ``docgen.paper_page``'s rendering of docs/generated/paper/: no "no data" row,
    every claim of its summary found with our number and the paper's, every picture it shows present."""
    import re

    from docgen import paper_page

    text = (ROOT / "docs" / "paper.md").read_text()
    assert text == paper_page.render(), "python -m docgen.paper_page --write"
    assert "no data" not in text
    runs = paper_page.load_runs()
    for claim in paper_page.CLAIMS:
        row, _ = paper_page.claim_row(runs, claim)
        assert row.ours is not None and row.paper is not None, claim.text
    for image in re.findall(r"\]\((img/paper/[^)]+)\)", text):
        assert (ROOT / "docs" / image).is_file(), image


def test_a_table_rerun_later_is_shown_from_the_rerun_without_its_missing_sets():
    """Two runs hold the same table: the newer (e.g. on the authors' VAE, a given file) is shown, the
    sets its machine lacked are named once instead of shown as rows, and Δ beyond 0.05 is bold."""
    from docgen import paper_page

    def run(date: str, ours: float, models: dict[str, dict[str, object]]) -> dict[str, object]:
        rows = [(["mnist", "rose-ekfac"], ours, 0.995, ""), (["svhn", "rose-ekfac"], None, 1.0, "no data")]
        return {
            "experiment": "table2",
            "date": date,
            "wall_seconds": 600.0,
            "profile": {"name": "cpu", "cuts": "fewer epochs; fewer images"},
            "machine": {"cpu": "2 cores"},
            "models": models,
            "headers": {"T": ["OOD set", "method"]},
            "comparison": [
                {"table": "T", "labels": labels, "ours": o, "paper": p, "why": why, "interval": None}
                for labels, o, p, why in rows
            ],
        }

    runs = {
        "table2": run("2026-11-29 12:55 UTC", 0.5, {"vae-a": {"epochs": 1, "images": 10, "reused": True}}),
        "table2-fashion_mnist-vae": run("2026-12-06 11:00 UTC", 0.99, {"vae-a": {"file": "x/vae.pt"}}),
    }
    shown = paper_page.shown_tables(runs)
    assert shown == {"T": "table2-fashion_mnist-vae"}
    text = paper_page.section("table2", runs, shown)
    assert "| mnist | 0.990 (0.995) |" in text and "0.500" not in text
    assert "| mnist | rose-ekfac | 0.995 | 0.990 | -0.005 |" in text  # the folded Δ row
    assert "left out: svhn." in text and "| svhn" not in text
    assert "--model-file vae-a=x/vae.pt" in text and "`vae.pt`" in text
    assert "VAEs 1 epoch (" in text
    assert '??? note "Run details: table2, 2026-11-29 12:55 UTC"' in text


def test_adding_a_run_commits_its_results_and_figures(tmp_path, monkeypatch):
    """``--add``: the run's results file gets its date and note, its figures are copied where the page
    shows them, beside what the paper's figure shows."""
    import json

    from docgen import paper_page

    folder = tmp_path / "cpu" / "figure3"
    folder.mkdir(parents=True)
    (folder / "roc.png").write_bytes(b"png")
    run = {
        "experiment": "figure3",
        "profile": {"name": "cpu", "experiment_overrides": {}},
        "figures": [{"file": "roc.png", "caption": "ROC"}],
    }
    (folder / "results.json").write_text(json.dumps(run))
    monkeypatch.setattr(paper_page, "RESULTS", tmp_path / "generated")
    monkeypatch.setattr(paper_page, "IMAGES", tmp_path / "img")
    paper_page.add(folder / "results.json", "a note")
    saved = json.loads((tmp_path / "generated" / "figure3-cpu.json").read_text())
    assert saved["note"] == "a note" and saved["date"].endswith(" UTC")
    assert (tmp_path / "img" / "figure3" / "roc.png").read_bytes() == b"png"
    shown = paper_page.figures("figure3", saved)
    assert (
        shown[0].startswith("The paper's Figure 3: ROC curves")
        and "![ROC](img/paper/figure3/roc.png)" in shown
    )


def test_figure5_shows_its_auroc_per_fisher_size_below_its_picture():
    """Figure 5's run (no paper numbers to compare) shows mean ± std over its draws per OOD set and number
    of Fisher images; other runs get no such table."""
    from docgen import paper_page

    auroc = {
        "10": {"mnist": [0.9, 1.0], "overall": [0.8, 0.8]},
        "2000": {"mnist": [1.0, 1.0], "overall": [0.9, 0.7]},
    }
    profile = {"fisher_stats_samples": 100, "fisher_test_samples": 50}
    run = {"experiment": "figure5", "results": {"auroc": auroc}, "profile": profile}
    text = "\n".join(paper_page.fisher_sizes(run))
    assert "(mean ± std over 2 draws)" in text and "| OOD set / Fisher images | 10 | 2000 |" in text
    assert "fixed: 100 images for the layer statistics and 50 test images per set." in text
    assert "| mnist | 0.950 ± 0.050 | 1.000 ± 0.000 |" in text
    assert "| overall | 0.800 ± 0.000 | 0.800 ± 0.100 |" in text
    assert paper_page.fisher_sizes({"experiment": "figure3", "results": {"auroc": auroc}}) == []


def test_a_run_cut_below_its_profile_says_so_beside_each_figure():
    """A run whose experiment counts were cut below its profile's names each cut beside the profile's
    number in every caption; a run at the profile's own counts says nothing."""
    from docgen import paper_page

    cut = {"fit_samples": 2000, "test_samples": 500, "test_limits": {"lr": 20, "lratio": 200}}
    run = {
        "experiment": "figure4",
        "profile": {"name": "cpu", "experiment_overrides": {"figure4": cut}},
        "figures": [{"file": "a.png", "caption": "Runtime"}],
    }
    caption = (
        "Runtime (cut below the cpu profile: 2000 Fisher images (profile: 10000), 500 test images per "
        "set (profile: 2000), lr on 20 test images per set (profile: 30))"
    )
    assert f"*{caption}*" in paper_page.figures("figure4", run)
    run["profile"]["experiment_overrides"] = {}
    assert "*Runtime*" in paper_page.figures("figure4", run)


def test_figures_4_and_6_show_their_numbers():
    """Figure 4: each method's images/s and overall AUROC beside the paper's where it states one; Figure 6:
    the first, best and last layer's AUROC per classifier and OOD set; other runs get neither table."""
    from docgen import paper_page

    profile = {"name": "cpu", "experiment_overrides": {}}
    points = {"rose-ekfac": [52.04, 0.9], "nll": [300.0, 0.4]}
    run4 = {"experiment": "figure4", "profile": profile, "results": {"points": points}}
    text = "\n".join(paper_page.throughput(run4))
    assert (
        "| rose-ekfac | 52.04 | 110.0 | 0.900 | 0.918 |" in text
        and "| nll | 300.00 | – | 0.400 | – |" in text
    )
    auroc = {"mnist": [0.5, 0.9, 0.7], "notmnist": [0.6, 0.7, 0.8]}
    run6 = {"experiment": "figure6", "profile": profile, "results": {"vgg11": {"layers": [], "auroc": auroc}}}
    text = "\n".join(paper_page.layer_peaks(run6))
    assert "| vgg11 | mnist | 3 | 0.500 | 0.900 (layer 2) | 0.700 |" in text
    assert "| vgg11 | notmnist | 3 | 0.600 | 0.800 (layer 3) | 0.800 |" in text
    assert paper_page.throughput(run6) == [] and paper_page.layer_peaks(run4) == []


def test_numbers_quoted_on_two_pages_agree_with_their_source():
    """A number two pages quote is checked against where it comes from: the zoo's size against its
    folders, the demo's AUROCs on getting-started against the results table."""
    import re

    from roseood.models.zoo import ZOO_NAMES, zoo_dir

    size = sum(p.stat().st_size for n in ZOO_NAMES for p in (zoo_dir() / n).rglob("*") if p.is_file())
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    words += ["eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"]
    words += ["nineteen", "twenty", "twenty-one", "twenty-two"]
    for page in ("docs/zoo.md", "zoo/README.md"):
        text = (ROOT / page).read_text().replace("\n", " ")
        quoted = re.search(rf"{words[len(ZOO_NAMES)]} folders(?: are|:) ([\d.]+) MB", text)
        assert quoted and float(quoted.group(1)) == round(size / 1e6, 1), page
    start = (ROOT / "docs" / "getting-started.md").read_text()
    shown = re.search(r"NLL: ([\d.]+)\s+ROSE-EKFAC: ([\d.]+)", start)
    results = (ROOT / "docs" / "results.md").read_text()
    table = re.search(r"\| NLL \| ([\d.]+) \|\n\| ROSE-EKFAC \| ([\d.]+) \|", results)
    assert shown and table and shown.groups() == table.groups()


def test_the_extras_table_lists_each_extra_of_pyproject_once():
    """getting-started.md's table of extras names every optional dependency set of pyproject.toml, once."""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    page = (ROOT / "docs" / "getting-started.md").read_text()
    table = page[page.index("| extra | what for |") :].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert sorted(listed) == sorted(extras), "the extras table and pyproject.toml's extras differ"
