"""roseood: out-of-distribution detection with deep generative models (ROSE and its baselines).

Data flows one way: images → ``roseood.data`` → model log-likelihood (``roseood.models``) →
detector ``fit``/``score`` (``roseood.detectors``, using ``roseood.curvature``) → metrics and
reports (``roseood.evaluation``). Any ``nn.Module`` with a per-sample NLL joins through ``roseood.wrap``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from roseood.errors import CheckpointError, DataError, RoseError

if TYPE_CHECKING:
    from roseood.models.base import RoseModel
    from roseood.models.wrap import WrappedModel, wrap

_LAZY = {
    "RoseModel": "roseood.models.base",
    "WrappedModel": "roseood.models.wrap",
    "wrap": "roseood.models.wrap",
}


def __getattr__(name: str) -> Any:
    """Import the model protocol on first use, so ``import roseood`` (and the CLI) need not load torch."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'roseood' has no attribute {name!r}")


__all__ = ["CheckpointError", "DataError", "RoseError", "RoseModel", "WrappedModel", "__version__", "wrap"]
