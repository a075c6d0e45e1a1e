"""Every ``bash`` and ``python`` block of the task guides runs as written, on tiny data (sizes shrunk by
``tests.recipes.TINY``), in page order in one folder, so a page cannot go stale silently; a block that
cannot run here carries ``<!-- not run: REASON -->`` on the line before it. README.md's blocks are run by
tests/test_readme.py, but for its zoo commands: getting-started.md's, run (and checked) here."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from roseood import demo
from roseood.cli import build_parser, main
from roseood.data import loading
from roseood.detectors.base import DETECTORS, METHODS
from roseood.models import VAE, save_model
from tests.conftest import FULL
from tests.recipes import ROOT, blocks, commands, tiny, tiny_folders

TINY_N = 20  # images of a generated set
pytestmark = pytest.mark.slow  # trains tiny models and fits detectors: about a minute (FULL: four)

# Pages whose blocks train and score DDPMs (a minute or two each): by default their commands are parsed and
# their Python compiled; ROSEOOD_TESTS=full runs them (tests/test_cli_diffusion.py runs diffusion.md's
# train, export and evaluate commands at a tiny size in every run).
FULL_ONLY = ("docs/diffusion.md", "docs/zoo.md")

PAGES = (
    "docs/getting-started.md",
    "docs/own-images.md",
    "docs/images-devices.md",
    "docs/byo-model.md",
    "docs/detectors.md",
    "docs/diffusion.md",
    "docs/zoo.md",
    "docs/data.md",
    "docs/distributed.md",
    "docs/extending.md",
    "docs/bench.md",
    "docs/speed.md",
    "docs/contributing.md",
)

# What a page's Python blocks take as given (named in its prose: "your model", "images"), made tiny
PRELUDES = {
    "docs/byo-model.md": """
from torch import nn
module = nn.Module()
module.enc = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3))
def loss_fn(x):
    return module.enc(x).pow(2).flatten(1).mean(1)
""",
    "docs/diffusion.md": """
from roseood.data import load_images
images = load_images("fashion_mnist:train", n=12, size=None).images  # 28×28, as the page's DDPM
more_images = load_images("fashion_mnist:train", n=4, seed=1, size=None).images
new_images = load_images("mnist", n=4, size=None).images
""",
    "docs/detectors.md": """
from roseood.data import load_images
from roseood.detectors import ROSE
from roseood.models import load_model
model = load_model("vae.pt")
models = [load_model("vae.pt"), load_model("vae.pt")]
train = load_images("fashion_mnist:train", n=40).images
images = load_images("mnist", n=4).images
""",
    "docs/extending.md": """
