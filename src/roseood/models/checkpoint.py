"""Model checkpoints: one file holding kind, architecture config, weights and (optionally) training state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roseood.errors import CheckpointError, RoseError
from roseood.models.base import GenerativeModel
from roseood.serialization import atomic_save, fingerprint, safe_load
from roseood.validation import check_model_config

MODEL_FORMAT = "roseood-model"


def _registry() -> dict[str, type[GenerativeModel]]:
    from roseood.models import MODEL_KINDS

    return MODEL_KINDS


def save_model(model: GenerativeModel, path: str | Path, train_state: dict[str, Any] | None = None) -> None:
    """Write ``model`` (and, for resumable training, optimiser/epoch state) atomically to ``path``."""
    obj: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "version": 1,
        "kind": model.kind,
        "config": model.config(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    if train_state is not None:
        obj["train_state"] = train_state
    atomic_save(obj, path)


def load_checkpoint(path: str | Path) -> tuple[GenerativeModel, dict[str, Any]]:
    """Rebuild the model stored at ``path``; also return the raw file dict (for training state)."""
    obj = safe_load(path, MODEL_FORMAT)
    kinds = _registry()
    kind = obj.get("kind")
    if kind not in kinds:
        raise CheckpointError(f"{path}: unknown model kind {kind!r}; known: {sorted(kinds)}")
    config = obj.get("config")
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: has no model config")
    try:
        check_model_config(config, f"{kind} config")
        model = kinds[kind](**config)
    except (TypeError, ValueError, RoseError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: cannot build a {kind} from its stored config ({first})") from None
    try:
        model.load_state_dict(obj["state_dict"])
    except (TypeError, KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: weights do not match the stored {kind} config ({first})") from None
    model.eval()
    return model, obj


def load_model(path: str | Path) -> GenerativeModel:
    """Load a roseood model checkpoint in eval mode."""
    return load_checkpoint(path)[0]


def model_fingerprint(model: GenerativeModel) -> str:
    """Content hash of a model's weights; detectors store it to refuse being used with another model."""
    return fingerprint(model.state_dict())
