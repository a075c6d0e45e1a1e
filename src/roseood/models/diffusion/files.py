"""A diffusers folder's files read without running code: a JSON object, a weight file (safetensors, or a
weights-only torch file); anything else a one-line ``CheckpointError`` naming the file. What the folder
readers (``folders``, ``text``, ``adapter``) share."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from torch import Tensor

from roseood.errors import CheckpointError, RoseError, first_line


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object read from ``path``; unreadable, invalid JSON or another JSON value is a one-line
    ``CheckpointError`` naming the file."""
    try:
        obj = json.loads(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({first_line(exc)})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: must hold a JSON object, found a JSON {type(obj).__name__}")
    return obj


def weight_file(path: Path) -> dict[str, Tensor]:
    """One weight file of a diffusers folder: safetensors, or a torch ``.bin`` (weights only: no code)."""
    from roseood.serialization import read_torch_file

    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        if "backend" not in inspect.signature(load_file).parameters:
            raise RoseError(
                "reading weight files needs safetensors 0.8 or later: pip install roseood[diffusion]"
            )
        try:
            # read into the process's own memory, not mapped: a denoiser takes these tensors themselves
            # (``load_state(assign=True)``), which must not change when the file is rewritten
            state: Any = load_file(path, backend="pread")
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
    else:
        state = read_torch_file(path)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()
    ):
        raise CheckpointError(f"{path}: does not hold a mapping of tensor names to tensors")
    return state
