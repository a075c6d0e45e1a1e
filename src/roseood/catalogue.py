"""The built-in plug-ins as the command line offers them, by name, kept apart from what implements them
(torch, scipy, sklearn), so that ``rose --help`` and the refusal of a bad argument need none of those.
Each list is the built-in part of a registry (``tests/test_catalogue.py`` checks them against it); the
registries stay the one plug-in pattern, and a name read from a file is still looked up there."""

from __future__ import annotations

# roseood.detectors.METHODS, in registration order
METHODS = (
    "nll",
    "nll-iwae",
    "ic-png",
    "ic-jp2",
    "lratio",
    "lr",
    "rnd-svd",
    "rnd-dct",
    "rnd-gb",
    "rnd-random",
    "rose-ekfac",
    "rose-kfac",
    "rose-diag",
    "rose-dense",
    "rose-gmm",
    "rose-gmm-stats",
    "rose-gmm-all",
    "denoising",
    "msma",
    "diffpath",
    "diffpath-1d",
    "reconstruction",
)
# roseood.detectors.aggregation.AGGREGATIONS: each name and the parameters its spec takes
AGGREGATIONS = {
    "relu-norm": ("beta", "p", "ties"),
    "max-z": (),
    "log-z": ("beta", "p", "ties"),
    "gaussian": (),
    "gmm": ("k", "reg", "seed"),
}
DEFAULT_AGGREGATION = "relu-norm"  # the paper's
ADJUSTMENTS = ("none", "nll", "both")  # ROSE(adjust=...), roseood.detectors.adjustment
GALLERY = 8  # images shown at each end of a set in a report
