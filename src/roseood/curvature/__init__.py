"""Per-sample layer gradients and Fisher approximations (dense, diag, KFAC, EKFAC) behind one interface."""

from roseood.curvature.fisher import EKFAC, FISHERS, KFAC, DenseFisher, DiagFisher, Fisher, make_fisher
from roseood.curvature.grads import LayerGrad, LayerGradients

__all__ = [
    "EKFAC",
    "FISHERS",
    "KFAC",
    "DenseFisher",
    "DiagFisher",
    "Fisher",
    "LayerGrad",
    "LayerGradients",
    "make_fisher",
]
