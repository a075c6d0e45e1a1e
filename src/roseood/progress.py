"""One progress helper for every loop that reports progress (epochs, Fisher passes, scoring, downloads).

A person reads one bar per long stage: on a terminal a tqdm bar (with its ETA), and a loop that runs
while another bar is shown (a detector's batches inside an evaluation's stage, an ensemble member inside
the ensemble) shows none of its own, so bars never nest or redraw over each other. ``stage(label)`` names
the stage the next bar belongs to ("rose-ekfac fit", "nll score mnist"). Off a terminal (logs,
pipes, CI) a bar is a plain line every ``LINE_INTERVAL_S`` seconds and one when it ends, each with the
elapsed time and ETA, so redirected output holds no ``\\r`` redraws. ``enabled=None`` (every default,
in Python too) means "on a terminal" (``resolve``): bars where a person watches, silence in logs, pipes and
tests unless asked for.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
LINE_INTERVAL_S = 30.0
_open_bars = 0  # bars shown right now: a loop inside one shows none of its own
_stages: list[str] = []


def on_terminal() -> bool:
    """Whether progress goes to an interactive terminal (stderr is a TTY)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def resolve(enabled: bool | None) -> bool:
    """The one reading of a ``progress`` argument: None is "when stderr is a terminal"."""
    return on_terminal() if enabled is None else bool(enabled)


