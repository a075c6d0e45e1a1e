"""ROSE's settings as two typed, frozen argument objects: what decides the fitted Fishers
(``FisherArguments``) and how layer scores become one score (``ScoreArguments``). Each checks itself when
made, so a bad setting is refused in one line before any image is read."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from roseood.contracts import RowsModel
from roseood.curvature import FISHERS, Fisher, LayerShape, make_fisher
from roseood.detectors.aggregation import Aggregation, make_aggregation
from roseood.errors import RoseError, shown
from roseood.memory import format_size, parse_size
from roseood.models.base import RoseModel
from roseood.settings import ROSE_DEFAULTS, ROSE_SETTING


@dataclass(frozen=True)
class FisherArguments:
    """What decides a ROSE's fitted Fishers besides the model's weights and the fit images: the Fisher
    kind, the layers (resolved names), damping and ``rcond``, the rows they are fitted on ("each": every
    row's gradient, else each image's summed one), the loss (stochastic, seed) and the batches (``memory``,
    ``batch_size``: they change the float sums a little). ROSEs with equal ones share one fit. What each
    setting means, its default and its check: ``roseood.settings.ROSE_SETTINGS``; the choice of Fisher
    per layer that ``max_size`` makes is in ``FittedFishers.kinds`` and the saved file."""

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
        checked(self)
        FISHERS.get(self.fisher)  # an unknown kind: the registry's one-line refusal, naming the kinds
        if self.rows not in ("sum", "each"):
            raise RoseError(f"a Fisher is fitted on rows 'sum' or 'each', got {shown(self.rows)}")

    def make(self, kind: str) -> Fisher:
        """A fresh Fisher of ``kind`` with these damping and ``rcond``."""
        return make_fisher(kind, self.damping, self.rcond)

    def kinds(self, shapes: dict[str, LayerShape]) -> dict[str, str]:
        """The Fisher of each layer: ``fisher`` where a layer of its shape can take one (else ``diag``:
        ``CompactEKFAC.takes``), except that while the saved Fishers would exceed ``max_size`` the layers
        whose Fisher outgrows a diagonal one the most become ``diag``."""
        takes = FISHERS.get(self.fisher).takes
        kinds = {n: self.fisher if takes(shapes[n]) else "diag" for n in self.layers}
        if self.max_size is None:
            return kinds
        diag = FISHERS.get("diag")
        limit = (
            max(sum(diag.file_bytes(s) for s in shapes.values()), 2**27)
            if self.max_size == "auto"
            else parse_size(self.max_size, "max_size")
        )
        size = {n: FISHERS.get(kinds[n]).file_bytes(shapes[n]) for n in self.layers}
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
    held out when no ``held_out`` is given. What each setting means, its default and its check:
    ``roseood.settings.ROSE_SETTINGS``."""

    rows: str = ROSE_DEFAULTS["rows"]
    aggregate: str = ROSE_DEFAULTS["aggregate"]
    beta: float | tuple[float, ...] = ROSE_DEFAULTS["beta"]
    p: float = ROSE_DEFAULTS["p"]
    adjust: str = ROSE_DEFAULTS["adjust"]
    features: str = ROSE_DEFAULTS["features"]
    stats_fraction: float = ROSE_DEFAULTS["stats_fraction"]

    def __post_init__(self) -> None:
        checked(self)
        self.aggregation()  # refuses a bad name or parameter now, not at fit (the registry's check)

    def aggregation(self) -> Aggregation:
        """A fresh, unfitted aggregation of these settings (``beta`` and ``p`` passed only when set)."""
        beta = list(self.beta) if isinstance(self.beta, tuple) else self.beta
        given = {k: v for k, v in (("beta", beta), ("p", self.p)) if v != ROSE_DEFAULTS[k]}
        return make_aggregation(self.aggregate, **given)


View = TypeVar("View", FisherArguments, ScoreArguments)


def checked(arguments: FisherArguments | ScoreArguments) -> None:
    """Each field of a view of ROSE's settings checked by its declared check (``roseood.settings``),
    keeping the value it gives (``max_size``'s words, ``memory`` in bytes); a bad one refused in one line."""
    for f in fields(arguments):
        check = ROSE_SETTING[f.name].check if f.name in ROSE_SETTING else None
        if check is not None:
            object.__setattr__(arguments, f.name, check(getattr(arguments, f.name)))


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
