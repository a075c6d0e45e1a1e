"""The two distributions a user installs: roseood's wheel and the zoo's (``pip install . ./zoo``). Both are
built, installed into a fresh virtual environment and a zoo model is loaded by name from another folder,
with no ``$ROSEOOD_ZOO`` and no checkout in sight."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # builds two wheels (72 MB of weights) and installs them: about 20 s


def _run(args: list[str | Path], **kwargs) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with the two wheels installed. Their dependencies (torch, diffusers, …)
    are this environment's, seen through a path file; its own editable roseood is not (a path file's
    folders are not site folders, so the editable install's hook never runs there)."""
    tmp = tmp_path_factory.mktemp("wheels")
    # built from copies: a build folder left in the tree (setuptools' build/lib) could add stale modules
    skip = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    for name in ("src", "pyproject.toml", "README.md", "LICENSE"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, tmp / "roseood" / name, **({"ignore": skip} if name == "src" else {}))
    shutil.copytree(ROOT / "zoo", tmp / "zoo", ignore=skip)
    for project in (tmp / "roseood", tmp / "zoo"):
        _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp / "dist", project])
    env = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", env])
    python = env / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    outer = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    (purelib / "outer.pth").write_text("\n".join(dict.fromkeys(outer)) + "\n")
    wheels = sorted((tmp / "dist").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["roseood", "roseood_zoo"]
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index"]
    _run([*pip, *wheels])
    return env


# In the venv, from another folder: where roseood comes from, a card, and a model loaded by name. One
# process: each start imports torch (1.5 s of CPU). The model is loaded, not checked (`rose check-model`'s
# dry run of the zoo DDPM cost 6 s more): tests/models/test_zoo.py runs every zoo model in the checkout.
INSTALLED = """
import roseood
from roseood.cli import main
from roseood.models import load_model

print(roseood.__file__)
main(["zoo", "ddpm-fmnist-s0"])
print("layers:", *load_model("ddpm-fmnist-s0").layer_sets()["all"])  # those ROSE takes by default
"""


def test_a_zoo_model_loads_by_name_from_the_installed_wheels(venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ROSEOOD_ZOO", "PYTHONPATH")}
    listing = _run([venv / "bin" / "rose", "zoo"], cwd=tmp_path, env=env)  # the installed command
    assert "roseood_zoo" in listing.splitlines()[0] and "ddpm-fmnist-s0" in listing
    assert "missing" not in listing
    where, *card = _run([venv / "bin" / "python", "-c", INSTALLED], cwd=tmp_path, env=env).splitlines()
    assert Path(where).resolve().is_relative_to(venv.resolve()), "roseood came from outside the venv"
    assert card[0] == "# ddpm-fmnist-s0" and "## Licence" in card
    layers = next(line for line in card if line.startswith("layers:")).split()
    assert "unet.conv_in" in layers
    # the model's files are the installed zoo's, checked against its SHA256SUMS
    assert any("roseood_zoo/ddpm-fmnist-s0 (its files match SHA256SUMS" in line for line in card)
