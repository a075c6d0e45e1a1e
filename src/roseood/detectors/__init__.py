"""OOD detectors behind one contract (``fit``/``score``/``save``/``load``): ROSE and the paper's baselines.

Each module registers its detector (``register_detector``) in ``DETECTORS`` (file method → class) and
the method names users pick it by in ``METHODS``; importing this package registers them all.
"""

from roseood.detectors.base import (
    DETECTORS,
    METHODS,
    Detector,
    Method,
    load_detector,
    make_detector,
    method_params,
    register_detector,
)
from roseood.detectors.ensemble import Ensemble
from roseood.detectors.input_complexity import InputComplexity
from roseood.detectors.likelihood_ratio import LikelihoodRatio
from roseood.detectors.likelihood_regret import LikelihoodRegret
from roseood.detectors.nll import NLL
from roseood.detectors.rnd import RND
from roseood.detectors.rose import ROSE

__all__ = [
    "DETECTORS",
    "METHODS",
    "NLL",
    "RND",
    "ROSE",
    "Detector",
    "Ensemble",
    "InputComplexity",
    "LikelihoodRatio",
    "LikelihoodRegret",
    "Method",
    "load_detector",
    "make_detector",
    "method_params",
    "register_detector",
]
