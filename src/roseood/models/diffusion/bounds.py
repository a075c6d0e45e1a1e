"""The bounds every config roseood reads is checked against before anything is built (a number outside
is a damaged or hostile file, refused in one line): the published ranges, and checks of one field each that
``check_fields`` applies to a JSON object."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from roseood.errors import RoseError, shown
from roseood.validation import check_float, check_int, one_of

# Sane ranges of a UNet2DModel/DDPMScheduler config: published pixel-space UNet2DModels are at most 1024
# pixels wide (latent ones 128), with a few thousand channels and timesteps; a number outside is a damaged
# or hostile file, refused before anything is built.
MAX_SAMPLE_SIZE = 2048
MAX_CHANNELS = 8192
MAX_BLOCKS = 12
MAX_LAYERS = 64
MAX_TIMESTEPS = 100_000
MAX_CLASSES = 100_000  # class labels of a class-conditional UNet (ImageNet's 1000, a null class)


Check = Callable[[Any, str, type[RoseError]], Any]


def int_in(low: int, high: int, optional: bool = False) -> Check:
    def check(value: Any, name: str, error: type[RoseError]) -> Any:
        return None if optional and value is None else check_int(value, name, low=low, high=high, error=error)

    return check


def float_in(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Check:
    def check(value: Any, name: str, error: type[RoseError]) -> float:
        x = check_float(value, name, low=low, high=high, low_open=low_open, error=error)
        if high_open and x == high:
            raise error(f"{name} must be below {high:g}, got {x:g}")
        return x

    return check


def block_names(value: Any, name: str, error: type[RoseError]) -> list[str]:
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) for v in value):
        raise error(f"{name} must be a non-empty list of block names, got {shown(value)}")
    if len(value) > MAX_BLOCKS:
        raise error(f"{name} must name at most {MAX_BLOCKS} blocks, got {len(value)}")
    return list(value)


def width_list(value: Any, name: str, error: type[RoseError]) -> list[int]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_BLOCKS:
        raise error(f"{name} must be a list of 1 to {MAX_BLOCKS} channel counts, got {shown(value)}")
    return [check_int(v, f"{name}[{i}]", high=MAX_CHANNELS, error=error) for i, v in enumerate(value)]


def sample_size(value: Any, name: str, error: type[RoseError]) -> int:
    if isinstance(value, list | tuple):  # (height, width): roseood's models take square images
        if len(value) != 2 or value[0] != value[1]:
            raise error(f"{name} must be one size (square images), got {shown(value)}")
        value = value[0]
    return check_int(value, name, high=MAX_SAMPLE_SIZE, error=error)


FLAG = one_of(True, False)


def per_block(high: int) -> Check:
    """One positive integer at most ``high``, or one per block (a list); None where unset."""

    def check(value: Any, name: str, error: type[RoseError]) -> Any:
        if isinstance(value, list | tuple):
            if not 1 <= len(value) <= MAX_BLOCKS:
                raise error(f"{name} must be one number or 1 to {MAX_BLOCKS} of them, got {shown(value)}")
            return [check_int(v, f"{name}[{i}]", high=high, error=error) for i, v in enumerate(value)]
        return None if value is None else check_int(value, name, high=high, error=error)

    return check


def check_fields(
    config: Any, table: Mapping[str, Check], where: str, error: type[RoseError]
) -> dict[str, Any]:
    """``config`` (a JSON object) with every field of ``table`` it holds replaced by its checked value
    (``[32, 32]`` → ``32``, ``1`` → ``1.0``); other fields kept."""
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        raise error(f"{where} must be a JSON object of named settings, found {type(config).__name__}")
    out = dict(config)
    for name, check in table.items():
        if name in out:
            out[name] = check(out[name], f"{where}: {name}", error)
    return out
