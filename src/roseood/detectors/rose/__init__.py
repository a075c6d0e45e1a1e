"""ROSE (Choi et al. 2021): how far the model would have to move to fit a test image.

Per layer l, ``s_l(x) = g_lᵀ F_l⁻¹ g_l`` with ``g_l`` the per-sample gradient of the model's −log p(x)
w.r.t. the layer and ``F_l`` its empirical Fisher on in-distribution data. Layer scores are
z-normalised with in-distribution statistics taken on images *not* used for the Fisher (the Fisher's
own samples score systematically low), and aggregated as ``‖ReLU(ẑ + β)‖_p`` (the default; other
aggregations in ``roseood.detectors.aggregation``, fitted on the same held-out images).

A ROSE is made of its settings (``FisherArguments``: what decides the Fishers; ``ScoreArguments``: how
layer scores become one), its fitted Fishers (``FittedFishers``, an artifact any ROSE with equal Fisher
settings can take) and the statistics and aggregation fitted on held-out images (``ROSE``).
"""

from roseood.curvature import FISHERS
from roseood.detectors.base import register_detector
from roseood.detectors.rose.arguments import FisherArguments, ScoreArguments
from roseood.detectors.rose.detector import ROSE, STATE_VERSION, fit_together, joinable
from roseood.detectors.rose.fitted import FittedFishers

# ROSE's vector judged whole (beyond the paper, for near-OOD): by a density fitted on held-out images —
# the layer scores, then with the model's statistics, then with the image's complexity too — or by the
# largest deviation of a layer in either direction
NEAR_OOD_METHODS = {
    "rose-gmm": {"aggregate": "gmm:k=auto"},
    "rose-gmm-stats": {"aggregate": "gmm:k=auto", "features": "layers,stats"},
    "rose-gmm-all": {"aggregate": "gmm:k=auto", "features": "layers,stats,complexity"},
    "rose-two-sided": {"aggregate": "two-sided"},
}
# for diffusion models: a density over ROSE's score at each timestep band (with the ε-MSE at each, the
# model's statistics), the Fisher shared with rose-ekfac
BAND_METHODS = {
    "rose-bands": {"rows": "bands", "aggregate": "gmm:k=auto"},
    "rose-bands-stats": {"rows": "bands", "aggregate": "gmm:k=auto", "features": "layers,stats"},
}
# the DDPM default on diagonal Fishers: one Fisher pass, scoring without EKFAC's rotation, a detector file
# the size of the weights; an option, its AUROC against the default's in docs/diffusion.md ("Diagonal
# Fishers for the DDPM default")
DIAG_BANDS_METHODS = {"rose-bands-stats-diag": BAND_METHODS["rose-bands-stats"] | {"fisher": "diag"}}
# ... and on compact EKFAC Fishers (the input basis's leading directions; "-wide": the wider side's): a file
# no larger than the weights, scoring without EKFAC's whole rotation (docs/diffusion.md, "Compact EKFAC")
COMPACT_BANDS_METHODS = {
    f"rose-bands-stats-{kind.removeprefix('ekfac-')}": BAND_METHODS["rose-bands-stats"] | {"fisher": kind}
    for kind in ("ekfac-compact", "ekfac-compact-wide")
}
# the DDPM default over the denoiser's last 4 layers, about one DiffPath image per image: an option, its
# AUROC against the default's in docs/diffusion.md ("What a score costs")
LAST_LAYERS_METHODS = {"rose-bands-stats-last4": BAND_METHODS["rose-bands-stats"] | {"layers": "last:4"}}
register_detector(
    ROSE,
    {f"rose-{fisher}": {"fisher": fisher} for fisher in reversed(FISHERS.names())}
    | NEAR_OOD_METHODS
    | BAND_METHODS
    | DIAG_BANDS_METHODS
    | COMPACT_BANDS_METHODS
    | LAST_LAYERS_METHODS,
)

__all__ = [
    "BAND_METHODS",
    "NEAR_OOD_METHODS",
    "ROSE",
    "STATE_VERSION",
    "FisherArguments",
    "FittedFishers",
    "ScoreArguments",
    "fit_together",
    "joinable",
]