def duration(seconds: float) -> str:
    """Seconds as "42 s", "3 min 05 s" or "2 h 07 min"."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta(done: float, total: float, elapsed: float) -> str:
    """ "ETA 3 min 05 s" from the rate so far, or "" before anything is done."""
    if done <= 0 or total <= done:
        return ""
    return f"ETA {duration(elapsed * (total - done) / done)}"


class LineProgress(Generic[T]):
    """The non-terminal stand-in for a tqdm bar (tqdm's small API): a line every ``LINE_INTERVAL_S``
    seconds and one at the end, e.g. ``rose-ekfac fit: Fisher pass 1/2: 30/100 (30 %), 12 s, ETA 28 s``."""

    def __init__(
        self, iterable: Iterable[T] | None, desc: str | None, total: int | None, initial: int = 0
    ) -> None:
        self.iterable = iterable
        self.desc = desc or "progress"
        self.total = total if total is not None else _length(iterable)
        self.n = self.initial = initial  # items done before this bar (a resumed loop): not in its rate
        self.postfix = ""
        self._start = self._last = time.monotonic()
        self._closed = False

    def __iter__(self) -> Iterator[T]:
        assert self.iterable is not None
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= LINE_INTERVAL_S and (not self.total or self.n < self.total):
            self._last = now
            self._print(now)

    def _print(self, now: float) -> None:
        elapsed = now - self._start
        done = f"{self.n}/{self.total} ({100 * self.n // self.total} %)" if self.total else f"{self.n}"
        remaining = eta(self.n - self.initial, (self.total or 0) - self.initial, elapsed)
        when = f"{duration(elapsed)}, {remaining}" if remaining else f"done in {duration(elapsed)}"
        print(f"{self.desc}: {done}, {when}{self.postfix}", file=sys.stderr, flush=True)

    def set_postfix(self, **values: Any) -> None:
        self.set_postfix_str(", ".join(f"{k}={v}" for k, v in values.items()))

    def set_postfix_str(self, text: str) -> None:
        self.postfix = f"  {text}"

    def close(self) -> None:
        """Print the closing line (once) and give the screen back to the enclosing stage."""
        if self._closed:
            return
        self._closed = True
        _release()
        if self.n:
            self._print(time.monotonic())

    def __enter__(self) -> LineProgress[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Bar(tqdm):
    """A tqdm bar that gives the screen back to the enclosing stage when it closes."""

    def close(self) -> None:
        if not getattr(self, "_released", True):
            self._released = True
            _release()
        super().close()


def _release() -> None:
    global _open_bars
    _open_bars = max(0, _open_bars - 1)


def _length(iterable: Iterable[Any] | None) -> int | None:
    try:
        return len(iterable) if isinstance(iterable, Sized) else None
    except TypeError:  # a __len__ that refuses (a generator-backed wrapper)
        return None


@contextmanager
def stage(label: str) -> Iterator[None]:
    """Name the stage that bars opened inside the block belong to (prefixed to their description; the
    innermost stage wins)."""
    _stages.append(label)
    try:
        yield
    finally:
        _stages.pop()


def progress(
    iterable: Iterable[T] | None = None,
    desc: str | None = None,
    *,
    total: int | None = None,
    enabled: bool | None = None,
    **tqdm_kwargs: Any,
) -> Any:
    """Wrap ``iterable`` (or count ``update`` calls up to ``total``) with progress reporting: a tqdm bar
    on a terminal, periodic lines otherwise, nothing when ``enabled`` is False, another bar is shown
    (its stage is this loop's) or this is not torchrun's rank 0."""
    global _open_bars
    from roseood.distributed import is_main

    if not resolve(enabled) or _open_bars or not is_main():  # under torchrun only rank 0 reports
        return tqdm(iterable, total=total, disable=True)
    if _stages:
        desc = f"{_stages[-1]}: {desc}" if desc else _stages[-1]
    _open_bars += 1
    if not on_terminal():
        return LineProgress(iterable, desc, total, tqdm_kwargs.get("initial", 0))
    tqdm_kwargs.pop("leave", None)  # one line per stage stays, so the screen reads as a log of stages
    # a terminal that reports no size (a fresh pty) would get empty bars: then $COLUMNS/$LINES or 80×24
    fallback = shutil.get_terminal_size()
    size = {"dynamic_ncols": True} if _width() > 0 else {"ncols": fallback.columns, "nrows": fallback.lines}
    bar = _Bar(iterable, desc=desc, total=total, **size, **tqdm_kwargs)
    bar._released = False
    return bar


def _width() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def forecast(what: str, seconds: float, basis: str = "") -> None:
    """State before a long run what it will take here, in one line from the main process (shown even
    when progress is quiet): ``training: ≈ 4 min 10 s on this machine (2 threads; from 3 timed batches)``."""
    import torch

    why = f"; {basis}" if basis else ""
    threads = torch.get_num_threads()
    cores = f"{threads} thread{'s' if threads != 1 else ''}"
    state(f"{what}: ≈ {duration(seconds)} on this machine ({cores}{why}{_busy()})")


def forecast_rest(what: str, seconds: float, units: int, basis: str) -> None:
    """``forecast`` a run of ``units`` equal units from its first, timed at ``seconds``, where the run
    would outlast the first progress line (``LINE_INTERVAL_S``): a long run says its time before the rest."""
    if seconds * units > LINE_INTERVAL_S:
        forecast(what, seconds * units, basis)


def _busy() -> str:
    """A warning for ``forecast`` when other work held the machine's cores over the last minute (the
    forecast's timed warm-up shares them, so the run may take longer than said); empty otherwise."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]  # the last minute, mostly before this run's few timed seconds
    except (AttributeError, OSError):  # Windows has no load average
        return ""
    if load < cores:
        return ""
    return f"; the machine is busy (load average {load:.1f} on {cores} cores): other work can make it longer"


def show_warnings_as_notes() -> None:
    """Print every Python warning as one ``warning: ...`` line that does not break a progress bar (for
    the command line; the Python API keeps the ``warnings`` module's own format)."""

    def show(message: Warning | str, *_: Any, **__: Any) -> None:
        note(f"warning: {message}")

    warnings.showwarning = show


def note(message: str) -> None:
    """Print a line without breaking an active progress bar."""
    tqdm.write(message, file=sys.stderr)


def state(message: str) -> None:
    """State a fact the user must not miss (e.g. a conversion of their images) on stderr, in one line,
    from the main process only; shown even when progress is quiet."""
    from roseood.distributed import is_main

    if is_main():
        note(message)
