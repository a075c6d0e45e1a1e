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
    """README, detectors.md and diffusion.md hold exactly the table ``benchmarks.decision_table`` renders
    (its rows: docs/generated/decisions.json), and every built-in family's default appears in it, taken
    from the catalogue that `rose fit` and `rose evaluate` read."""
    from benchmarks import decision_table

    from roseood.catalogue import TRAIN_OPTIONS

    for page in decision_table.PAGES:
        text = (decision_table.ROOT / page).read_text(encoding="utf-8")
        assert decision_table.current(text) == decision_table.block(page), (
            f"{page}: rewrite it with python -m benchmarks.decision_table --write"
        )
    families = {row.get("family") for row in decision_table.rows()}
    assert set(TRAIN_OPTIONS) <= families
    rendered = decision_table.render()
    for name, options in TRAIN_OPTIONS.items():
        assert f"`{options.method}` (the default for this family)" in rendered, name


def test_results_stays_a_summary():
    """docs/results.md holds headline tables only (issue 61: ≤ 300 lines); full tables go to docs/lab/."""
    lines = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text().splitlines()
    assert len(lines) <= 300, f"docs/results.md has {len(lines)} lines: move full tables to docs/lab/"


def test_the_paper_page_is_what_its_committed_results_render():
    """docs/paper.md is ``benchmarks.paper_page``'s rendering of docs/generated/paper/; a row shows Δ, bold
    beyond 0.05, and † when the paper's number lies outside our interval."""
    from benchmarks import paper_page

    assert (ROOT / "docs" / "paper.md").read_text() == paper_page.render(), (
        "python -m benchmarks.paper_page --write"
    )
    run = {
        "experiment": "table2",
        "title": "Table 2",
        "wall_seconds": 600.0,
        "profile": {"name": "cpu", "cuts": "fewer epochs"},
        "machine": {"cpu": "2 cores"},
        "comparison": [
            {"labels": ["vae", "mnist"], "ours": 0.99, "paper": 0.98, "interval": [0.985, 0.995], "why": ""},
            {"labels": ["glow", "svhn"], "ours": 0.80, "paper": 0.90, "interval": [0.78, 0.82], "why": "x"},
        ],
    }
    text = paper_page.section(run)
    assert "| vae / mnist | 0.980 | 0.990 † | +0.010 |" in text
    assert "| glow / svhn | 0.900 | 0.800 † | **-0.100** | x |" in text
    assert "no date: 10.0 min on cpu 2 cores" in text
    noted = paper_page.section(
        run
        | {
            "date": "2026-11-29 09:40 UTC",
            "note": "VAE rows only.",
            "models": {"vae-a": {"reused": True}, "vae-b": {"reused": False}},
        }
    )
    assert (
        "2026-11-29 09:40 UTC: 10.0 min (reusing from its cache: vae-a) on cpu 2 cores. VAE rows only."
        in noted
    )


def test_numbers_quoted_on_two_pages_agree_with_their_source():
    """A number two pages quote is checked against where it comes from: the zoo's size against its
    folders, the demo's AUROCs on getting-started against the results table."""
    import re

    from roseood.models.zoo import ZOO_NAMES, zoo_dir

    size = sum(p.stat().st_size for n in ZOO_NAMES for p in (zoo_dir() / n).rglob("*") if p.is_file())
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    words += ["eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"]
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
