"""Scores of every detector on two real models, for the regression test of refactors.

``python -m tests.regression.scores record`` writes ``expected_scores.npz`` (run it only at a commit whose
scores are the reference); the test computes the same scores and compares them to 1e-6.
Models: the shipped demo VAE (ngf 32) and the ROSE authors' seed-1 Fashion-MNIST VAE (ngf 16), with the
authors' background VAE for ``lratio``. Images: the shipped demo sample (small, so the test is quick).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from roseood.demo import demo_images, demo_model
from roseood.detectors import METHODS, DiffusionDetector, make_detector
from roseood.models.vae import load_authors_vae

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected_scores.npz"
AUTHORS = HERE.parents[2] / "shared" / "models" / "rose-paper-vae"
FIT, HELD_OUT, TEST = 96, 32, 8
# Settings that keep the test quick; every code path of the method still runs.
QUICK = {
    "rose-dense": {"layers": ["encoder.conv0"]},  # a dense Fisher needs a small layer
    "lr": {"steps": 3},
    **{m: {"epochs": 1} for m in ("rnd-svd", "rnd-dct", "rnd-gb", "rnd-random")},
}


def authors_vae(stem: str) -> torch.nn.Module:
    return load_authors_vae(AUTHORS / f"{stem}_netE.pth", AUTHORS / f"{stem}_netG.pth")


def compute() -> dict[str, np.ndarray]:
    """``{model/method: scores}`` for every method on both models (global RNG seeded per fit and score)."""
    torch.set_num_threads(1)
    images = demo_images()
    train = images["fashion_mnist_train"]
    fit, held = train[:FIT], train[FIT : FIT + HELD_OUT]
    test = np.concatenate([images["fashion_mnist_test"][:TEST], images["mnist_test"][:TEST]])
    background = authors_vae("fmnist_background_ratio0.3_ngf32_nz100")
    models = {"demo": demo_model(), "seed1": authors_vae("fmnist_ngf16_nz100_seed1")}
    out = {}
    for name, model in models.items():
        for method in METHODS:
            if issubclass(METHODS[method][0], DiffusionDetector):  # needs a diffusion model, not these VAEs
                continue
            extra = {"background": background} if method == "lratio" else QUICK.get(method, {})
            torch.manual_seed(0)
            det = make_detector(method, model, progress=False, **extra).fit(fit, held_out=held)
            torch.manual_seed(1)
            out[f"{name}/{method}"] = det.score(test)
    return out


if __name__ == "__main__" and sys.argv[1:] == ["record"]:
    np.savez(EXPECTED, **compute())
    print(f"wrote {EXPECTED}")
