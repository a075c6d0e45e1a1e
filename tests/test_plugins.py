"""Plug-ins from outside roseood reach the command line: a package's ``roseood.plugins`` entry point (or
``$ROSEOOD_PLUGINS``) is imported before a command that takes what it registers, so ``rose fit --method``
offers its detector and ``rose score``, in a later process, reads the file it wrote; a plug-in that
cannot be imported is one line, naming it and where it was declared."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from roseood import plugins
from roseood.cli import main
from roseood.detectors import DETECTORS, METHODS, Detector
from roseood.models import load_model
from tests.test_cli import workdir  # noqa: F401 - the fixture (a tiny VAE in model.pt; data)

PLUGIN = '''
"""A detector from outside roseood: an image's mean pixel, registered as importing roseood's own are."""
from roseood.detectors import Detector, register_detector


class MeanPixel(Detector):
    method = "mean-pixel-plugin"

    def __init__(self, model, *, batch_size: int = 64, progress: bool | None = None):
        super().__init__(model, batch_size=batch_size, progress=progress)

    def _fit(self, x):
        pass

    def _score(self, x):
        return x.flatten(1).mean(1)


register_detector(MeanPixel)
'''


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``mean_pixel_plugin`` as an installed package declares it: the module and a dist-info folder with
    its entry point, on the path (where importlib.metadata finds installed packages)."""
    site = tmp_path / "site"
    (site / "mean_pixel_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "mean_pixel_plugin.py").write_text(PLUGIN)
    info = site / "mean_pixel_plugin-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mean-pixel-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[roseood.plugins]\nmean-pixel = mean_pixel_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    plugins.installed.cache_clear()  # as a process started after the install
    yield site
    forget("mean_pixel_plugin")
    plugins.installed.cache_clear()


def forget(module: str) -> None:
    """As a fresh process: the plug-in neither imported nor registered."""
    sys.modules.pop(module, None)
    plugins._loaded.pop(module, None)
    for registry in (METHODS, DETECTORS):
        if "mean-pixel-plugin" in registry:
            del registry["mean-pixel-plugin"]


def test_an_installed_plugins_detector_is_fitted_and_its_file_scored_from_the_command_line(
    installed: Path,
    workdir: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plugins.declared() == {"mean_pixel_plugin": "entry point 'mean-pixel' of mean-pixel-plugin"}
    args = ("--model", "model.pt", "--method", "mean-pixel-plugin", "--fit-samples", "20")
    assert main(["fit", *args, "--stats-samples", "10", "--out", "plugin.pt"]) == 0, capsys.readouterr().err
    assert "wrote plugin.pt: mean-pixel-plugin fitted on 30 images" in capsys.readouterr().out
    forget("mean_pixel_plugin")  # rose score runs in a process that has not imported it
    score = ("--model", "model.pt", "--detector", "plugin.pt", "--data", "mnist", "--out", "s.csv")
    assert main(["score", *score]) == 0, capsys.readouterr().err
    rows = list(csv.DictReader((workdir / "s.csv").open()))
    assert len(rows) == 30 and all(0 <= float(r["score"]) <= 1 for r in rows)  # a mean pixel in [0, 1]
    assert main(["fit", "--help"]) == 0 and "mean-pixel-plugin" in capsys.readouterr().out  # offered
    forget("mean_pixel_plugin")  # in Python too, the file of a plug-in's detector reads as a built-in's
    loaded = Detector.load(workdir / "plugin.pt", load_model(workdir / "model.pt"))
    assert type(loaded).__name__ == "MeanPixel" and loaded.threshold_ is not None


def test_a_plugin_named_by_the_variable_or_one_that_fails_is_one_line(
    installed: Path,
    workdir: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (installed / "broken_plugin.py").write_text("raise RuntimeError('needs a licence key\\nsecond line')\n")
    monkeypatch.setenv("ROSEOOD_PLUGINS", " broken_plugin , ")
    assert plugins.declared()["broken_plugin"] == "$ROSEOOD_PLUGINS"
    assert main(["fit", "--model", "model.pt", "--out", "x.pt"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: plug-in 'broken_plugin' ($ROSEOOD_PLUGINS) cannot be imported: RuntimeError: needs a licence "
        "key"
    )
    assert not (workdir / "x.pt").exists()
    # a detector whose parameter has no type hint: its files could not be checked, so it is not registered
    bare = PLUGIN.replace("mean-pixel-plugin", "bare-plugin").replace("batch_size: int = 64", "batch_size=64")
    (installed / "bare_plugin.py").write_text(bare)
    monkeypatch.setenv("ROSEOOD_PLUGINS", "bare_plugin")
    assert main(["evaluate", "--help"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: plug-in 'bare_plugin' ($ROSEOOD_PLUGINS) cannot be imported: RoseError: ")
    assert err.endswith(
        "MeanPixel: parameter batch_size has no type hint, which a saved file's values are "
        "checked against when it is read; annotate it (e.g. batch_size: int = 64)"
    )
    assert "bare-plugin" not in METHODS
    monkeypatch.setenv("ROSEOOD_PLUGINS", "no_such_plugin_module")
    assert main(["score", "--help"]) == 2
    assert "plug-in 'no_such_plugin_module' ($ROSEOOD_PLUGINS) cannot be imported: ModuleNotFoundError" in (
        capsys.readouterr().err
    )
    assert main(["datasets"]) == 0  # commands that take nothing a plug-in registers do not import them
