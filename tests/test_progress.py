"""Progress a person can read: one bar per stage (never nested), periodic lines with an ETA in logs,
nothing unless asked for from Python."""

from __future__ import annotations

import pytest
import torch

from roseood import progress as p
from roseood.detectors import NLL
from roseood.progress import duration, eta, progress, stage


def test_a_loop_inside_a_shown_bar_shows_none_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with stage("rose-ekfac score mnist"):
        for _ in progress(range(3), "outer", enabled=True):
            inner = progress(range(4), "inner", enabled=True)
            assert inner.disable and list(inner) == [0, 1, 2, 3]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"rose-ekfac score mnist: outer: 3/3 (100 %), done in {duration(0)}"]
    assert list(progress(range(2), "after", enabled=True)) == [0, 1]  # the screen was given back
    assert capsys.readouterr().err.startswith("after: 2/2")


def test_an_abandoned_loop_gives_the_screen_back(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ZeroDivisionError):
        for i in progress(range(5), "fails", enabled=True):
            _ = 1 / (i - 1)
    assert p._open_bars == 0
    assert capsys.readouterr().err.startswith("fails: 1/5 (20 %)")


def test_log_lines_come_periodically_with_elapsed_time_and_eta(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter(range(0, 1000, 20))  # every call to the clock is 20 s later
    monkeypatch.setattr(p.time, "monotonic", lambda: float(next(clock)))
    bar = progress(None, "Fisher", total=10, enabled=True)
    for _ in range(10):
        bar.update(1)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "Fisher: 2/10 (20 %), 40 s, ETA 2 min 40 s"
    assert lines[-1] == "Fisher: 10/10 (100 %), done in 3 min 40 s" and len(lines) == 5
    assert "\r" not in "".join(lines)


def test_quiet_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress(range(3), "off", enabled=False)) == [0, 1, 2]
    list(progress(range(3), "terminal only"))  # None: only on a terminal, and pytest's stderr is none
    assert capsys.readouterr().err == ""


def test_eta_and_duration_read_like_a_person_writes() -> None:
    assert (duration(42.4), duration(185), duration(7620)) == ("42 s", "3 min 05 s", "2 h 07 min")
    assert eta(1, 4, 10.0) == "ETA 30 s" and eta(0, 4, 10.0) == "" and eta(4, 4, 10.0) == ""


def test_detectors_report_progress_only_when_asked(capsys: pytest.CaptureFixture[str], tiny_vae) -> None:
    x = torch.rand(6, 1, 32, 32)
    NLL(tiny_vae, batch_size=2).fit(x).score(x)
    assert capsys.readouterr().err == ""
    NLL(tiny_vae, batch_size=2, progress=True).fit(x).score(x)
    assert "NLL: 3/3 (100 %)" in capsys.readouterr().err


def test_progress_is_on_by_default_on_a_terminal_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tiny_vae
) -> None:
    """Python like the ecosystem: unset progress shows bars where a person watches (stderr a terminal),
    nothing in logs, pipes and tests; True or False decides."""
    assert not NLL(tiny_vae).progress and not p.resolve(None)  # pytest's stderr is no terminal
    monkeypatch.setattr(p, "on_terminal", lambda: True)
    assert p.resolve(None) and not p.resolve(False)
    assert NLL(tiny_vae).progress and not NLL(tiny_vae, progress=False).progress
    x = torch.rand(4, 1, 32, 32)
    NLL(tiny_vae, batch_size=2).fit(x).score(x)
    assert "NLL" in capsys.readouterr().err


def test_forecast_rest_speaks_only_for_a_run_longer_than_a_progress_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run of 100 units whose first took 0.2 s (20 s in all) starts within the first progress line:
    nothing said; at 0.5 s (50 s) the forecast line, before the rest."""
    p.forecast_rest("sampling", 0.2, 100, "from one timed step")
    assert capsys.readouterr().err == ""
    p.forecast_rest("sampling", 0.5, 100, "from one timed step")
    assert capsys.readouterr().err.startswith("sampling: ≈ 50 s on this machine (")
