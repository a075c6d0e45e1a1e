"""ROSE's fitted Fishers as an artifact of their own: what a fit of the Fishers made, what it was made
with, and what any ROSE with the same settings can take instead of fitting its own."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from roseood.curvature import FISHERS, Fisher
from roseood.detectors.rose.arguments import FisherArguments
from roseood.errors import CheckpointError, RoseError, shown
from roseood.integrity import field, same
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint
from roseood.serialization import printable, safe_load, save_file, share_equal_tensors

FISHERS_FORMAT = "roseood-fishers"
MemoKey = tuple[str, str, str]  # the weights' fingerprint, the images' digest, the rows scored


class FittedFishers(Mapping[str, Fisher]):
    """One Fisher per layer (a mapping from layer name to ``Fisher``), with the ``arguments`` they were
    fitted with and the fingerprints of the ``model``'s weights and of the fit ``images`` (None: not
    known, as in a detector file). A ROSE with equal arguments, on the same weights and images, takes
    them: ``ROSE(...).fit(images, fishers=other.fishers_)``; ``save``/``load`` keep them in a file of
    their own. Scoring never changes them. Once ``share()`` is called (by whoever hands them to several
    ROSEs: ``roseood.evaluation.FisherPool``), the raw scores they give are remembered by weights, images
    and rows (the last ``keep`` sets) and read by every ROSE using them, so the variants ``rose evaluate``
    compares run the model once per image set."""

    keep = 16

    def __init__(
        self, arguments: FisherArguments, fishers: Mapping[str, Fisher], *, model: str, images: str | None
    ) -> None:
        self.arguments = arguments
        self.model = model
        self.images = images
        self.shared = False  # share() sets it: then they remember what they score
        self._fishers = dict(fishers)
        self._memo: OrderedDict[MemoKey, tuple[Tensor, Tensor]] = OrderedDict()

    def __getitem__(self, name: str) -> Fisher:
        return self._fishers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fishers)

    def __len__(self) -> int:
        return len(self._fishers)

    @property
    def kinds(self) -> dict[str, str]:
        """The Fisher kind of each layer (``diag`` where ``max_size`` made it so)."""
        return {name: f.name for name, f in self._fishers.items()}

    def held_bytes(self, name: str, kind: str) -> int:
        """Bytes layer ``name``'s Fisher holds already (counted in the process's memory) where it is of
        ``kind``, of the ``work_bytes`` a Fisher of that kind may hold at most; 0 otherwise."""
        fisher = self._fishers.get(name)
        return fisher.held_bytes() if fisher is not None and fisher.name == kind else 0

    def check(self, arguments: FisherArguments, model: str, images: str) -> None:
        """Refuse in one line Fishers fitted with other settings, on other weights or on other images."""
        if arguments != self.arguments:
            theirs, ours = self.arguments.as_dict(), arguments.as_dict()
            differ = ", ".join(f"{k} {theirs[k]!r} ≠ {ours[k]!r}" for k in ours if theirs[k] != ours[k])
            raise RoseError(
                f"these Fishers were fitted with other Fisher settings than this ROSE's: {differ}"
            )
        if model != self.model:
            raise RoseError(f"these Fishers were fitted on model {self.model}, this ROSE's is {model}")
        if images != self.images:
            raise RoseError("these Fishers were fitted on other images; pass the images they were fitted on")

    def share(self) -> FittedFishers:
        """Mark them as handed to several ROSEs: from now on they remember the raw scores they give (by
        weights, images and rows), which every ROSE using them reads instead of running the model."""
        self.shared = True
        return self

    def remembered(self, key: MemoKey) -> tuple[Tensor, Tensor] | None:
        """A copy of the raw scores and losses remembered under ``key``, if any."""
        found = self._memo.get(key)
        return None if found is None else (found[0].clone(), found[1].clone())

    def remember(self, key: MemoKey, value: tuple[Tensor, Tensor]) -> None:
        """Keep a copy of ``value`` (raw scores, losses) under ``key``; the oldest beyond ``keep`` go."""
        self._memo[key] = (value[0].clone(), value[1].clone())
        while len(self._memo) > self.keep:
            self._memo.popitem(last=False)

    def state(self) -> dict[str, Any]:
        """Each layer's Fisher state and kind: what a detector file and the result cache keep."""
        return {"fishers": {n: f.state() for n, f in self._fishers.items()}, "kinds": self.kinds}

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], arguments: FisherArguments, *, model: str, images: str | None = None
    ) -> FittedFishers:
        """Rebuild ``state()``'s Fishers; a state for other layers or kinds is a one-line
        ``CheckpointError``."""
        fishers = field(state, "fishers", dict, "state.")
        layers = list(arguments.layers)
        if list(fishers) != layers:
            raise CheckpointError(
                f"field 'state.fishers' must hold one Fisher per layer of the detector "
                f"({len(layers)}), found {shown(list(fishers))}"
            )
        # files from before per-layer choices hold one Fisher kind for all layers
        kinds = (
            field(state, "kinds", dict, "state.")
            if "kinds" in state
            else dict.fromkeys(layers, arguments.fisher)
        )
        if list(kinds) != layers or any(k not in FISHERS.names() for k in kinds.values()):
            raise CheckpointError(
                f"field 'state.kinds' must name a Fisher for each layer of the detector, found {shown(kinds)}"
            )
        made = {}
        for name in layers:
            made[name] = f = arguments.make(str(kinds[name]))
            try:
                f.load_state(field(fishers, name, dict, "state.fishers."))
            except CheckpointError as exc:
                raise CheckpointError(f"the {kinds[name]} Fisher of layer {name}: {exc}") from None
        return cls(arguments, made, model=model, images=images)

    def save(self, path: str | Path) -> None:
        """Write them to one file (atomically, with a checksum), their arguments and fingerprints beside."""
        save_file(
            {
                "format": FISHERS_FORMAT,
                "version": 1,
                "arguments": self.arguments.as_dict(),
                "model_fingerprint": self.model,
                "images": self.images,
                "state": share_equal_tensors(self.state()),
            },
            path,
        )

    @classmethod
    def load(cls, path: str | Path, model: RoseModel) -> FittedFishers:
        """Read ``save``'s file for ``model``; refused in one line if it was fitted on other weights or is
        damaged."""
        obj = safe_load(path, FISHERS_FORMAT)
        if not same(obj.get("version"), 1):
            raise CheckpointError(f"{path}: Fishers saved in a format this roseood does not read")
        expected, actual = obj.get("model_fingerprint"), model_fingerprint(model)
        if expected != actual:
            raise CheckpointError(
                f"{path}: Fishers fitted on model {printable(str(expected))}, the given one is {actual}"
            )
        images = stored_digest(obj, "images", where=f"{path}: ")
        try:
            given = dict(field(obj, "arguments", dict))
            arguments = FisherArguments(
                **given | {"layers": tuple(field(given, "layers", list, "arguments."))}
            )
            return cls.from_state(field(obj, "state", dict), arguments, model=actual, images=images)
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        except (RoseError, TypeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{path}: damaged Fishers ({str(exc).splitlines()[0]})") from None


def stored_digest(obj: Mapping[str, Any], key: str, name: str | None = None, where: str = "") -> str | None:
    """The fit images' digest kept under ``key`` in a file's ``obj`` (None where it is absent: files
    written before it was kept); anything else is a one-line ``CheckpointError`` naming field ``name``."""
    digest = obj.get(key)
    if digest is not None and not isinstance(digest, str):
        raise CheckpointError(f"{where}field '{name or key}' must be a digest, found {shown(digest)}")
    return digest
