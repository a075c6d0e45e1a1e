"""README.md says what runs: its set-up matches CI, its commands parse, and its command-line and Python
examples run as written (their sizes shrunk to a tiny data folder by ``tests.recipes.tiny``, as the task
guides' blocks are). Its zoo commands are getting-started.md's, word for word: tests/test_recipes.py runs
them there (a DDPM fit and scoring, about 12 s of CPU), and this file checks that they stay the same."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from roseood.cli import build_parser, main
from tests.recipes import blocks, commands, tiny

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(section: str, language: str) -> list[str]:
    """The ``language`` code blocks of the README section headed ``## section``, in order."""
    text = README[README.index(f"\n## {section}\n") + 1 :]
    text = text.split("\n## ", 1)[0]
    found = re.findall(rf"```{language}\n(.*?)```", text, re.S)
    assert found, f"no {language} block under '## {section}'"
    return found


def _block(section: str, language: str) -> str:
    """The first ``language`` code block of the README section headed ``## section``."""
    return _blocks(section, language)[0]


def test_readme_is_short_and_links_exist():
    assert len(README.splitlines()) <= 130
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_set_up_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    setup = ci[ci.index("# README: set-up") : ci.index("export ")]
    quiet = ("--quiet", "--no-compile")  # how pip speaks and when it byte-compiles, not what it installs
    ci_installs = [
        [a for a in shlex.split(line) if a not in quiet]
        for line in setup.splitlines()
        if line.startswith("pip install")
    ]
    readme = [
        shlex.split(c, comments=True)
        for line in _block("Install", "bash").splitlines()
        for c in line.split("&&")
    ]
    # from the source tree, as CI: no repository address to clone from is written anywhere
    assert readme[-1] == ["pip", "install", "./zoo"]
    assert (
        readme[:-1] == ci_installs
    )  # the zoo is optional in the source tree (found in zoo/), so CI leaves it
    assert "git clone" not in README and "<this repository>" not in README
    assert "python -m pytest" in ci[ci.index("# README: tests") :]


def test_the_two_commands():
    lines = [shlex.split(line, comments=True) for line in _block("The two commands", "bash").splitlines()]
    assert [words for words in lines if words] == [["rose", "demo"], ["python", "-m", "pytest"]]
    assert build_parser().parse_args(["demo"]).command == "demo"


@pytest.fixture
def readme_dir(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    shirts = np.clip((rng.random((1, 28, 28)) > 0.5) * 180 + rng.integers(0, 60, (60, 28, 28)), 0, 255)
    np.savez(data / "fashion_mnist_train.npz", images=shirts.astype(np.uint8), labels=np.zeros(60, np.int64))
    np.savez(
        data / "fashion_mnist_test.npz", images=shirts[:20].astype(np.uint8), labels=np.zeros(20, np.int64)
    )
    np.savez(
        data / "mnist_test.npz", images=(255 - shirts[:20]).astype(np.uint8), labels=np.zeros(20, np.int64)
    )
    for folder, shade in (("my_photos", 60), ("other_photos", 200)):
        (tmp_path / folder).mkdir()
        for i in range(12):
            pixels = np.clip(shade + rng.integers(-40, 40, (20, 20, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tmp_path / folder / f"{i}.png")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.setenv("ROSEOOD_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_zoo_commands_are_getting_starteds():
    """README's zoo commands are a block of getting-started.md that tests/test_recipes.py runs, word for
    word (comments aside): run there once, checked there (every image ``rose demo`` wrote is scored)."""
    zoo = _blocks("Command line", "bash")[0]
    argv = [shlex.split(line, comments=True) for line in commands(zoo)]
    run = [b for b in blocks("docs/getting-started.md") if b.language == "bash" and b.not_run is None]
    assert argv in [[shlex.split(line, comments=True) for line in commands(b.code)] for b in run]
    for args in argv:
        assert args[0] == "rose"
        build_parser(args[1:]).parse_args(args[1:])


def test_command_line_and_python_examples_run(readme_dir, capsys):
    python = _block("Python", "python")
    assert len([line for line in python.splitlines() if line.strip()]) <= 14, "a ~10-line example"
    _, own = _blocks("Command line", "bash")  # the zoo's: test_the_zoo_commands_are_getting_starteds
    for line in tiny(own).splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "rose"
        assert main(argv[1:]) == 0, line
    assert "usable" in capsys.readouterr().out
    scores = (readme_dir / "my_scores.csv").read_text().splitlines()
    assert scores[0] == "index,file,label,score,ood" and len(scores) == 11
    assert (readme_dir / "my_report" / "report.md").exists()
    decisions = (readme_dir / "my_decisions.csv").read_text().splitlines()
    assert decisions[0] == "method,set,index,file,label,score,ood" and len(decisions) == 1 + 2 + 12
    namespace: dict[str, object] = {}
    exec(compile(tiny(python), "README.md", "exec"), namespace)
    assert np.asarray(namespace["scores_out"]).shape == (10,)
    assert (readme_dir / "my_rose_py.pt").exists()
