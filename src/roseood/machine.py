"""The machine a number was measured on: versions and hardware, printed next to every number we report."""

from __future__ import annotations

import platform
import sys
from typing import Any

import torch

from roseood import __version__


def machine_description() -> dict[str, Any]:
    """Versions and hardware, printed next to every number we report."""
    return {
        "roseood": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }
