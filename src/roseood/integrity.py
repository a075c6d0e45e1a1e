"""Integrity of the files roseood writes: a SHA-256 checksum over each file's payload, and schema checks.

Every model, detector and cache file carries ``checksum``, the SHA-256 of its payload (every other field,
walked in a canonical order: dict keys sorted, tensors by dtype, shape and bytes), so a byte flipped on
disk or a hand edit is refused on load instead of silently changing scores. The checksum detects damage,
it does not authenticate: whoever can write the file can recompute it, which is why the fields are also
checked against a schema (types, allowed names, registered methods) and nothing named in a file is
ever imported or called. Files written before checksums existed load with an ``UnverifiedFileWarning``.

Field errors are one-line ``CheckpointError``s naming the field; loaders prefix the file's path.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import torch
from torch import Tensor

from roseood.errors import CheckpointError, RoseWarning, shown
from roseood.registry import Registry

CHECKSUM = "checksum"
FINGERPRINT = re.compile(r"[0-9a-f]{16}")


class UnverifiedFileWarning(RoseWarning):
    """A roseood file written before checksums existed: loaded, but damage to it cannot be detected."""


def _update(h: Any, obj: Any) -> None:
    """Feed ``obj`` to the hash ``h`` with a type tag per value, in a canonical order."""
    if isinstance(obj, Tensor):
        t = obj.detach().to("cpu").contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, Mapping):
        h.update(f"D{len(obj)}".encode())
        for key in sorted(obj, key=lambda k: (type(k).__name__, repr(k))):
            _update(h, key)
            _update(h, obj[key])
    elif isinstance(obj, list | tuple):
        h.update(f"{type(obj).__name__[0]}{len(obj)}".encode())
        for item in obj:
            _update(h, item)
    elif obj is None or isinstance(obj, bool | int | float | str | bytes):
        text = repr(obj).encode() if not isinstance(obj, bytes) else obj
        h.update(f"{type(obj).__name__}:{len(text)}:".encode() + text)
    else:
        raise CheckpointError(f"cannot checksum a {type(obj).__name__} value")


def payload_digest(obj: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of every field of ``obj`` but ``checksum``."""
    h = hashlib.sha256()
    _update(h, {k: v for k, v in obj.items() if k != CHECKSUM})
    return h.hexdigest()


def seal(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with its payload checksum added (what every roseood file is written as)."""
    return {**obj, CHECKSUM: payload_digest(obj)}


def same(value: Any, expected: Any) -> bool:
    """``value == expected`` for a value read from a file, which may be of any type and hold tensors
    anywhere (a tensor compared with ``==`` is not a bool): equal only with the expected type."""
    try:
        return type(value) is type(expected) and bool(value == expected)
    except (RuntimeError, TypeError, ValueError):  # tensors inside containers
        return False


def verify(obj: Mapping[str, Any], path: str | Path) -> None:
    """Refuse a file whose payload does not match its checksum; warn once about a file without one."""
    stored = obj.get(CHECKSUM)
    if stored is None:
        warnings.warn(
            f"{path}: written without a checksum (by an older roseood), so damage cannot be detected; "
            "save it again (or re-create it) to add one",
            UnverifiedFileWarning,
            stacklevel=3,
        )
        return
    try:
        actual = payload_digest(obj)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    if not isinstance(stored, str) or stored != actual:
        raise CheckpointError(
            f"{path}: checksum mismatch: the file was damaged or edited after it was written; re-create it"
        )


# -- field checks -------------------------------------------------------------------------------------


def field(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``obj[name]``, refused with a one-line error naming the field unless it is of ``kind``."""
    label = f"{where}{name}"
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"field {where.rstrip('.') or 'the file'} must be a mapping")
    if name not in obj:
        raise CheckpointError(f"field {label!r} is missing")
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise CheckpointError(f"field {label!r} must be {names}, found {type(value).__name__}")
    return value


