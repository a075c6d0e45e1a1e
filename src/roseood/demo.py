"""``rose demo``: ROSE vs the plain likelihood on Fashion-MNIST vs MNIST, fully offline; ``rose demo
--folders DIR``: the same sample written as folders of PNG files, for the guides' worked examples.

Uses only what ships inside the package: the authors' Fashion-MNIST VAE and a small real sample of
Fashion-MNIST and MNIST (see ``roseood/assets/README.md`` for sources and licences).
"""

from __future__ import annotations

import os
import tempfile
import time
from importlib.resources import files
from pathlib import Path

import numpy as np
import torch

from roseood.data.preprocess import preprocess
from roseood.detectors import NLL, ROSE
from roseood.evaluation.metrics import ood_metrics
from roseood.models import RoseModel, load_model
from roseood.models.base import model_config
from roseood.validation import check_int, check_seed

ASSETS = files("roseood") / "assets"

# where a newcomer goes from the demo: the guide that fits on a folder and scores another
NEXT = (
    "rose demo --folders . writes example folders of PNG files; docs/own-images.md fits on one, scores "
    "another"
)
# The example folders ``write_folders`` makes (docs/own-images.md and docs/getting-started.md use them):
# each folder's parts as (sample array, first image, images, file-name prefix, what they are). No image is
# in two folders.
FOLDERS: dict[str, tuple[tuple[str, int, int, str, str], ...]] = {
    "clothes": (("fashion_mnist_train", 0, 1500, "", "Fashion-MNIST training images"),),
    "photos": (
        ("fashion_mnist_test", 0, 150, "fashion_", "Fashion-MNIST test images"),
        ("mnist_test", 0, 50, "digit_", "MNIST digits"),
    ),
    "held_out_clothes": (("fashion_mnist_test", 150, 200, "", "other Fashion-MNIST test images"),),
    "odd_images": (("mnist_test", 50, 200, "", "other MNIST digits"),),
}


def demo_model() -> RoseModel:
    """The ROSE authors' Fashion-MNIST VAE (ngf 32, latent 100) shipped with the package."""
    return load_model(Path(str(ASSETS / "fmnist_vae_ngf32.pt")))


def demo_images() -> dict[str, np.ndarray]:
    """The shipped sample, preprocessed to (N, 1, 32, 32) uint8: fashion_mnist_train/_test, mnist_test."""
    with np.load(Path(str(ASSETS / "demo_samples.npz"))) as d:
        keys = ("fashion_mnist_train", "fashion_mnist_test", "mnist_test")
        return {k: preprocess(d[k], channels=1, size=32, brightness=1.0) for k in keys}


def write_folders(root: str | Path) -> dict[str, str]:
    """Write ``FOLDERS`` into ``root`` as 28×28 grayscale PNG files (``0000.png``, …; ``photos/`` as
    ``fashion_000.png`` and ``digit_000.png``) from the shipped sample, and return what each holds.

    Each folder is written under a temporary name and renamed when whole; the caller checks that none of
    them exists (``rose demo --folders`` refuses an existing one)."""
    from PIL import Image

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    with np.load(Path(str(ASSETS / "demo_samples.npz"))) as d:
        for name, parts in FOLDERS.items():
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
            for key, first, count, prefix, _ in parts:
                width = max(3, len(str(count - 1)))
                for i, pixels in enumerate(d[key][first : first + count]):
                    Image.fromarray(pixels).save(tmp / f"{prefix}{i:0{width}d}.png")
            os.chmod(tmp, 0o777 & ~_umask())
            os.rename(tmp, root / name)
            written[name] = " and ".join(f"{count} {what}" for _, _, count, _, what in parts)
    return written


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def run_demo(
    fit_samples: int = 2000, test_samples: int = 1000, seed: int = 2021, progress: bool = True
) -> dict[str, float]:
    """Fit ROSE-EKFAC on Fashion-MNIST training images; print NLL and ROSE AUROC vs MNIST."""
    check_int(fit_samples, "fit_samples")
    check_int(test_samples, "test_samples")
    check_seed(seed)
    torch.manual_seed(seed)
    t0 = time.time()
    model = demo_model()
    images = demo_images()
    train = images["fashion_mnist_train"]
    n_stats = max(50, fit_samples // 4)
    fit_samples = min(fit_samples, len(train) - n_stats)
    fisher, stats = train[:fit_samples], train[fit_samples : fit_samples + n_stats]
    test_in, test_out = images["fashion_mnist_test"][:test_samples], images["mnist_test"][:test_samples]
    print(f"model: the ROSE authors' Fashion-MNIST VAE {model_config(model)}")
    print(f"data: {len(fisher)} Fashion-MNIST training images for the Fisher, {len(stats)} for layer stats;")
    print(f"      {len(test_in)} Fashion-MNIST test images (in-distribution) vs {len(test_out)} MNIST ones")
    nll = NLL(model).fit(fisher)
    rose = ROSE(model, fisher="ekfac", progress=progress).fit(fisher, held_out=stats)
    auroc = {
        "nll": ood_metrics(nll.score(test_in), nll.score(test_out))["auroc"],
        "rose-ekfac": ood_metrics(rose.score(test_in), rose.score(test_out))["auroc"],
    }
    print(f"\nAUROC Fashion-MNIST vs MNIST   NLL: {auroc['nll']:.3f}   ROSE-EKFAC: {auroc['rose-ekfac']:.3f}")
    print(
        "The VAE gives MNIST digits *higher* likelihood than its own training data (AUROC < 0.5); ROSE asks\n"
        "how far the model would have to move to fit each image, which separates them."
    )
    print(f"({time.time() - t0:.0f} s on {torch.get_num_threads()} CPU threads)")
    print(f"next, your own images: {NEXT}")
    return auroc
