"""ROSE's settings and a diffusion model's per-image loss settings, each declared once: its name, default,
help and check. ROSE's keywords and its two typed views (``roseood.detectors.rose.arguments``) take their
defaults from here, the views run each field's check when made, the ``rose`` commands add the settings
with a ``flag`` as options by one loop (``roseood.cli.common.add_rose_args``), and docs/detectors.md
shows the table ``docgen/settings_table.py`` renders from them. Likewise the loss settings
(``LOSS_SETTINGS``): ``check_denoising`` runs their checks, ``rose train diffusion`` and the detecting
commands add them as options by one loop (``roseood.catalogue.add_loss_options``), and docs/diffusion.md
shows their table. Torch-free, and imported by the catalogue, never the reverse: ``rose --help`` and the
refusal of a bad value need no torch. The Fisher kinds and the aggregations are checked by their
registries (the views look them up), the rest here."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from roseood.errors import RoseError, shown
from roseood.memory import parse_size
from roseood.validation import check_float, check_int, check_seed, count, one_of, t_range

# roseood.detectors.aggregation.AGGREGATIONS: each name and the parameters its spec takes
AGGREGATIONS = {
    "relu-norm": ("beta", "p", "ties"),
    "max-z": (),
    "log-z": ("beta", "p", "ties"),
    "two-sided": ("p",),
    "gaussian": (),
    "gmm": ("k", "reg", "seed"),
}
DEFAULT_AGGREGATION = "relu-norm"  # the paper's
# ROSE(rows=...): what a diffusion model's K (timestep, noise) rows per image give
ROWS = ("sum", "each", "bands")
ADJUSTMENTS = ("none", "nll", "both")  # ROSE(adjust=...), roseood.detectors.adjustment
SIZE_WORDS = ("auto", "none")  # max_size's words besides a size
FEATURES = ("layers", "stats", "complexity")  # ROSE(features=...), roseood.detectors.features


@dataclass(frozen=True)
class Setting:
    """One of ROSE's settings: its keyword ``name``, ``default``, ``help`` (``rose --help`` and the docs'
    table), ``check`` (the value to keep, or a one-line ``RoseError``; None: checked by a registry or not
    at all), whether the detecting commands offer it as ``--name`` (``flag``: unset, the method's own),
    its ``choices`` and ``metavar`` there, and the docs' section on it (``see``, an anchor of
    docs/detectors.md)."""

    name: str
    default: Any
    help: str
    check: Callable[[Any], Any] | None = None
    flag: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    see: str = ""

    @property
    def option(self) -> str:
        """The command-line option: ``--max-size`` for ``max_size``."""
        return "--" + self.name.replace("_", "-")


def _number(name: str, **bounds: Any) -> Callable[[Any], Any]:
    """A check that a value is a number within ``bounds`` (``check_float``'s), kept as given."""

    def check(value: Any) -> Any:
        check_float(value, name, **bounds)
        return value

    return check


def _rcond(value: Any) -> Any:
    """None, or a number in [0, 1]."""
    return value if value is None else _number("rcond", low=0.0, high=1.0)(value)


def _rows(value: Any) -> Any:
    """One of ``ROWS``."""
    if value not in ROWS:
        raise RoseError(f"rows must be one of {', '.join(ROWS)}, got {shown(value)}")
    return value


def _max_size(value: Any) -> Any:
    """A size (bytes, or text such as 150M, kept as given), "auto" or None ("none")."""
    if isinstance(value, str) and value.lower() in SIZE_WORDS:
        return None if value.lower() == "none" else "auto"
    if value is not None:
        parse_size(value, "max_size")
    return value


def _memory(value: Any) -> int | None:
    """None, or a size in bytes (text such as 4G parsed)."""
    return None if value is None else parse_size(value)


def _beta(value: Any) -> Any:
    """A number, or a tuple of numbers (one per layer score column)."""
    for b in value if isinstance(value, tuple) else [value]:
        check_float(b, "beta")
    return value


def _stats_fraction(value: Any) -> Any:
    """A number strictly between 0 and 1."""
    if not 0.0 < check_float(value, "stats_fraction") < 1.0:
        raise RoseError(f"stats_fraction must lie in (0, 1), got {value}")
    return value


def check_adjust(adjust: str) -> str:
    """``adjust`` itself if it names an adjustment, else a clear error."""
    if adjust not in ADJUSTMENTS:
        raise RoseError(f"unknown ROSE adjustment {adjust!r}; choose from {', '.join(ADJUSTMENTS)}")
    return adjust


def check_features(features: str) -> str:
    """``features`` itself if it is a comma-separated list of ``FEATURES`` that includes ``layers`` (in
    that order, each once), else a one-line error."""
    names = [f.strip() for f in str(features).split(",")]
    if names[:1] != ["layers"] or any(n not in FEATURES for n in names) or len(set(names)) != len(names):
        raise RoseError(
            f"features must be 'layers' followed by any of stats, complexity (comma-separated), got "
            f"{features!r}"
        )
    return features


def _aggregations() -> str:
    """The built-in aggregations with their parameters."""
    return ", ".join(f"{n} ({', '.join(ps)})" if ps else n for n, ps in AGGREGATIONS.items())


# in the order of the docs' table: what decides the Fishers (FisherArguments), then the scoring
ROSE_SETTINGS = (
    Setting(
        "fisher",
        "ekfac",
        "how each layer's empirical Fisher F_l is approximated: ekfac, the paper's, or another kind of "
        "roseood.curvature.FISHERS (kfac, diag, ...)",
        see="fishers",
    ),
    Setting(
        "layers",
        None,
        "ROSE layer set, the first named each model's default (VAE: encoder, decoder, all; Glow: "
        "invconv, all; PixelCNN: all, first, last, body; gated PixelCNN: vertical, ...; diffusion: all, "
        "weights, down, mid, up, and adapter, the default with a LoRA adapter; any model: last:N, its last "
        "N layers in forward order; `rose check-model` lists a model's sets); in Python also a list of "
        "module names",
        flag=True,
    ),
    Setting(
        "damping",
        1e-8,
        "added to the Fisher's (eigen)values before inverting (the authors' 1e-8); kfac-tikhonov: relative, "
        "√damping × each factor's mean eigenvalue is added to that factor's",
        _number("damping", low=0.0),
    ),
    Setting(
        "rcond",
        None,
        "KFAC/EKFAC, as rcond in numpy.linalg.pinv: eigen-directions whose eigenvalue is at most rcond × "
        "the eigenvalues' sum count as not spanned by the fit images, and in them a gradient component "
        "counts only beyond its own rounding, max(r² − (ε·√(d_in + d_out))²·‖r‖², 0), so the score has no "
        "jump; unset: the fit gradients' rounding level (ε·√(d_in + d_out))², decided at fit and saved; 0: "
        "every direction in full",
        _rcond,
        see="fishers",
    ),
    Setting(
        "rows",
        "sum",
        "beyond the paper, for a diffusion model's K (timestep, noise) pairs: sum differentiates the image's "
        "summed loss; each scores every (image, pair) row's own gradient against the Fisher of all rows, "
        "one ROSE column per layer and timestep; bands sums each row's layers, one column per timestep, "
        "against the images' Fisher (sum's, so it shares rose-ekfac's fit, or its passes on another kind)",
        _rows,
        flag=True,
        choices=ROWS,
    ),
    Setting(
        "stochastic",
        False,
        "sample the VAE latent (or Glow's dequantisation noise), per image from seed and the image, "
        "instead of the authors' deterministic loss at z = μ",
    ),
    Setting("seed", 0, "seed of a stochastic loss's samples (0 ≤ seed < 2**32)", check_seed),
    Setting(
        "max_size",
        "auto",
        "largest saved ROSE Fisher, e.g. 150M: the layers with the largest eigenbases fall back to "
        "diagonal Fishers until it fits; auto: the layers' own weights or 128 MiB, whichever is more; "
        "none: no bound",
        _max_size,
        flag=True,
        metavar="SIZE",
    ),
    Setting(
        "memory",
        None,
        "peak memory ROSE may use, e.g. 4G or 500M: smaller batches, or a one-line refusal when one image "
        "does not fit (default: what is in use plus half of the free RAM, or of the GPU's memory)",
        _memory,
    ),
    Setting(
        "batch_size",
        64,
        "rows of the model's loss per forward/backward pass: a model that runs each image K times (a "
        "diffusion model's pairs) takes batch_size // K images, so memory does not grow with K",
    ),
    Setting(
        "aggregate",
        DEFAULT_AGGREGATION,
        f"how ROSE combines layer scores, NAME[:k=v,...]: {_aggregations()}; e.g. relu-norm:beta=3 or "
        "gmm:k=4",
        flag=True,
        metavar="NAME[:k=v,...]",
        see="aggregations",
    ),
    Setting("beta", 0.0, "relu-norm's and log-z's β: one number, or one per layer score column", _beta),
    Setting(
        "p",
        math.inf,
        "relu-norm's and log-z's p-norm (p ≥ 1; inf: the maximum)",
        _number("p", low=1.0, allow_inf=True),
    ),
    Setting(
        "adjust",
        "none",
        "none: the paper; beyond it, nll divides each ROSE layer score by its in-distribution trend in the "
        "image's −log p(x); both aggregates raw and adjusted layer scores",
        check_adjust,
        flag=True,
        choices=ADJUSTMENTS,
        see="likelihood-adjustment",
    ),
    Setting(
        "features",
        "layers",
        "beyond the paper: what the aggregation judges besides the layer scores, layers plus any of stats "
        "(the model's own statistics of the image) and complexity (its compressed length)",
        check_features,
        see="near-ood-the-whole-vector-with-the-models-statistics-features",
    ),
    Setting(
        "stats_fraction",
        0.2,
        "the share of the fit images held out for the layer statistics when no held_out images are given",
        _stats_fraction,
    ),
)
ROSE_SETTING = {s.name: s for s in ROSE_SETTINGS}
# ROSE's keyword defaults and its views' (what each means: ROSE_SETTINGS)
ROSE_DEFAULTS: dict[str, Any] = {s.name: s.default for s in ROSE_SETTINGS}


# -- a diffusion model's per-image loss: its ``denoising``, K fixed (timestep, noise) pairs ---------------

DIFFUSION_WEIGHTINGS = ("simple", "elbo")  # the weightings of the loss's K terms (roseood.models.diffusion)


@dataclass(frozen=True)
class LossSetting:
    """One setting of a diffusion model's per-image loss: its ``name`` (the option ``--rose-NAME``), the
    ``default``, ``help`` (``rose train diffusion``'s, the detecting commands' and the docs' table),
    ``check`` (``check(value, name, error=...)``: the value to keep, or a one-line ``error``), the
    option's ``parse`` (an argparse ``type``), ``choices`` and ``metavar``, whether the detecting commands
    offer it (``detecting``: unset, the model's own, recorded in the detector file), and ``ends``: for a
    range, the two ``denoising`` keys of its ends (LO < HI, each checked; its default and parsed option
    hold both), else None (one key, the name)."""

    name: str
    default: Any
    help: str
    check: Callable[..., Any]
    parse: Callable[[str], Any]
    detecting: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    ends: tuple[str, str] | None = None

    @property
    def option(self) -> str:
        """The command-line option: ``--rose-t-range`` for ``t_range``."""
        return "--rose-" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """The option's attribute on the parsed arguments: ``rose_t_range``."""
        return "rose_" + self.name

    @property
    def keys(self) -> tuple[str, ...]:
        """The ``denoising`` keys it sets: a range's two ends, else its name."""
        return self.ends or (self.name,)

    def config(self, value: Any) -> dict[str, Any]:
        """Its keys' values for one value of it (a range: its two ends)."""
        return dict(zip(self.keys, value if self.ends else (value,), strict=True))

    def text(self, value: Any) -> str:
        """A value as its option takes it (a range: LO,HI)."""
        return ",".join(f"{v:g}" for v in value) if self.ends else str(value)

    def checked(self, config: Mapping[str, Any], where: str, error: type[RoseError]) -> dict[str, Any]:
        """Its keys of ``config``, each checked and named ``where.key`` in an error, a range's ends
        ordered."""
        values = [self.check(config[k], f"{where}.{k}", error=error) for k in self.keys]
        if self.ends and values[0] >= values[1]:
            raise error(f"{where} needs {' < '.join(self.ends)}, got {values[0]:g} and {values[1]:g}")
        return dict(zip(self.keys, values, strict=True))


# in the order of a model's ``denoising`` record
LOSS_SETTINGS = (
    LossSetting(
        "k",
        8,
        "(timestep, noise) pairs of the per-image loss ROSE differentiates, each a denoiser pass per image",
        check_int,
        count,
        detecting=True,
        metavar="K",
    ),
    LossSetting(
        "t_range",
        (0.0, 1.0),
        "the pairs' timestep range, fractions of the train timesteps (e.g. 0,0.5: the less noisy half); the "
        "K timesteps are the midpoints of K equal strata",
        partial(check_float, low=0.0, high=1.0),
        t_range,
        detecting=True,
        metavar="LO,HI",
        ends=("t_min", "t_max"),
    ),
    LossSetting(
        "weighting",
        "simple",
        "weighting of the K terms: simple (w = 1, the ε-MSE diffusion models are trained with) or elbo "
        "(each term weighted as in the DDPM variational bound: the loss bounds −log p(x) up to constants)",
        one_of(*DIFFUSION_WEIGHTINGS),
        str,
        choices=DIFFUSION_WEIGHTINGS,
    ),
    LossSetting(
        "seed", 0, "seed of the pairs' noise, drawn once (0 ≤ seed < 2**32)", check_seed, int, metavar="SEED"
    ),
)


def denoising_of(value: Callable[[LossSetting], Any]) -> dict[str, Any]:
    """A ``denoising`` record (its keys in the declaration's order) of one ``value`` for each setting."""
    return {k: v for s in LOSS_SETTINGS for k, v in s.config(value(s)).items()}


# a diffusion model's per-image loss unless it says otherwise
DIFFUSION_LOSS_DEFAULTS = denoising_of(lambda s: s.default)
