"""diffusers itself, loaded on demand: the optional dependency named in one line when it is missing, its
logger quietened, and its configs as plain JSON values."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from roseood.errors import RoseError


def diffusers_module() -> Any:
    """The ``diffusers`` package, or a one-line ``RoseError`` naming the extra that installs it."""
    try:
        import diffusers
    except ImportError:
        raise RoseError("diffusion models need diffusers: pip install roseood[diffusion]") from None
    try:  # a torchvision built for another torch breaks diffusers' optional import of it
        import torchvision  # noqa: F401
    except Exception:  # any failure: diffusers must not try it
        import diffusers.utils.import_utils as import_utils

        import_utils._torchvision_available = False
    return diffusers


@contextlib.contextmanager
def quiet_diffusers() -> Iterator[None]:
    """diffusers' logger at error level inside the block (its notices, e.g. "install accelerate for faster
    loading", are no news to a roseood user); the caller's level after it."""
    logging = diffusers_module().utils.logging
    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(before)


def plain_config(config: Any) -> dict[str, Any]:
    """A diffusers config as JSON-able plain values (lists, not tuples), without private keys."""
    return json.loads(json.dumps({k: v for k, v in dict(config).items() if not k.startswith("_")}))
