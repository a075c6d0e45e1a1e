"""Model checkpoints: one file holding kind, architecture config, weights and (optionally) training state.

Built-in families are rebuilt from the family registry. User models (``roseood.wrap`` or a
``GenerativeModel`` of the user's) are rebuilt only by the code the user names when loading
(``model_module=``, ``--model-module``): nothing named inside a file is ever imported or called, so a
checkpoint from elsewhere cannot run code. The file records which factory built it, to say what to pass.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, cast

from torch import Tensor, nn

from roseood.contracts import FromFactory, Preprocessed
from roseood.data.preprocess import Preprocessing
from roseood.errors import CheckpointError, RoseError, first_line, shown
from roseood.integrity import field, same, verify
from roseood.memory import check_memory, module_bytes
from roseood.models.base import RoseModel, model_config, model_name
from roseood.models.state import load_state
from roseood.progress import state
from roseood.serialization import fingerprint, read_torch_file, safe_load, save_file
from roseood.validation import check_model_config

MODEL_FORMAT = "roseood-model"
BARE_WEIGHTS = (  # what to do with a file of weights alone, said where one is given as a model
    "weights alone: pass the code that builds the model with --model-module FILE.py:FACTORY and this file "
    "as --model (a diffusers component's weights: name the folder holding them)"
)
MODEL_VERSION = 1


def save_model(model: RoseModel, path: str | Path, train_state: dict[str, Any] | None = None) -> None:
    """Write ``model`` (and, for resumable training, optimiser/epoch state) atomically to ``path``, with
    the image preprocessing it was trained with (``model.preprocessing``) when it has one."""
    assert isinstance(model, nn.Module)
    obj: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "kind": model_name(model),
        "config": model_config(model),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    if isinstance(model, FromFactory) and model.factory is not None:
        obj["factory"] = model.factory  # informational: says which --model-module loads it back
    prep = model.preprocessing if isinstance(model, Preprocessed) else None
    if isinstance(prep, Preprocessing):
        obj["preprocessing"] = prep.to_dict()
    if train_state is not None:
        obj["train_state"] = train_state
    save_file(obj, path)


def check_model_file(obj: dict[str, Any], path: str | Path) -> None:
    """The fields of a model file (format and checksum already checked): version, kind, config,
    state_dict (names to tensors), and the optional factory and training state."""
    try:
        if not same(obj.get("version", MODEL_VERSION), MODEL_VERSION):
            version = shown(obj.get("version"))
            raise CheckpointError(f"field 'version': {version} is not a version this roseood reads")
        field(obj, "kind", str)
        config = field(obj, "config", dict)
        if not all(isinstance(k, str) for k in config):
            raise CheckpointError("field 'config' must map names to values")
        state = field(obj, "state_dict", dict)
        bad = next((k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, Tensor)), None)
        if bad is not None:
            raise CheckpointError(f"field 'state_dict': entry {shown(bad)} is not a named tensor")
        for name in ("factory", "train_state"):
            if name in obj:
                field(obj, name, str if name == "factory" else dict)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


PLAIN_TYPES = {int: "an integer", bool: "true or false", float: "a number", str: "text"}


def _of_type(value: Any, t: type) -> bool:
    """Whether ``value`` is a ``t`` as a config means it: a bool is no number, an int is a float."""
    if isinstance(value, bool):
        return t is bool
    return isinstance(value, t) or (t is float and isinstance(value, int))


def check_config_types(cls: type[RoseModel], config: dict[str, Any], where: str) -> None:
    """Each value of a stored ``config`` of the type ``cls``'s constructor annotates (the plain ones:
    int, bool, float, str, or one of them or None), refused in one line naming the field: a resealed
    ``ngf='abc'`` would otherwise fail deep in the build, in words that name no field."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # annotations this Python cannot resolve: the build checks itself
        return
    for key, value in config.items():
        hint = hints.get(key)
        allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if not all(t in PLAIN_TYPES or t is type(None) for t in allowed):
            continue  # a structured value (widths, a UNet config): the build checks it
        if not any(value is None if t is type(None) else _of_type(value, t) for t in allowed):
            wanted = " or ".join(PLAIN_TYPES.get(t, "null") for t in allowed)
            raise RoseError(f"{where}: {key} must be {wanted}, got {shown(value)}")


def _build(cls: type[RoseModel], config: dict[str, Any], kind: str) -> RoseModel:
    """``cls(**config)`` for a config read from a file, refused in one line when its weights cannot fit
    in memory: measured first by building it on torch's meta device, which allocates nothing."""
    try:
        nbytes = module_bytes(lambda: cls(**config))
    except Exception:  # not buildable on the meta device (diffusion): the real build checks itself
        nbytes = 0
    check_memory(nbytes, f"a {kind} of this config", hint="the file's config is too large for this machine")
    return cls(**config)


def _user_model_error(path: str | Path, obj: dict[str, Any]) -> CheckpointError:
    """What to pass for a user model's checkpoint (its code is never taken from the file)."""
    factory = obj.get("factory")
    spec = factory if isinstance(factory, str) and len(factory) < 500 and factory.isprintable() else None
    built = (
        f"built by {shown(spec)}; if you trust that code, pass --model-module {spec}"
        if spec
        else "pass --model-module FILE:FACTORY"
    )
    return CheckpointError(
        f"{path}: holds a user model ({shown(obj['kind'])}), whose code is never run from a file: {built} "
        "(model_module= in Python)"
    )


