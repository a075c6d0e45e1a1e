"""``python -m research``: rose bench's options and runner over the research registry and profiles."""

from __future__ import annotations

import pytest
from research.__main__ import build_parser

from research import EXPERIMENTS
from roseood.bench import run_experiment
from roseood.cli import main
from roseood.cli.bench import RESEARCH
from roseood.errors import RoseError
from tests.bench.smoke import smoke_workspace

pytestmark = pytest.mark.research  # not in the default run: see pyproject.toml's markers


def test_rose_bench_names_the_experiments_research_registers():
    assert tuple(EXPERIMENTS) == RESEARCH


def test_it_lists_the_research_experiments_and_refuses_the_papers(capsys, tmp_path):
    assert main(["--list"], build_parser) == 0
    out = capsys.readouterr().out
    assert out.startswith("experiments (python -m research NAME") and all(n in out for n in EXPERIMENTS)
    assert main(["table2", "--profile", "smoke", "--out", str(tmp_path)], build_parser) == 2
    assert "unknown experiment(s) table2" in capsys.readouterr().err
    assert main(["near-ood", "--profile", "huge", "--out", str(tmp_path)], build_parser) == 2
    assert "unknown profile 'huge'" in capsys.readouterr().err


def test_a_workspace_of_the_benchs_own_profile_is_refused_in_one_line(tmp_path):
    with pytest.raises(RoseError, match="no research settings: run the experiment by python -m research"):
        run_experiment("diffusion", smoke_workspace(tmp_path), EXPERIMENTS)
