"""Per-sample layer gradients and Fisher approximations (dense, diag, KFAC, EKFAC, compact EKFAC) behind one
interface.

Layer types are plug-ins: ``register_layer(module_type, handler)`` adds one; ``check_layers`` lists which
of a model's layers are usable and how.
"""

from roseood.curvature.check import LayerReport, check_layers, format_layer_report
from roseood.curvature.compact import CompactEKFAC, WideCompactEKFAC
from roseood.curvature.fisher import (
    FISHERS,
    DenseFisher,
    DiagFisher,
    FactorCache,
    Fisher,
    LayerShape,
    make_fisher,
)
from roseood.curvature.grads import GradientStore, LayerGrad, LayerGradients, full_float32, supports
from roseood.curvature.handlers import (
    CONV,
    CONV_TRANSPOSE,
    EMBEDDING,
    INVERTIBLE_1X1,
    LINEAR,
    NORM_AFFINE,
    LayerHandler,
    declare_mask,
    register_layer,
    resolve,
)
from roseood.curvature.kronecker import EKFAC, KFAC, KFACTikhonov, settled_line
from roseood.curvature.layergrad import FactoredGrad, SummedGrad
from roseood.curvature.passes import JointFit, fisher_pass

__all__ = [
    "CONV",
    "CONV_TRANSPOSE",
    "EKFAC",
    "EMBEDDING",
    "FISHERS",
    "INVERTIBLE_1X1",
    "KFAC",
    "LINEAR",
    "NORM_AFFINE",
    "CompactEKFAC",
    "DenseFisher",
    "DiagFisher",
    "FactorCache",
    "FactoredGrad",
    "Fisher",
    "GradientStore",
    "JointFit",
    "KFACTikhonov",
    "LayerGrad",
    "LayerGradients",
    "LayerHandler",
    "LayerReport",
    "LayerShape",
    "SummedGrad",
    "WideCompactEKFAC",
    "check_layers",
    "declare_mask",
    "fisher_pass",
    "format_layer_report",
    "full_float32",
    "make_fisher",
    "register_layer",
    "resolve",
    "settled_line",
    "supports",
]
