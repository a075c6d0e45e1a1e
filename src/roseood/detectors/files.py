"""Detector files: what one holds (``Detector.save`` writes it) and the checks and steps that rebuild a
detector from one (``Detector.load``), each refusal a one-line ``CheckpointError`` naming the file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from roseood.contracts import SettableLoss
from roseood.data.jpeg import Storage
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import check_detector_file
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint
from roseood.plugins import load_plugins
from roseood.progress import state
from roseood.registry import Registry
from roseood.serialization import safe_load, share_equal_tensors

DETECTOR_FORMAT = "roseood-detector"
T = TypeVar("T")


class Filed(Protocol):
    """A detector as its file holds it: its settings, learned state and threshold, the model it was fitted
    on and how its fit images were stored (``roseood.detectors.base.Detector``)."""

    method: ClassVar[str]
    threshold_: float | None
    fit_storage_: Storage | None
    fitted_: bool

    @property
    def model(self) -> RoseModel | None: ...

    def get_params(self) -> dict[str, Any]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


F = TypeVar("F", bound=Filed)


def file_contents(detector: Filed, tag: str | None = None) -> dict[str, Any]:
    """What a fitted ``detector``'s file holds: its parameters, learned state, threshold and the model's
    fingerprint, with how its fit images were stored, the model's loss settings and ``tag`` where known."""
    model = detector.model
    return (
        {
            "format": DETECTOR_FORMAT,
            "version": 1,
            "method": detector.method,
            "params": detector.get_params(),
            "state": share_equal_tensors(detector.state()),
            "threshold": detector.threshold_,
            "model_fingerprint": model_fingerprint(model) if model is not None else None,
        }
        | ({"fit_storage": detector.fit_storage_.as_dict()} if detector.fit_storage_ is not None else {})
        | ({"model_loss": model.loss_settings()} if isinstance(model, SettableLoss) else {})
        | ({"tag": tag} if tag is not None else {})
    )


def read_file(path: str | Path, registry: Registry[str, T]) -> tuple[dict[str, Any], T]:
    """A detector file's contents, every field checked (``check_detector_file``), and the class of
    ``registry`` its method names (looked up, never imported; the declared plug-ins are imported first,
    so a file a plug-in's detector wrote is read as the built-in ones are)."""
    obj = safe_load(path, DETECTOR_FORMAT)
    load_plugins()
    try:
        check_detector_file(obj, registry)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return obj, registry[obj["method"]]


def check_model(obj: Mapping[str, Any], path: str | Path, model: Any, method: str) -> None:
    """Set the loss settings the file ``obj`` records on ``model`` (as the detector was fitted), then
    refuse a model other than the one it was fitted on (its fingerprint)."""
    expected = obj.get("model_fingerprint")
    _set_model_loss(obj, path, model)
    if expected is None:
        return
    if model is None:
        raise CheckpointError(f"{path}: this {method} detector needs the model it was fitted on")
    actual = model_fingerprint(model)
    if actual != expected:
        raise CheckpointError(
            f"{path}: fitted on model {expected}, but the given model is {actual}; "
            "refit the detector for this model"
        )


def built_from_file(path: str | Path, cls: type[T], *args: Any, **params: Any) -> T:
    """``cls(*args, **params)`` with settings read from a file: settings it refuses are the file's fault,
    a one-line ``CheckpointError`` naming it."""
    try:
        return cls(*args, **params)
    except (RoseError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: its settings do not build a detector ({_line(exc)})") from None


def restore(detector: F, obj: Mapping[str, Any], path: str | Path) -> F:
    """Set the learned state and threshold of a loaded file (``obj``: its contents) on ``detector``, fitted
    from then on; a state that does not fit is a one-line ``CheckpointError`` naming the file."""
    try:
        detector.load_state(obj["state"])
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: damaged {detector.method} detector state ({_line(exc)})") from None
    detector.threshold_ = obj.get("threshold")
    if "fit_storage" in obj:  # files written before it was recorded have none: unknown
        try:
            detector.fit_storage_ = Storage.from_dict(obj["fit_storage"])
        except RoseError as exc:
            raise CheckpointError(f"{path}: field 'fit_storage': {exc}") from None
    detector.fitted_ = True
    return detector


def _set_model_loss(obj: Mapping[str, Any], path: str | Path, model: Any) -> None:
    """Set the loss settings a detector file records (a DDPM's pairs, as it was fitted) on ``model``, which
    then has the fingerprint the file expects; a one-line ``CheckpointError`` where they cannot be set."""
    settings = obj.get("model_loss")
    if settings is None:
        return
    if not isinstance(settings, Mapping) or not isinstance(model, SettableLoss):
        raise CheckpointError(f"{path}: records loss settings that this model does not take")
    if settings == model.loss_settings():
        return
    try:
        model.set_loss_settings(**settings)
    except RoseError as exc:
        raise CheckpointError(f"{path}: its loss settings cannot be set on this model ({exc})") from None
    state(f"{path}: the model's loss settings set as the detector was fitted: {_settings_text(settings)}")


def _settings_text(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in settings.items())


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
