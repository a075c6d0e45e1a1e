"""The CLI helps: every option documents itself and its default, progress goes to a log as plain lines
(no ``\\r`` redraws), and ``rose datasets | head`` ends without a BrokenPipeError traceback."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest
import torch

from roseood.cli import build_parser
from roseood.detectors import METHODS
from roseood.progress import progress


def subcommands(
    parser: argparse.ArgumentParser | None = None, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by name, nested ones (``train vae``) included."""
    parser = parser or build_parser()
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found |= subcommands(sub, f"{prefix}{name} ")
    return found


@pytest.mark.parametrize("name", list(subcommands()))
def test_every_option_has_help_and_shows_its_default(name: str) -> None:
    sub = subcommands()[name]
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"rose {name} {action.option_strings or action.dest} has no help"
    text = sub.format_help()
    shown = [
        a for a in sub._actions if a.default not in (None, False, argparse.SUPPRESS) and a.option_strings
    ]
    for action in shown:
        # whitespace dropped: argparse may wrap a default at its hyphen ("rose-" / "ekfac")
        assert "".join(f"(default: {action.default})".split()) in "".join(text.split()), action.dest


def test_methods_help_lists_every_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    # argparse may still wrap a line at a name's hyphen ("rose-" / "bands-stats-compact-wide")
    text = re.sub(r"-\s+", "-", subcommands()["evaluate"].format_help())
    assert all(m in text for m in METHODS)
    assert "(test split)" not in subcommands()["fit"].format_help()


def test_progress_off_a_terminal_prints_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress(range(37), "work", enabled=True)) == list(range(37))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["work: 37/37 (100 %), done in 0 s"]  # a quick loop: its closing line only
    list(progress(range(5), "quiet"))  # default: only on a terminal, and pytest's stderr is none
    assert capsys.readouterr().err == ""


def test_detector_calibration_threshold_round_trips(tiny_vae, images: torch.Tensor, tmp_path) -> None:
    from roseood.detectors import NLL, Detector

    det = NLL(tiny_vae).fit(images[:8]).calibrate(images[8:], tpr=0.75)
    held = det.score(images[8:])
    assert det.threshold_ is not None and (held <= det.threshold_).mean() >= 0.75
    assert det.decide(held).sum() == (held > det.threshold_).sum()
    det.save(tmp_path / "d.pt")
    assert Detector.load(tmp_path / "d.pt", tiny_vae).threshold_ == det.threshold_


def test_closed_pipe_gives_no_traceback() -> None:
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        f"'{sys.executable}' -m roseood.cli datasets | head -c 10",
        shell=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(proc.stdout) == 10 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_a_reader_that_left_loses_no_file_the_command_was_asked_to_write(tmp_path) -> None:
    """``rose evaluate ... | head``: the tables go nowhere once the reader has gone, and the command goes on
    to write its report and JSON (it used to stop at the first print with a closed pipe, status 141)."""
    import numpy as np

    from roseood.models import VAE, save_model

    save_model(VAE(ngf=4, nz=4), tmp_path / "m.pt")
    rng = np.random.default_rng(0)
    for name, low in (("in", 0), ("out", 150)):
        np.savez(tmp_path / f"{name}.npz", images=rng.integers(low, low + 100, (24, 28, 28), dtype=np.uint8))
    args = "--in in.npz --ood out.npz --methods nll --fit-samples 8 --stats-samples 4 --test-samples 8"
    args += " --report rep --json r.json"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseood.cli", "evaluate", "--model", "m.pt", *args.split()],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader leaves before the first line
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
    assert (tmp_path / "rep" / "index.html").is_file() and (tmp_path / "r.json").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["bench", "--list-x"],
        ["datasets", "--bogus"],
        ["nonsense"],
        ["evaluate", "--methods", "bogus"],
        ["evaluate", "--help"],
        ["fit", "--method", "bogus"],
        ["score", "--detector", "d.pt"],
        ["train", "--help"],
        ["train", "diffusion", "--help"],
        ["train", "vae", "--out", "m.pt", "--epochs", "-1"],
        ["train", "glow", "--out", "m.pt", "--resize", "bogus"],
    ],
)
def test_help_and_refusals_import_no_torch(argv: list[str]) -> None:
    """`rose --help` lists every command without building the groups it does not name, and the detector
    commands and `rose train`'s families read their choices and options from the torch-free catalogue: a
    fresh interpreter answers these, through the console command's ``run``, without torch, scipy or
    sklearn in sys.modules."""
    code = (
        "import sys\n"
        "from roseood.cli import run\n"
        f"sys.argv = ['rose', *{argv!r}]\n"
        "try:\n"
        "    run()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "heavy = sorted(m for m in ('torch', 'scipy', 'sklearn') if m in sys.modules)\n"
        "print('heavy:', heavy, 'code:', code)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "heavy: [] code:" in out.stdout, out.stdout + out.stderr


def test_the_listing_parser_names_every_command_with_its_full_help() -> None:
    """The help `rose --help` shows (commands listed, not built) is the help of the full parser."""

    def listed(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {c.dest: c.help for c in action._choices_actions}

    assert listed(build_parser(["--help"])) == listed(build_parser())


def test_the_top_help_says_where_to_start(capsys: pytest.CaptureFixture[str]) -> None:
    from roseood.cli import main

    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the epilog last, however argparse wraps it
    assert text.endswith(
        "Start with `rose demo` (offline, about 3 minutes); each command's options: rose COMMAND --help; "
        "the guides: docs/getting-started.md."
    )


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    from roseood.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"roseood {version('roseood')}\n"  # pyproject's, as installed
