"""mkdocs hook: drop nav entries of pages other branches are still writing, while their file is absent.

The nav in mkdocs.yml already names every planned page; until a page's Markdown file is merged, a strict
build would fail on the missing file. Only the names in ``OPTIONAL`` are dropped: any other missing page
still fails the build. Once every page exists this hook changes nothing and can be removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.plugins import get_plugin_logger

OPTIONAL = {"bad-input.md", "diffusion.md", "images-devices.md", "speed.md", "extending.md"}
log = get_plugin_logger(__name__)


def on_config(config: Any, **kwargs: Any) -> Any:
    """Remove absent optional pages from the nav (and sections left empty by it)."""
    config.nav = _present(config.nav, Path(config.docs_dir))
    return config


def _present(nav: Any, docs: Path) -> Any:
    if not isinstance(nav, list):
        return nav
    kept = []
    for entry in nav:
        target = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(target, list):
            target = _present(target, docs)
            if target:
                kept.append({next(iter(entry)): target})
        elif isinstance(target, str) and target in OPTIONAL and not (docs / target).exists():
            log.info("nav: %s is not written yet, left out", target)
        else:
            kept.append(entry)
    return kept
