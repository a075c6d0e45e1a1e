"""OOD detectors behind one contract (``fit``/``score``/``save``/``load``): ROSE and the paper's baselines."""

import inspect
from typing import Any

from roseood.detectors.base import Detector
from roseood.detectors.diffpath import DiffPath
from roseood.detectors.diffusion import MSMA, DenoisingLoss
from roseood.detectors.ensemble import Ensemble
from roseood.detectors.input_complexity import InputComplexity
from roseood.detectors.likelihood_ratio import LikelihoodRatio
from roseood.detectors.likelihood_regret import LikelihoodRegret
from roseood.detectors.nll import NLL
from roseood.detectors.reconstruction import Reconstruction
from roseood.detectors.rnd import RND
from roseood.detectors.rose import ROSE
from roseood.errors import RoseError
from roseood.models.base import RoseModel

DETECTORS: dict[str, type[Detector]] = {
    d.method: d for d in (ROSE, NLL, LikelihoodRegret, LikelihoodRatio, InputComplexity, RND)
}
# Diffusion models' detectors (issue 28): one block, registered by method name and as ``--methods``.
DIFFUSION_DETECTORS: tuple[type[Detector], ...] = (DenoisingLoss, DiffPath, MSMA, Reconstruction)
DETECTORS |= {d.method: d for d in DIFFUSION_DETECTORS}

# Names accepted by ``rose evaluate --methods``: detector class and its keyword arguments.
METHODS: dict[str, tuple[type[Detector], dict[str, Any]]] = {
    "rose-ekfac": (ROSE, {"fisher": "ekfac"}),
    "rose-kfac": (ROSE, {"fisher": "kfac"}),
    "rose-diag": (ROSE, {"fisher": "diag"}),
    "rose-dense": (ROSE, {"fisher": "dense"}),
    "nll": (NLL, {"k": 1}),
    "nll-iwae": (NLL, {"k": 20}),
    "lr": (LikelihoodRegret, {}),
    "lratio": (LikelihoodRatio, {}),
    "ic-png": (InputComplexity, {"compressor": "png"}),
    "ic-jp2": (InputComplexity, {"compressor": "jp2"}),
    "rnd-svd": (RND, {"perturbation": "svd:28"}),
    "rnd-dct": (RND, {"perturbation": "dct:28"}),
    "rnd-gb": (RND, {"perturbation": "gb"}),
    "rnd-random": (RND, {"perturbation": "random:0.2"}),
}
METHODS |= {d.method: (d, {}) for d in DIFFUSION_DETECTORS}


def make_detector(method: str, model: RoseModel | None, **overrides: Any) -> Detector:
    """Build an unfitted detector from a method name of ``METHODS``."""
    if method not in METHODS:
        raise RoseError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    cls, kwargs = METHODS[method]
    return cls(model, **(kwargs | overrides))


def method_params(method: str, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments ``make_detector(method, model, **overrides)`` builds with, defaults filled in:
    what identifies an unfitted detector (for cache keys), found without building one."""
    if method not in METHODS:
        raise RoseError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    cls, kwargs = METHODS[method]
    try:
        bound = inspect.signature(cls).bind_partial(**(kwargs | overrides))
    except TypeError as exc:
        raise RoseError(f"{method}: {exc}") from None
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k not in ("model", "progress")}


__all__ = [
    "DETECTORS",
    "DIFFUSION_DETECTORS",
    "METHODS",
    "MSMA",
    "NLL",
    "RND",
    "ROSE",
    "DenoisingLoss",
    "Detector",
    "DiffPath",
    "Ensemble",
    "InputComplexity",
    "LikelihoodRatio",
    "LikelihoodRegret",
    "Reconstruction",
    "make_detector",
    "method_params",
]
