"""User-facing errors: anything a person can fix (bad input, missing file) raises one of these.

The CLI prints their message on one line and exits non-zero; library users catch them as ``RoseError``.
"""

MAX_SHOWN = 80  # characters of a file's own text shown in a message


def shown(value: object) -> str:
    """A value read from a file as it may appear in a message: ``repr``, one line, at most MAX_SHOWN chars
    (a crafted file cannot flood or restyle the terminal)."""
    text = repr(value).encode("ascii", "backslashreplace").decode()
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class RoseError(Exception):
    """Base class for errors caused by the user's input rather than by a bug."""


class DataError(RoseError, ValueError):
    """Images or datasets that cannot be used: wrong shape, NaNs, empty, unknown name, missing file."""


class CheckpointError(RoseError):
    """A model or detector file that is missing, corrupt, or belongs to another model."""


class RoseWarning(UserWarning):
    """Base class for warnings about results that are computed but may be misleading."""


class DegenerateFitWarning(RoseWarning):
    """A fitted detector whose scores tie, overflow or do not vary on held-out in-distribution images."""