import sys
sys.path.insert(0, "examples")
from roseood.data import load_images
train_images = load_images("fashion_mnist:train", n=40).images
test_images = load_images("mnist", n=4).images
""",
}


def _gray(rng: np.random.Generator, n: int, shade: int) -> np.ndarray:
    return np.clip(shade + rng.integers(-60, 60, (n, 28, 28)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """What every page's folder links to: a tiny data folder (the named sets the pages use) and image
    folders of the names the pages give."""
    root = tmp_path_factory.mktemp("recipes")
    rng = np.random.default_rng(0)
    data = root / "data"
    data.mkdir()
    sets = {
        "fashion_mnist_train": _gray(rng, 40, 70),
        "fashion_mnist_test": _gray(rng, 20, 70),
        "mnist_test": _gray(rng, 20, 20),
        "notmnist_test": _gray(rng, 20, 140),
        "cifar10_train": rng.integers(0, 255, (40, 32, 32, 3), dtype=np.uint8),
        "cifar10_test": rng.integers(0, 255, (20, 32, 32, 3), dtype=np.uint8),
        "celeba_test": rng.integers(60, 200, (20, 32, 32, 3), dtype=np.uint8),
    }
    for name, images in sets.items():
        np.savez(data / f"{name}.npz", images=images, labels=np.zeros(len(images), np.int64))
    gray = ("my_images", "my_training_images")  # the pages make clothes/, photos/ (rose demo --folders)
    for i, name in enumerate(gray):
        (root / name).mkdir()
        for j, pixels in enumerate(_gray(rng, 12, 40 + 20 * i)):
            Image.fromarray(pixels).save(root / name / f"{j}.png")
    (root / "celeba_images").mkdir()
    for j in range(6):
        Image.fromarray(rng.integers(0, 255, (40, 36, 3), dtype=np.uint8)).save(
            root / "celeba_images" / f"{j}.jpg"
        )
    return root


@pytest.fixture
def folder(shared, page, tmp_path) -> Path:
    """A page's own folder: links to the shared data and image folders and to the repository's
    ``src``/``examples``, a tiny VAE as ``vae.pt`` (the pages' "your model") unless the page trains it,
    and ``my-ddpm/`` naming the DDPM the page trains."""
    for item in shared.iterdir():
        (tmp_path / item.name).symlink_to(item)
    for name in ("src", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    if page != "docs/getting-started.md":
        save_model(_tiny_vae(), tmp_path / "vae.pt")
    (tmp_path / "my-ddpm").symlink_to(tmp_path / "fmnist-ddpm")
    return tmp_path


def _tiny_vae() -> VAE:
    """The pages' model, tiny as the data: an EKFAC fit on the 32-wide demo VAE takes 3 s of CPU whatever
    the image count (the eigenbasis of its 2049-input layer), and detectors.md's, extending.md's and
    getting-started.md's blocks fit 7."""
    torch.manual_seed(0)
    return VAE(in_channels=1, ngf=4, nz=4).eval()


def _parse(block) -> None:
    """The reduced check: every command parses as the CLI would take it, the Python compiles."""
    if block.language == "python":
        compile(block.code, block.where, "exec")
        return
    for command in commands(block.code):
        argv = shlex.split(command, comments=True)
        assert argv[0] == "rose", f"{block.where}: {command!r} is not a rose command; mark the block"
        build_parser(argv[1:]).parse_args(argv[1:])


def _run_bash(block, capsys) -> None:
    for command in commands(tiny(block.code)):
        argv = shlex.split(command, comments=True)
        assert argv[0] == "rose", f"{block.where}: {command!r} is not a rose command; mark the block"
        code = main(argv[1:])
        assert code == 0, f"{block.where}: {command}\n{capsys.readouterr().err[-2000:]}"


@pytest.mark.parametrize("page", PAGES)
def test_every_block_runs_or_says_why_not(page, folder, monkeypatch, capsys):
    monkeypatch.chdir(folder)
    monkeypatch.setenv("ROSEOOD_DATA", str(folder / "data"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    tiny_folders(monkeypatch)
    # getting-started.md's demo_model() too: the demo VAE's own fits are tests/test_demo.py's,
    # tests/detectors/test_rose.py's and the regression scores'
    monkeypatch.setattr(demo, "demo_model", _tiny_vae)
    # generated sets (noise, constant) as tiny as the stored ones: the pages take the default counts
    generate = loading._generate
    monkeypatch.setattr(
        loading, "_generate", lambda name, n, *a: generate(name, min(n or TINY_N, TINY_N), *a)
    )
    # what a page registers (extending.md's Mahalanobis detector) or imports from examples/ stays here:
    # the registries are restored and those modules forgotten after the page, so later tests see neither
    for registry in (DETECTORS, METHODS):
        monkeypatch.setattr(registry, "_items", dict(registry._items))
    before = set(sys.modules)
    try:
        _run_page(page, capsys)
    finally:
        for name in set(sys.modules) - before:
            if str(ROOT / "examples") in str(getattr(sys.modules[name], "__file__", "")):
                del sys.modules[name]
    assert Path(os.getcwd()) == folder
    if page == "docs/getting-started.md":  # README.md's zoo commands too (tests/test_readme.py)
        scores = Path("photo_scores.csv").read_text().splitlines()  # every image rose demo wrote
        assert scores[0] == "index,file,label,score,ood" and len(scores) == 1 + len(
            list(Path("photos").iterdir())
        )


def _run_page(page: str, capsys) -> None:
    """Every block of ``page`` in order, in the working directory."""
    namespace: dict[str, object] = {}
    if page in PRELUDES:
        exec(PRELUDES[page], namespace)
    found = blocks(page)
    assert found, f"{page}: no blocks (take it off PAGES)"
    for block in found:
        if block.not_run is not None:
            assert len(block.not_run.split()) >= 3, f"{block.where}: say why it is not run"
            continue
        if block.code.lstrip().startswith("--8<--"):
            continue  # a file included into the page (examples/): tests/examples runs it
        if page in FULL_ONLY and not FULL:
            _parse(block)
            continue
        if block.language == "bash":
            _run_bash(block, capsys)
        else:
            exec(compile(tiny(block.code), block.where, "exec"), namespace)