def load_checkpoint(path: str | Path, model_module: str | None = None) -> tuple[RoseModel, dict[str, Any]]:
    """Rebuild the model stored at ``path``; also return the raw file dict (for training state).
    A folder saved by diffusers (a pipeline or a UNet2DModel's folder) loads as a diffusion model, and so
    does the name of a zoo model (``ddpm-fmnist-s0``, ``vae-cifar10-s0``, see ``roseood.models.zoo``), or of
    a folder inside one (``sd-fmnist-s0/sneaker-lora``), where no local path has it.

    A built-in family is rebuilt from its registry by the stored config; any other model only by
    ``model_module`` ("file.py:factory" or "package.module:factory"), the user's own code: a factory
    recorded in the file is only named in the error.
    """
    from roseood.models.diffusion import is_diffusers_folder, load_diffusers
    from roseood.models.families import FAMILIES
    from roseood.models.user import load_factory
    from roseood.plugins import load_plugins

    path = _zoo_or_local(path) if model_module is None else path
    if model_module is None and is_diffusers_folder(path):
        return load_diffusers(path), {}
    if Path(path).is_dir():
        raise CheckpointError(
            f"{path}: a folder without a model: roseood loads a diffusers folder (model_index.json, or a "
            "component's config.json beside its weights) or a .pt file roseood saved"
        )
    obj = safe_load(path, MODEL_FORMAT, bare=BARE_WEIGHTS)
    check_model_file(obj, path)
    kind = obj["kind"]
    if model_module is None and kind not in FAMILIES:
        load_plugins()  # a plug-in's family: its installed package registers it (never the file)
    if model_module is not None:
        try:
            model = load_factory(model_module)
        except RoseError as exc:
            raise CheckpointError(f"{path}: cannot rebuild its {shown(kind)} model ({exc})") from None
        load_state(model, obj["state_dict"], path, f"the model of {model_module}")
    elif kind in FAMILIES:
        try:
            check_model_config(obj["config"], f"{kind} config")
            check_config_types(FAMILIES[str(kind)].cls, obj["config"], f"{kind} config")
            model = _build(FAMILIES[str(kind)].cls, obj["config"], str(kind))
        except (TypeError, KeyError, ValueError, AttributeError, RuntimeError, RoseError) as exc:
            raise CheckpointError(
                f"{path}: cannot build a {kind} from its stored config ({first_line(exc)})"
            ) from None
        load_state(model, obj["state_dict"], path, f"the stored {kind} config")
    else:
        raise _user_model_error(path, obj)
    if obj.get("preprocessing") is not None:
        cast(Any, model).preprocessing = _preprocessing(obj["preprocessing"], model, path)
    model.eval()
    return model, obj


def _zoo_or_local(path: str | Path) -> str | Path:
    """What a name given as a model is: a zoo model's checkpoint or folder (checked, said in one line)
    where no local path has the name; else the path itself (said, where the zoo has the name too)."""
    from roseood.models.zoo import ZOO_NAMES, zoo_model, zoo_named

    named = zoo_named(path)
    if named is not None:
        name, inner = named
        found = zoo_model(name, inner)
        where = f"{found}, inside the zoo model {name}" if inner else f"the zoo model in {found}"
        state(
            f"{Path(name, inner).as_posix()}: {where} (its files match SHA256SUMS; its card: rose zoo {name})"
        )
        return found
    if str(path) in ZOO_NAMES:  # what the user has at that path is what they named: said
        what = "folder" if Path(path).is_dir() else "file"
        state(f"{path}: the local {what}, not the zoo model of that name")
    return path


def _preprocessing(stored: Any, model: RoseModel, path: str | Path) -> Preprocessing:
    """The stored preprocessing, checked against the model's input shape."""
    try:
        prep = Preprocessing.from_dict(stored)
    except (TypeError, AttributeError, RoseError) as exc:
        raise CheckpointError(f"{path}: unreadable preprocessing record ({first_line(exc)})") from None
    if model.input_shape not in (None, (prep.channels, prep.size, prep.size)):
        raise CheckpointError(
            f"{path}: preprocessing {prep.describe()} does not fit the model's inputs {model.input_shape}"
        )
    return prep


def load_model(path: str | Path, model_module: str | None = None) -> RoseModel:
    """Load a roseood model checkpoint in eval mode (see ``load_checkpoint``)."""
    return load_checkpoint(path, model_module)[0]


def load_weights(model: RoseModel, path: str | Path) -> RoseModel:
    """Load weights into ``model`` from a roseood checkpoint or a plain ``torch.save(state_dict)`` file."""
    path = Path(path)
    obj = read_torch_file(path)
    ours = isinstance(obj, dict) and obj.get("format") == MODEL_FORMAT
    if ours:
        verify(obj, path)
        check_model_file(obj, path)
    state = obj["state_dict"] if ours else obj
    assert isinstance(model, nn.Module)
    load_state(model, state, path, f"the {model_name(model)} model")
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
