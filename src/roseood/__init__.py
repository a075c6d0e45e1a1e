"""roseood: out-of-distribution detection with deep generative models (ROSE and its baselines).

Data flows one way: images → ``roseood.data`` → model log-likelihood (``roseood.models``) →
detector ``fit``/``score`` (``roseood.detectors``, using ``roseood.curvature``) → metrics and
reports (``roseood.evaluation``). Any ``nn.Module`` with a per-sample NLL joins through ``roseood.wrap``.

The names a user needs are here; they are imported on first use, so ``import roseood`` (and the CLI's
start-up) need not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from roseood.errors import CheckpointError, DataError, DegenerateFitWarning, RoseError

if TYPE_CHECKING:
    from roseood.data import load_images
    from roseood.detectors import ROSE, Detector, Ensemble, load_detector, register_detector
    from roseood.evaluation.evaluate import evaluate
    from roseood.evaluation.metrics import ood_metrics
    from roseood.evaluation.splits import EvalSpec
    from roseood.models import RoseModel, load_model, open_model, save_model, wrap

_LAZY = {
    "load_images": "roseood.data",
    "ROSE": "roseood.detectors",
    "Detector": "roseood.detectors",
    "Ensemble": "roseood.detectors",
    "load_detector": "roseood.detectors",
    "register_detector": "roseood.detectors",
    "EvalSpec": "roseood.evaluation",
    "evaluate": "roseood.evaluation",
    "ood_metrics": "roseood.evaluation",
    "RoseModel": "roseood.models",
    "load_model": "roseood.models",
    "open_model": "roseood.models",
    "save_model": "roseood.models",
    "wrap": "roseood.models",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'roseood' has no attribute {name!r}")


__all__ = [
    "ROSE",
    "CheckpointError",
    "DataError",
    "DegenerateFitWarning",
    "Detector",
    "Ensemble",
    "EvalSpec",
    "RoseError",
    "RoseModel",
    "__version__",
    "evaluate",
    "load_detector",
    "load_images",
    "load_model",
    "ood_metrics",
    "open_model",
    "register_detector",
    "save_model",
    "wrap",
]
