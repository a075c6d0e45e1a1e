"""User models from the command line: ``--model-module file.py:factory`` (or ``package.module:factory``)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from torch import nn

from roseood.errors import RoseError
from roseood.models.base import RoseModel


@contextmanager
def _neighbours(target: str) -> Iterator[None]:
    """While a user's ``.py`` file is imported and its factory runs, its folder is on ``sys.path``: the
    file may import the modules beside it, as when it runs as a script from its folder."""
    folder = str(Path(target).expanduser().resolve().parent) if target.endswith(".py") else None
    if folder is None or folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)


def _import(target: str) -> tuple[ModuleType, str]:
    """Import a ``.py`` file (by path) or a module (by dotted name); return it and its canonical name."""
    if not target.endswith(".py"):
        return importlib.import_module(target), target
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise RoseError(f"{target}: no such file")
    name = f"roseood_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name], str(path)


def load_factory(spec: str) -> RoseModel:
    """Call the factory named by ``spec`` ("file.py:build" or "package.module:build") and return its
    model in eval mode, remembering ``spec`` (with an absolute path) so saved checkpoints load back."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr.isidentifier():
        raise RoseError(f"--model-module must be FILE.py:FACTORY or package.module:FACTORY, got {spec!r}")
    try:
        with _neighbours(target):
            module, where = _import(target)
            factory = getattr(module, attr, None)
            if not callable(factory):
                raise RoseError(f"{target} defines no function {attr!r}")
            model = factory()
    except RoseError:
        raise
    except Exception as exc:  # the user's own code failed: say where, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise RoseError(f"{spec}: {type(exc).__name__}: {first}") from exc
    if not isinstance(model, nn.Module) or not isinstance(model, RoseModel):
        raise RoseError(
            f"{spec} returned a {type(model).__name__}, not a roseood model: "
            "return roseood.wrap(module, loss_fn, layers=[...]) or a roseood.models.GenerativeModel"
        )
    object.__setattr__(model, "factory", f"{where}:{attr}")  # a plain attribute, on any module class
    return model.eval()