def tensor(
    value: Any,
    label: str,
    *,
    ndim: int | None = None,
    shape: tuple[int, ...] | None = None,
    floating: bool = True,
    finite: bool = True,
    nonnegative: bool = False,
) -> Tensor:
    """``value`` checked to be a tensor of the given rank/shape, floating dtype, finite and/or ≥ 0."""
    if not isinstance(value, Tensor):
        raise CheckpointError(f"field {label!r} must be a tensor, found {type(value).__name__}")
    if floating and not value.is_floating_point():
        raise CheckpointError(f"field {label!r} must hold floats, found {value.dtype}")
    if ndim is not None and value.dim() != ndim:
        raise CheckpointError(f"field {label!r} must have {ndim} dimension(s), found {tuple(value.shape)}")
    if shape is not None and tuple(value.shape) != shape:
        raise CheckpointError(f"field {label!r} must have shape {shape}, found {tuple(value.shape)}")
    if floating and finite and not bool(torch.isfinite(value).all()):
        raise CheckpointError(f"field {label!r} holds non-finite values")
    if nonnegative and bool((value < 0).any()):
        raise CheckpointError(f"field {label!r} holds negative values")
    return value


def count(obj: Mapping[str, Any], name: str, where: str = "") -> int:
    """A positive integer field (sample counts)."""
    value = field(obj, name, int, where)
    if value < 1:
        raise CheckpointError(f"field {where}{name!r} must be a positive integer, found {value}")
    return int(value)


def _matches(value: Any, hint: Any) -> bool:
    """Whether a value read from a file fits a constructor's type hint (plain data only: a hint naming a
    class such as a model never matches, so no object can come from a file)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple):
        args = get_args(hint)
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
        return all(_matches(v, args[0]) for v in value) if args else True
    return False


def check_params(cls: type, params: Any, where: str = "params") -> dict[str, Any]:
    """Detector hyper-parameters read from a file: a dict whose names are keyword parameters of ``cls``
    and whose values fit their type hints; an unknown name or a wrong type is a one-line error."""
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise CheckpointError(f"field {where!r} must be a mapping of names to values")
    signature = inspect.signature(cls, eval_str=True)
    allowed = [p for p, v in signature.parameters.items() if v.kind is v.KEYWORD_ONLY and p != "progress"]
    for name, value in params.items():
        if name not in allowed:
            raise CheckpointError(
                f"field {where}.{shown(name)}: unknown parameter of a {getattr(cls, 'method', cls.__name__)} "
                f"detector (known: {', '.join(allowed)})"
            )
        if not _matches(value, signature.parameters[name].annotation):
            raise CheckpointError(f"field {where}.{name}: {shown(value)} is not a valid value")
        if isinstance(value, float) and math.isnan(value):
            raise CheckpointError(f"field {where}.{name}: NaN is not a valid value")
    return params


def check_detector_file(obj: dict[str, Any], registry: Registry[str, Any]) -> tuple[type, dict[str, Any]]:
    """Check a detector file's fields (format and checksum already checked by ``safe_load``): version,
    method (registered), params (see ``check_params``), state, threshold, model fingerprint, tag, the
    model's loss settings; return
    the detector class and its params."""
    version = obj.get("version", 1)
    if not same(version, 1):
        raise CheckpointError(f"field 'version': {shown(version)} is not a version this roseood reads")
    method = field(obj, "method", str)
    if method not in registry:
        known = ", ".join(registry)
        raise CheckpointError(f"field 'method': unknown detector method {shown(method)} (known: {known})")
    cls = registry[method]
    if method == "ensemble":  # its members' methods and params, each checked like a detector's
        params = field(obj, "params", dict)
        check_params(cls, {k: v for k, v in params.items() if k != "members"})
        for i, member in enumerate(field(params, "members", list, "params.")):
            where = f"params.members.{i}."
            name = field(member, "method", str, where)
            if name not in registry or name == "ensemble":
                raise CheckpointError(f"field {where}method: unknown detector method {shown(name)}")
            check_params(registry[name], member.get("params"), f"{where}params")
    else:
        params = check_params(cls, obj.get("params"), "params")
    field(obj, "state", dict)
    threshold = field(obj, "threshold", (float, int, type(None)))
    if threshold is not None and not math.isfinite(threshold):
        raise CheckpointError(f"field 'threshold' must be finite, found {threshold}")
    fp = field(obj, "model_fingerprint", (str, type(None)))
    if fp is not None and not FINGERPRINT.fullmatch(fp):
        raise CheckpointError(f"field 'model_fingerprint': {shown(fp)} is not a model fingerprint")
    if "tag" in obj:
        field(obj, "tag", str)
    if "model_loss" in obj:  # the model's loss settings as fitted (a DDPM's pairs), set again on loading
        field(obj, "model_loss", dict)
    return cls, params
