"""The research experiments' smoke workspace: the bench tests' one with research's smoke profile."""

from __future__ import annotations

from pathlib import Path

from research.profiles import get_profile

from roseood.bench import Workspace
from tests.bench import smoke


def smoke_workspace(root: Path, **only: tuple[str, ...]) -> Workspace:
    """``tests.bench.smoke.smoke_workspace`` whose profile holds the research experiments' settings."""
    ws = smoke.smoke_workspace(root, **only)
    ws.profile = get_profile("smoke")
    return ws
