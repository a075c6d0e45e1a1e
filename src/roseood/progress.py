"""One progress helper for every loop that reports progress (batches, epochs, downloads).

On a terminal it is a tqdm bar; otherwise (logs, pipes, CI) it prints one plain line each time another
~10 % is done, so redirected output holds no ``\\r`` bar redraws. ``enabled=None`` means "on a terminal".
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
STEP_PERCENT = 10


def on_terminal() -> bool:
    """Whether progress goes to an interactive terminal (stderr is a TTY)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


class LineProgress(Generic[T]):
    """The non-terminal stand-in for a tqdm bar: one line per ``STEP_PERCENT`` % (tqdm's small API)."""

    def __init__(self, iterable: Iterable[T] | None, desc: str | None, total: int | None) -> None:
        self.iterable = iterable
        self.desc = desc or "progress"
        self.total = total if total is not None else _length(iterable)
        self.n = 0
        self.postfix = ""
        self._last = 0

    def __iter__(self) -> Iterator[T]:
        assert self.iterable is not None
        for item in self.iterable:
            yield item
            self.update(1)

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.total:
            return
        step = min(100, self.n * 100 // self.total) // STEP_PERCENT
        if step > self._last:
            self._last = step
            print(
                f"{self.desc}: {self.n}/{self.total} ({step * STEP_PERCENT} %){self.postfix}", file=sys.stderr
            )

    def set_postfix(self, **values: Any) -> None:
        self.set_postfix_str(", ".join(f"{k}={v}" for k, v in values.items()))

    def set_postfix_str(self, text: str) -> None:
        self.postfix = f"  {text}"

    def close(self) -> None:
        """Nothing to release (tqdm compatibility)."""

    def __enter__(self) -> LineProgress[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _length(iterable: Iterable[Any] | None) -> int | None:
    try:
        return len(iterable)  # type: ignore[arg-type]
    except TypeError:
        return None


def progress(
    iterable: Iterable[T] | None = None,
    desc: str | None = None,
    *,
    total: int | None = None,
    enabled: bool | None = None,
    **tqdm_kwargs: Any,
) -> Any:
    """Wrap ``iterable`` (or count ``update`` calls up to ``total``) with progress reporting: a tqdm bar
    on a terminal, ~10 % lines otherwise, nothing when ``enabled`` is False."""
    if enabled is None:
        enabled = on_terminal()
    if enabled and not on_terminal():
        return LineProgress(iterable, desc, total)
    return tqdm(iterable, desc=desc, total=total, disable=not enabled, **tqdm_kwargs)


def note(message: str) -> None:
    """Print a line without breaking an active progress bar."""
    tqdm.write(message)
