"""Atomic, safe file I/O for everything roseood writes: model checkpoints and fitted detectors.

Files are dicts of tensors and plain Python values, written to a temporary file and renamed (so an
interrupted write never clobbers a good file) and read with ``weights_only=True``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from roseood.errors import CheckpointError


def atomic_save(obj: Any, path: str | Path) -> None:
    """Write ``obj`` with ``torch.save`` to ``path`` atomically (temp file beside it, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def safe_load(path: str | Path, expected_format: str) -> dict[str, Any]:
    """Load a roseood file, raising ``CheckpointError`` with a one-line reason if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != expected_format:
        found = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise CheckpointError(f"{path}: expected a {expected_format} file, found {found!r}")
    return obj


def share_equal_tensors(
    obj: Any, seen: dict[tuple[str, tuple[int, ...], str], torch.Tensor] | None = None
) -> Any:
    """``obj`` with equal tensors (anywhere in nested dicts/lists) replaced by one object, so that
    ``torch.save`` writes them once (e.g. two layers fed the same input share an eigenbasis)."""
    seen = {} if seen is None else seen
    if isinstance(obj, dict):
        return {k: share_equal_tensors(v, seen) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(share_equal_tensors(v, seen) for v in obj)
    if isinstance(obj, torch.Tensor) and obj.numel():
        t = obj.detach().to("cpu").contiguous()
        key = (
            str(t.dtype),
            tuple(t.shape),
            hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest(),
        )
        return seen.setdefault(key, t)
    return obj


def fingerprint(state_dict: Mapping[str, torch.Tensor]) -> str:
    """A short content hash of a model's parameters and buffers, to tie detectors to their model."""
    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key].detach().to("cpu").contiguous()
        h.update(key.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]
