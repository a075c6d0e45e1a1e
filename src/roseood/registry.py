"""The one plug-in pattern: a named registry that built-in and user code extend alike.

Detectors, detection methods, Fishers, aggregations, layer handlers and model families each live in one
``Registry``; the CLI's choices and ``--help`` listings are read from it, and a name read from a file is
looked up here (an allow-list), never imported. Extend one from your code, e.g.
``roseood.detectors.METHODS.register("my-method", Method(MyDetector))``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from roseood.errors import RoseError

K = TypeVar("K")
V = TypeVar("V")


class Registry(Generic[K, V]):
    """Named plug-ins of one kind (``what``: "detector", "Fisher", ...), in registration order."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[K, V] = {}

    def register(self, key: K, value: V, *, replace: bool = False) -> V:
        """Add ``value`` under ``key`` and return it; registering a taken key needs ``replace=True``."""
        if key in self._items and not replace and self._items[key] is not value:
            raise RoseError(f"a {self.what} named {key!r} is already registered (pass replace=True)")
        self._items[key] = value
        return value

    def get(self, key: K) -> V:
        """The plug-in registered as ``key``, or a ``RoseError`` that lists the known ones."""
        if key not in self._items:
            raise RoseError(f"unknown {self.what} {key!r}; known: {', '.join(sorted(map(str, self._items)))}")
        return self._items[key]

    def find(self, key: K) -> V | None:
        """The plug-in registered as ``key``, or None."""
        return self._items.get(key)

    def __getitem__(self, key: K) -> V:
        return self.get(key)

    def __delitem__(self, key: K) -> None:
        """Remove a plug-in (e.g. one a test registered)."""
        del self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[K, V]]:
        return list(self._items.items())

    def values(self) -> list[V]:
        return list(self._items.values())

    def names(self) -> list[K]:
        return list(self._items)
