"""Whether this process was started by torchrun: read from the environment without importing torch, so
that ``rose --help`` and a usage error answer at once."""

from __future__ import annotations

import os


def launched() -> bool:
    """Whether this process was started by torchrun (or anything setting ``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1
