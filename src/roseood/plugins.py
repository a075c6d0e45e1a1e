"""Plug-ins from outside roseood, for the command line: the modules installed packages declare under the
entry-point group ``roseood.plugins``, and those ``$ROSEOOD_PLUGINS`` names (comma-separated modules on
the path). Importing one registers its detectors, Fishers, aggregations, layer handlers or model
families, exactly as importing it in Python does; the commands then offer them by name. They come from
what was installed or named here, never from a file being read."""

from __future__ import annotations

import functools
import importlib
import os

from roseood.errors import RoseError, first_line

GROUP = "roseood.plugins"  # [project.entry-points."roseood.plugins"] in a plug-in's pyproject.toml
ENV = "ROSEOOD_PLUGINS"
_loaded: dict[str, str] = {}  # module -> where it was declared, imported once per process


@functools.cache
def installed() -> dict[str, str]:
    """The plug-in modules installed packages declare, and where: read once a process (a scan of every
    installed package's metadata; ``installed.cache_clear()`` reads them again)."""
    from importlib.metadata import entry_points

    return {
        ep.module: f"entry point {ep.name!r} of {ep.dist.name if ep.dist else 'an installed package'}"
        for ep in entry_points(group=GROUP)
    }


def declared() -> dict[str, str]:
    """Each plug-in module and where it is declared (an entry point of a package, or the variable)."""
    found = dict(installed())
    for name in (part.strip() for part in os.environ.get(ENV, "").split(",")):
        if name:
            found.setdefault(name, f"${ENV}")
    return found


def load_plugins() -> None:
    """Import every declared plug-in module not yet imported. One that cannot be imported (missing, or
    failing as it runs) is a one-line ``RoseError`` naming it and where it was declared, before any
    command works."""
    for module, where in declared().items():
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # a plug-in's own failure, whatever it raises: named, in one line
            raise RoseError(
                f"plug-in {module!r} ({where}) cannot be imported: {type(exc).__name__}: {first_line(exc)}"
            ) from None
        _loaded[module] = where
