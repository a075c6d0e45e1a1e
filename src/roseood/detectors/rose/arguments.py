"""ROSE's settings as two typed, frozen argument objects: what decides the fitted Fishers
(``FisherArguments``) and how layer scores become one score (``ScoreArguments``). Each checks itself when
made, so a bad setting is refused in one line before any image is read."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from roseood.catalogue import ROSE_DEFAULTS, ROWS
from roseood.contracts import RowsModel
from roseood.curvature import FISHERS, Fisher, LayerShape, make_fisher
from roseood.detectors.adjustment import check_adjust
from roseood.detectors.aggregation import Aggregation, make_aggregation
from roseood.detectors.features import check_features
from roseood.errors import RoseError, shown
from roseood.memory import format_size, parse_size
from roseood.models.base import RoseModel
from roseood.validation import check_float, check_seed

SIZE_WORDS = ("auto", "none")


@dataclass(frozen=True)
class FisherArguments:
    """What decides a ROSE's fitted Fishers besides the model's weights and the fit images: the Fisher
    kind, the layers (resolved names), damping and ``rcond``, the rows they are fitted on ("each": every
    row's gradient, else each image's summed one), the loss (stochastic, seed) and the batches (``memory``,
    ``batch_size``: they change the float sums a little). ROSEs with equal ones share one fit.

    ``damping`` is added to the Fisher's (eigen)values before inverting. ``rcond`` (KFAC/EKFAC layers,
    as in ``numpy.linalg.pinv``): eigen-directions whose eigenvalue is at most ``rcond`` × the sum of the
    eigenvalues are taken as not spanned by the fit images, and in them a gradient component counts
    only beyond its own rounding (``roseood.curvature.kronecker.KFAC.unspanned_level``); None (default):
    the fit gradients' rounding level, decided at fit and saved; 0: every direction counts in full.
    ``stochastic=True`` samples the latent (VAE) or the dequantisation noise (Glow) instead of the
    deterministic loss the authors used, per image from ``seed`` and the image (``roseood.randomness``).
    ``batch_size`` counts rows of the model's loss: a model whose loss runs each image several times
    (a diffusion model's K pairs, ``rows_per_input``) gets ``batch_size // K`` images per batch, so
    memory does not grow with K. ``memory`` (bytes or a size such as ``"4G"``; default: see
    ``roseood.curvature.memory``) bounds the peak memory of fitting and scoring: batches shrink to fit
    it, and a run that cannot fit is refused before it starts. ``max_size`` bounds the saved Fishers
    (bytes or a size): layers whose Fisher would not fit fall back to ``diag``, those with the largest
    eigenbases first; ``"auto"``: the chosen layers' own weights (float32) or 128 MiB, whichever is more;
    None (or ``"none"``): no bound. The choice per layer is in ``FittedFishers.kinds`` and the saved file.
    """

    fisher: str = ROSE_DEFAULTS["fisher"]
    layers: tuple[str, ...] = ()
    damping: float = ROSE_DEFAULTS["damping"]
    rcond: float | None = ROSE_DEFAULTS["rcond"]
    rows: str = ROSE_DEFAULTS["rows"]
    stochastic: bool = ROSE_DEFAULTS["stochastic"]
    seed: int = ROSE_DEFAULTS["seed"]
    max_size: int | str | None = ROSE_DEFAULTS["max_size"]
    memory: int | str | None = ROSE_DEFAULTS["memory"]
    batch_size: int = ROSE_DEFAULTS["batch_size"]

    def __post_init__(self) -> None:
        FISHERS.get(self.fisher)  # an unknown kind: the registry's one-line refusal, naming the kinds
        check_float(self.damping, "damping", low=0.0)
        if self.rcond is not None:
            check_float(self.rcond, "rcond", low=0.0, high=1.0)
        if self.rows not in ("sum", "each"):
            raise RoseError(f"a Fisher is fitted on rows 'sum' or 'each', got {shown(self.rows)}")
        check_seed(self.seed)
        if isinstance(self.max_size, str) and self.max_size.lower() in SIZE_WORDS:
            object.__setattr__(self, "max_size", None if self.max_size.lower() == "none" else "auto")
        elif self.max_size is not None:
            parse_size(self.max_size, "max_size")
        if self.memory is not None:
            object.__setattr__(self, "memory", parse_size(self.memory))

    def make(self, kind: str) -> Fisher:
        """A fresh Fisher of ``kind`` with these damping and ``rcond``."""
        return make_fisher(kind, self.damping, self.rcond)

    def kinds(self, shapes: dict[str, LayerShape]) -> dict[str, str]:
        """The Fisher of each layer: ``fisher``, except that while the saved Fishers would exceed
        ``max_size`` the layers whose Fisher outgrows a diagonal one the most become ``diag``."""
        kinds = dict.fromkeys(self.layers, self.fisher)
        if self.max_size is None:
            return kinds
        diag = FISHERS.get("diag")
        limit = (
            max(sum(diag.file_bytes(s) for s in shapes.values()), 2**27)
            if self.max_size == "auto"
            else parse_size(self.max_size, "max_size")
        )
        size = {n: FISHERS.get(self.fisher).file_bytes(shapes[n]) for n in self.layers}
        total = sum(size.values())
        for n in sorted(self.layers, key=lambda n: size[n] - diag.file_bytes(shapes[n]), reverse=True):
            if total <= limit:
                break
            total += diag.file_bytes(shapes[n]) - size[n]
            kinds[n] = "diag"
        if total > limit:
            raise RoseError(
                f"even a diagonal Fisher of these layers takes {format_size(total)}, more than max_size "
                f"{format_size(limit)}: raise max_size or choose fewer layers"
            )
        return kinds

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: for cache keys and the Fishers' own file."""
        return asdict(self) | {"layers": list(self.layers)}


@dataclass(frozen=True)
class ScoreArguments:
    """How a ROSE's raw layer scores become one score, all fitted on held-out in-distribution images:
    the rows scored (``sum``, ``each`` or ``bands``), the aggregation (``name[:k=v,...]`` with the paper's
    ``beta`` and ``p``), the likelihood adjustment, the extra features, and the share of ``fit``'s images
    held out when no ``held_out`` is given.

    ``aggregate`` names how layer scores become one score, ``name[:k=v,...]`` (``relu-norm``, the
    paper's, with ``beta`` and ``p``; ``max-z``; ``log-z``; ``two-sided``; ``gaussian``; ``gmm:k=3``).
    ``adjust`` (beyond the paper; ``roseood.detectors.adjustment``): ``nll`` divides each layer score by
    its in-distribution trend in the image's loss, ``both`` aggregates the raw and the adjusted layer
    scores together. ``features`` (beyond the paper; ``roseood.detectors.features``): what the
    aggregation judges besides the layer scores, ``layers`` (default) plus any of ``stats`` (the model's
    own statistics of the image) and ``complexity`` (its compressed length).
    ``rows`` (beyond the paper), for a model whose loss runs each image K times (a diffusion model's K
    (timestep, noise) pairs): ``"sum"`` (default) differentiates the image's summed loss; ``"each"`` scores
    every (image, pair) row's own gradient against the Fisher of all rows, giving K columns per layer
    (``layer@t``), each z-normalised on its own, that the aggregation takes together; ``"bands"`` scores
    every row's gradient against the Fisher of the images' summed gradients (``"sum"``'s, so it shares
    ``rose-ekfac``'s fit) and sums the layers, one column per timestep (``layers@t``): the model's whole
    block-diagonal ROSE score at each timestep band, few enough columns for a density to judge.
    """

    rows: str = ROSE_DEFAULTS["rows"]
    aggregate: str = ROSE_DEFAULTS["aggregate"]
    beta: float | tuple[float, ...] = ROSE_DEFAULTS["beta"]
    p: float = ROSE_DEFAULTS["p"]
    adjust: str = ROSE_DEFAULTS["adjust"]
    features: str = ROSE_DEFAULTS["features"]
    stats_fraction: float = ROSE_DEFAULTS["stats_fraction"]

    def __post_init__(self) -> None:
        if self.rows not in ROWS:
            raise RoseError(f"rows must be one of {', '.join(ROWS)}, got {shown(self.rows)}")
        check_float(self.p, "p", low=1.0, allow_inf=True)
        for b in self.beta if isinstance(self.beta, tuple) else [self.beta]:
            check_float(b, "beta")
        if not 0.0 < check_float(self.stats_fraction, "stats_fraction") < 1.0:
            raise RoseError(f"stats_fraction must lie in (0, 1), got {self.stats_fraction}")
        check_adjust(self.adjust)
        check_features(self.features)
        self.aggregation()  # refuses a bad name or parameter now, not at fit

    def aggregation(self) -> Aggregation:
        """A fresh, unfitted aggregation of these settings (``beta`` and ``p`` passed only when set)."""
        beta = list(self.beta) if isinstance(self.beta, tuple) else self.beta
        given = {k: v for k, v in (("beta", beta), ("p", self.p)) if v != ROSE_DEFAULTS[k]}
        return make_aggregation(self.aggregate, **given)


View = TypeVar("View", FisherArguments, ScoreArguments)


def view(cls: type[View], source: Any, **given: Any) -> View:
    """``cls`` (a typed view of ROSE's settings) made of ``source``'s attributes of its fields' names, by
    name; ``given`` where the view holds them otherwise (ROSE's ``fisher_arguments``, ``score_arguments``)."""
    return cls(**{f.name: given.get(f.name, getattr(source, f.name)) for f in fields(cls)})


def check_rows(rows: str, model: RoseModel, stochastic: bool) -> str:
    """``rows`` checked against the model: "sum", or "each" / "bands" for a deterministic loss of a model
    that runs each image several times and offers ``row_loss`` (a diffusion model)."""
    if rows != "sum":
        if not isinstance(model, RowsModel):
            raise RoseError(
                f"rows={rows!r} scores each row of a loss that runs every image several times (a "
                "diffusion model's K pairs); this model's loss has one row per image"
            )
        if stochastic:
            raise RoseError(f"rows={rows!r} needs the fixed pairs of the loss; it cannot be stochastic")
    return rows
