"""Loading weights strictly: a state dict that does not fit a module is one line naming the tensors at fault
(shared by our checkpoints and diffusers folders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor, nn

from roseood.errors import CheckpointError, first_line, shown
from roseood.models.base import RoseModel

SHOWN_KEYS = 3  # tensor names a weight mismatch names before "and N more"


def _some(keys: list[str]) -> str:
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return ", ".join(shown(k) for k in keys[:SHOWN_KEYS]) + more


def state_mismatch(module: nn.Module, state: Any) -> str | None:
    """What keeps ``state`` from loading into ``module`` strictly, naming the first few tensors: missing
    ones, unexpected ones, shape mismatches; None when it fits."""
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()
    ):
        return "not a mapping of tensor names to tensors"
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [k for k in own if k in state and state[k].shape != own[k].shape]
    problems = [f"missing {_some(missing)}"] if missing else []
    problems += [f"unexpected {_some(unexpected)}"] if unexpected else []
    if shapes:
        k = shapes[0]
        more = f" (and {len(shapes) - 1} more)" if len(shapes) > 1 else ""
        file_shape, model_shape = tuple(state[k].shape), tuple(own[k].shape)
        problems.append(f"{shown(k)} has shape {file_shape} in the file, {model_shape} in the model{more}")
    return "; ".join(problems) or None


def _refuse(problem: str, path: str | Path, what: str) -> CheckpointError:
    return CheckpointError(f"{path}: weights do not match {what} ({problem})")


def check_state(module: nn.Module, state: Any, path: str | Path, what: str) -> None:
    """``load_state``'s refusal without loading: ``module`` may live on torch's meta device, so a file that
    does not fit is refused before the real module is allocated."""
    problem = state_mismatch(module, state)
    if problem is not None:
        raise _refuse(problem, path, what)


def load_state(
    module: RoseModel | nn.Module, state: Any, path: str | Path, what: str, assign: bool = False
) -> None:
    """Load ``state`` into ``module`` strictly: a missing, unexpected or misshapen tensor is a one-line
    ``CheckpointError`` naming ``path``, ``what`` it should match, and the first few tensors at fault.
    ``assign``: the module takes ``state``'s tensors themselves (in its own dtypes), not copies: a module
    built on the meta device gets its weights without a second copy in memory."""
    assert isinstance(module, nn.Module)
    check_state(module, state, path, what)
    if assign:
        own = module.state_dict()
        state = {k: v.to(own[k].dtype) for k, v in state.items()}
    try:
        module.load_state_dict(state, assign=assign)
    except (TypeError, KeyError, RuntimeError, AttributeError, ValueError) as exc:
        raise _refuse(first_line(exc), path, what) from None
