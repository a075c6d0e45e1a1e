"""roseood: out-of-distribution detection with deep generative models (ROSE and its baselines).

Data flows one way: images → ``roseood.data`` → model log-likelihood (``roseood.models``) →
detector ``fit``/``score`` (``roseood.detectors``, using ``roseood.curvature``) → metrics and
reports (``roseood.evaluation``).
"""

__version__ = "0.1.0"

from roseood.errors import CheckpointError, DataError, RoseError

__all__ = ["CheckpointError", "DataError", "RoseError", "__version__"]
