"""One validation layer for every argument a person gives: the Python API and the ``rose`` CLI.

Each ``check_*`` returns the value (normalised) or raises ``RoseError`` (or the given subclass) with a
one-line reason naming the argument. ``cli_type`` turns a check into an ``argparse`` ``type=`` so that
the command line refuses a bad option before any work starts, with the same wording.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from roseood.errors import RoseError, shown

T = TypeVar("T")
SEED_LIMIT = 2**32  # numpy's legacy seeding and torch's generators accept 0 <= seed < 2**32
DEVICE_TYPES = ("cpu", "cuda", "mps")


def check_int(
    value: Any,
    name: str = "value",
    *,
    low: int = 1,
    high: int | None = None,
    error: type[RoseError] = RoseError,
) -> int:
    """An integer ≥ ``low`` (counts: ``low=1``) and, when given, ≤ ``high``; bools and floats are refused."""
    kind = {1: "a positive integer", 0: "a non-negative integer"}.get(low, f"an integer ≥ {low}")
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise error(f"{name} must be {kind}, got {shown(value)}")
    if high is not None and value > high:
        raise error(f"{name} must be at most {high}, got {shown(value)}")
    return int(value)


def check_float(
    value: Any,
    name: str = "value",
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    allow_inf: bool = False,
    error: type[RoseError] = RoseError,
) -> float:
    """A finite float (or ±inf with ``allow_inf``) in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{name} must be a number, got {shown(value)}")
    x = float(value)
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise error(f"{name} must be a finite number, got {x}")
    if x < low or x > high or (low_open and x == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise error(f"{name} must be in {interval}, got {x:g}")
    return x


def check_seed(value: Any, name: str = "seed", *, error: type[RoseError] = RoseError) -> int:
    """A seed numpy and torch both accept: an integer with 0 ≤ seed < 2**32."""
    seed = check_int(value, name, low=0, error=error)
    if seed >= SEED_LIMIT:
        raise error(f"{name} must be < 2**32, got {shown(seed)}")
    return seed


def check_device(value: Any, name: str = "device") -> str:
    """``auto`` (the best device here: see ``roseood.distributed.device``) or a device string torch knows
    and this machine has (``cuda`` needs a visible GPU, ``mps`` Apple's Metal)."""
    if str(value) == "auto":
        return "auto"
    import torch

    try:
        device = torch.device(str(value))
    except (RuntimeError, ValueError):
        raise RoseError(
            f"{name} {value!r} is not a device; use auto or one of {', '.join(DEVICE_TYPES)}"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise RoseError(f"{name} {value!r}: no CUDA GPU is available on this machine; use auto or cpu")
        if device.index is not None and device.index >= count:
            raise RoseError(f"{name} {value!r}: only {count} CUDA device(s) are visible")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise RoseError(f"{name} {value!r}: MPS is not available on this machine; use auto or cpu")
    elif device.type != "cpu":
        raise RoseError(f"{name} {value!r} is not supported; use auto or one of {', '.join(DEVICE_TYPES)}")
    return str(value)


def check_choice(value: T, choices: Iterable[T], name: str = "value") -> T:
    """One of ``choices``."""
    allowed = list(choices)
    if value not in allowed:
        raise RoseError(f"unknown {name} {value!r}; choose from {', '.join(map(str, allowed))}")
    return value


def one_of(*choices: Any) -> Callable[[Any, str, type[RoseError]], Any]:
    """A check that a value is one of ``choices``, of the same type (True is no 1, 1.0 no "1"), else a
    one-line ``error`` naming it."""

    def check(value: Any, name: str, error: type[RoseError] = RoseError) -> Any:
        if not any(type(value) is type(c) and value == c for c in choices):
            raise error(f"{name} must be one of {', '.join(map(str, choices))}, got {shown(value)}")
        return value

    return check


def check_names(text: str, choices: Iterable[str], name: str = "name") -> tuple[str, ...]:
    """A non-empty comma-separated list, each one of ``choices``."""
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if not items:
        raise RoseError(f"no {name}s given")
    allowed = list(choices)
    unknown = [i for i in items if i not in allowed]
    if unknown:
        raise RoseError(f"unknown {name}(s) {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return items


def check_model_config(config: Mapping[str, Any], where: str = "model config") -> None:
    """A model architecture holds plain values (numbers, strings, lists and mappings of them, as
    ``config()`` writes them) and every integer size in it (channels, widths, latent size…) is ≥ 1."""

    def plain(value: Any) -> bool:
        if isinstance(value, list | tuple):
            return all(plain(v) for v in value)
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        return value is None or isinstance(value, bool | int | float | str)

    for key, value in config.items():
        if not plain(value):
            raise RoseError(f"{where}: {key} must be a plain value, got a {type(value).__name__}")
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise RoseError(f"{where}: {key} must be ≥ 1, got {value}")


def parse_t_range(text: str, name: str = "--rose-t-range") -> tuple[float, float]:
    """A timestep range ``LO,HI`` (fractions of the train timesteps, 0 ≤ LO < HI ≤ 1)."""
    try:
        lo, hi = (float(v) for v in str(text).split(","))
    except ValueError:
        raise RoseError(f"{name} takes two comma-separated fractions LO,HI, got {text!r}") from None
    check_float(lo, f"{name} LO", low=0.0, high=1.0)
    check_float(hi, f"{name} HI", low=0.0, high=1.0)
    if lo >= hi:
        raise RoseError(f"{name} needs LO < HI, got {text!r}")
    return lo, hi


def cli_type(check: Callable[[Any, str], T], parse: Callable[[str], Any] = int) -> Callable[[str], T]:
    """An argparse ``type=`` that parses the text with ``parse`` and validates it with ``check``."""

    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {_KIND.get(parse, 'a value')}, got {text!r}"
            ) from None
        try:
            return check(value, "value")
        except RoseError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(check, "__name__", "value")
    return convert


_KIND: dict[Callable[[str], Any], str] = {int: "an integer", float: "a number"}

# The CLI's option types, one per kind of value.
count = cli_type(check_int)
non_negative = cli_type(lambda v, n: check_int(v, n, low=0))
seed = cli_type(check_seed)
positive_float = cli_type(lambda v, n: check_float(v, n, low=0.0, low_open=True), float)
non_negative_float = cli_type(lambda v, n: check_float(v, n, low=0.0), float)
rate = cli_type(lambda v, n: check_float(v, n, low=0.0, high=1.0, low_open=True), float)
finite_float = cli_type(check_float, float)
device = cli_type(check_device, str)
channels = cli_type(lambda v, n: check_choice(v, (1, 3), "channel count"))
t_range = cli_type(lambda v, n: parse_t_range(v), str)
