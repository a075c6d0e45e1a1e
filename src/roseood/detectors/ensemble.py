"""An ensemble of detectors, e.g. ROSE on several models trained from different seeds (beyond the paper).

One trained model can be a weak detector by chance of its seed: on the zuko MAF example, single flows of one
recipe range from 0.91 to 0.99 AUROC against MNIST. Each member is fitted on the same in-distribution
images, its score is z-normalised by its mean and standard deviation on the held-out in-distribution
images, and the ensemble scores an input by the mean (or max) of its members' z-scores.

A saved ensemble holds every member's state and its model's fingerprint:
``Ensemble.load(path, models=[...])`` takes the models in the order they were given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roseood.detectors.base import DETECTORS, Detector, register_detector
from roseood.detectors.files import built_from_file, restore
from roseood.errors import CheckpointError, DataError, RoseError, shown
from roseood.integrity import same, tensor
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint
from roseood.validation import check_float

COMBINATIONS = ("mean", "max")


class Ensemble(Detector):
    """Mean (or max) of the members' scores, each z-normalised on held-out in-distribution inputs."""

    method = "ensemble"
    keeps_held_out = True  # members fit with it apart; their score scales come from it

    noun = "an ensemble"

    def __init__(
        self,
        members: Sequence[Detector],
        *,
        combine: str = "mean",
        held_out_fraction: float = 0.2,
        progress: bool | None = None,
    ) -> None:
        members = list(members)
        if not members:
            raise RoseError("an ensemble needs at least one member detector")
        models: list[RoseModel] = []  # the members' models, in order: fingerprinted on save
        for m in members:
            if not isinstance(m, Detector) or isinstance(m, Ensemble):
                raise RoseError(f"ensemble members must be detectors (not ensembles), got {type(m).__name__}")
            if not isinstance(m.model, RoseModel):
                raise RoseError(f"ensemble member {m.method} has no generative model to fingerprint")
            if m.extra_models:
                raise RoseError(
                    f"the {m.method} detector needs its {' and '.join(m.extra_models)} model; "
                    "it cannot be an ensemble member"
                )
            models.append(m.model)
        inputs = {(model.input_kind, model.input_shape) for model in models}
        if len(inputs) > 1:
            raise RoseError(
                f"ensemble members take different inputs (kind, shape): {sorted(inputs, key=str)}"
            )
        if combine not in COMBINATIONS:
            raise RoseError(
                f"unknown ensemble combination {combine!r}; choose from {', '.join(COMBINATIONS)}"
            )
        super().__init__(models[0], batch_size=members[0].batch_size, progress=progress)
        self.members = members
        self.models = models
        self.combine = combine
        self.held_out_fraction = check_float(held_out_fraction, "held_out_fraction", low=0.0, high=1.0)
        self.mean_: np.ndarray | None = None  # (members,) score mean and std on the held-out inputs
        self.std_: np.ndarray | None = None

    def show_progress(self, enabled: bool | None) -> Ensemble:
        """Its own setting and every member's."""
        super().show_progress(enabled)
        for m in self.members:
            m.show_progress(enabled)
        return self

    def get_params(self) -> dict[str, Any]:
        """``combine``, ``held_out_fraction`` and each member's method and parameters."""
        members = [{"method": m.method, "params": m.get_params()} for m in self.members]
        return super().get_params() | {"members": members}

    def _collect_fit_warnings(self) -> None:
        self.fit_warnings_ = [f"member {i}: {w}" for i, m in enumerate(self.members) for w in m.fit_warnings_]

    def held_out_share(self) -> float:
        return self.held_out_fraction

    def _fit_apart(self, x: Tensor, held_out: Tensor) -> None:
        """Fit every member on ``x`` with ``held_out``, then each member's score scale on ``held_out``."""
        for m in self.members:
            m.fit(x, held_out=held_out)
        scores = np.stack([m.score(held_out) for m in self.members], 1)
        mean, std = scores.mean(0), scores.std(0)
        bad = [
            f"{i} ({m.method})"
            for i, m in enumerate(self.members)
            if not (np.isfinite(mean[i]) and np.isfinite(std[i]) and std[i] > 0)
        ]
        if bad:
            raise DataError(
                f"ensemble member(s) {', '.join(bad)} give constant or non-finite scores on the "
                f"{held_out.shape[0]} held-out inputs, so they cannot be put on one scale"
            )
        self.mean_, self.std_ = mean, std
        self._collect_fit_warnings()

    def member_scores(self, images: Tensor | np.ndarray, *, shard: bool = True) -> np.ndarray:
        """The members' z-scores, (N, members): how far above in-distribution each member puts an input
        (``shard``: as ``score``)."""
        if self.mean_ is None or self.std_ is None:
            raise RoseError("ensemble detector is not fitted: call fit() or load() first")
        raw = np.stack([m.score(images, shard=shard) for m in self.members], 1)
        return (raw - self.mean_) / self.std_

    def combined(self, z: np.ndarray) -> np.ndarray:
        """The ensemble score of members' z-scores (N, members), as ``score`` computes it."""
        return z.mean(1) if self.combine == "mean" else z.max(1)

    def _score(self, x: Tensor) -> Tensor:
        return torch.from_numpy(self.combined(self.member_scores(x, shard=False)))

    def state(self) -> dict[str, Any]:
        assert self.mean_ is not None and self.std_ is not None
        return {
            "mean": torch.from_numpy(self.mean_),
            "std": torch.from_numpy(self.std_),
            "members": [m.state() for m in self.members],
            "fingerprints": [model_fingerprint(m) for m in self.models],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        members = state.get("members")
        if not isinstance(members, list) or len(members) != len(self.members):
            raise CheckpointError(f"not a complete state of an ensemble of {len(self.members)} members")
        n = (len(self.members),)
        mean = tensor(state.get("mean"), "state.mean", shape=n)
        std = tensor(state.get("std"), "state.std", shape=n)
        if not bool((std > 0).all()):
            raise CheckpointError("field 'state.std' must be positive")
        for m, s in zip(self.members, members, strict=True):
            if not isinstance(s, dict):
                raise CheckpointError("field 'state.members' must hold one state per member")
            m.load_state(s)
            m.fitted_ = True
        self.mean_, self.std_ = mean.double().numpy(), std.double().numpy()
        self._collect_fit_warnings()

    @classmethod
    def load(
        cls,
        path: str | Path,
        model: Any = None,
        *,
        models: Sequence[RoseModel] | None = None,
        **extra_models: Any,
    ) -> Detector:
        """Load a saved ensemble for ``models`` (the members' models, in order; ``model`` alone stands for
        an ensemble of one); refuses models other than the ones it was fitted on."""
        return super().load(path, list(models) if models is not None else model, **extra_models)

    @classmethod
    def from_file(cls, obj: Mapping[str, Any], path: str | Path, model: Any, **extra_models: Any) -> Detector:
        """The ensemble of a file whose fields ``load`` checked: its members rebuilt on ``model`` (their
        models, in order), each fingerprint compared."""
        given = list(model) if isinstance(model, list | tuple) else [model] if model is not None else []
        params = obj["params"]
        specs = params["members"]
        expected = obj["state"].get("fingerprints")
        if not isinstance(expected, list) or len(expected) != len(specs):
            raise CheckpointError(f"{path}: field 'state.fingerprints' must list one fingerprint per member")
        if len(given) != len(specs):
            raise CheckpointError(
                f"{path}: an ensemble of {len(specs)} members needs {len(specs)} models, got {len(given)}"
            )
        for i, (m, fp) in enumerate(zip(given, expected, strict=True)):
            if not same(fp, actual := model_fingerprint(m)):
                raise CheckpointError(
                    f"{path}: member {i} was fitted on model {shown(fp)}, but the given one is {actual}"
                )
        members = [
            built_from_file(path, DETECTORS[s["method"]], m, **s["params"])
            for m, s in zip(given, specs, strict=True)
        ]
        rest = {k: v for k, v in params.items() if k != "members"}
        return restore(built_from_file(path, cls, members, **rest), obj, path)


register_detector(Ensemble, {})
