"""Model checkpoints: one file holding kind, architecture config, weights and (optionally) training state.

Built-in families are rebuilt from the family registry; user models (``roseood.wrap`` or a
``GenerativeModel`` of the user's) from the factory they were made by (``--model-module``), which the
checkpoint records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from roseood.errors import CheckpointError, RoseError
from roseood.models.base import RoseModel, model_config, model_name
from roseood.serialization import atomic_save, fingerprint, read_torch_file, safe_load
from roseood.validation import check_model_config

MODEL_FORMAT = "roseood-model"


def save_model(model: RoseModel, path: str | Path, train_state: dict[str, Any] | None = None) -> None:
    """Write ``model`` (and, for resumable training, optimiser/epoch state) atomically to ``path``."""
    assert isinstance(model, nn.Module)
    obj: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "version": 1,
        "kind": model_name(model),
        "config": model_config(model),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    factory = getattr(model, "factory", None)
    if factory is not None:
        obj["factory"] = factory
    if train_state is not None:
        obj["train_state"] = train_state
    atomic_save(obj, path)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _load_state(model: RoseModel, state: Any, path: str | Path, what: str) -> None:
    assert isinstance(model, nn.Module)
    try:
        model.load_state_dict(state)
    except (TypeError, KeyError, RuntimeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: weights do not match {what} ({_first_line(exc)})") from None


def load_checkpoint(path: str | Path, model_module: str | None = None) -> tuple[RoseModel, dict[str, Any]]:
    """Rebuild the model stored at ``path``; also return the raw file dict (for training state).

    ``model_module`` ("file.py:factory") builds a user model whose checkpoint does not name its
    factory, or whose factory file has moved.
    """
    from roseood.models.families import FAMILIES
    from roseood.models.user import load_factory

    obj = safe_load(path, MODEL_FORMAT)
    kind = obj.get("kind")
    factory = model_module or obj.get("factory")
    if factory is not None:
        try:
            model = load_factory(factory)
        except RoseError as exc:
            raise CheckpointError(
                f"{path}: cannot rebuild its {kind} model ({exc}); pass --model-module"
            ) from None
        _load_state(model, obj.get("state_dict"), path, f"the model of {factory}")
    elif kind in FAMILIES:
        try:
            check_model_config(obj["config"], f"{kind} config")
            model = FAMILIES[str(kind)].cls(**obj["config"])
        except (TypeError, KeyError, ValueError, AttributeError, RoseError) as exc:
            raise CheckpointError(
                f"{path}: cannot build a {kind} from its stored config ({_first_line(exc)})"
            ) from None
        _load_state(model, obj["state_dict"], path, f"the stored {kind} config")
    else:
        raise CheckpointError(
            f"{path}: model kind {kind!r} is not built in (known: {sorted(FAMILIES)}); "
            "name the code that builds it with --model-module file.py:factory"
        )
    model.eval()
    return model, obj


def load_model(path: str | Path, model_module: str | None = None) -> RoseModel:
    """Load a roseood model checkpoint in eval mode (see ``load_checkpoint``)."""
    return load_checkpoint(path, model_module)[0]


def load_weights(model: RoseModel, path: str | Path) -> RoseModel:
    """Load weights into ``model`` from a roseood checkpoint or a plain ``torch.save(state_dict)`` file."""
    path = Path(path)
    obj = read_torch_file(path)
    state = obj.get("state_dict") if isinstance(obj, dict) and obj.get("format") == MODEL_FORMAT else obj
    assert isinstance(model, nn.Module)
    _load_state(model, state, path, f"the {model_name(model)} model")
    return model.eval()


def model_fingerprint(model: RoseModel) -> str:
    """Content hash of a model's weights; detectors store it to refuse being used with another model."""
    assert isinstance(model, nn.Module)
    return fingerprint(model.state_dict())


def open_model(path: str | Path | None = None, model_module: str | None = None) -> RoseModel:
    """The model a user names: a checkpoint ``path``, user code ``model_module`` ("file.py:factory"), or
    both (the code builds the model, ``path`` holds its weights: a roseood checkpoint or a plain
    ``state_dict`` file). Eval mode, on the CPU."""
    from roseood.models.user import load_factory

    if model_module is None and path is None:
        raise RoseError("name the model: --model CHECKPOINT and/or --model-module FILE.py:FACTORY")
    if model_module is None:
        assert path is not None
        return load_model(path)
    model = load_factory(model_module)
    return load_weights(model, path) if path is not None else model
