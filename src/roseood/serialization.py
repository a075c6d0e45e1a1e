"""Safe file I/O for everything roseood writes: checkpoints, detectors, CSV, JSON, reports, arrays.

Every output goes through ``atomic_write``: the bytes go to a temporary ``.<name>.*.tmp`` beside the
target, are fsynced, and the file is renamed over the target, so a write that fails midway (disk full,
Ctrl-C, a kill) never leaves a fragment or destroys the old file. Temporary files of killed writes are
removed by the next write into the same folder once they are stale. ``check_output`` refuses, before
any work starts, outputs that would overwrite an input, replace a file without ``overwrite``, land in
a folder that cannot be written, or are an existing path that is not a regular file (a FIFO with no
reader would block the write forever), and claims the output: a second process that writes the same
path meanwhile makes the later writer fail instead of both reporting success. ``-`` is standard output
where a command allows it; a caller's own path to a device (``/dev/null``) is written in place, never
replaced. Text is written as UTF-8, with the bytes of file names that are not UTF-8 as ``\\xNN``
(``printable``), so no file name can make a write fail. Checkpoints are read with
``weights_only=True``; roseood's own files are sealed with a payload checksum (``roseood.integrity``)
and verified on load.
"""

from __future__ import annotations

import codecs
import fcntl
import hashlib
import json
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from roseood.errors import CheckpointError, RoseError, shown

if TYPE_CHECKING:  # torch loads with the first file read or written, not with the command line
    import torch


def _escape_unencodable(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: a byte that the file system name held but is not UTF-8 (Python's
    ``surrogateescape`` made it U+DC80–U+DCFF) is written ``\\xNN``, any other unencodable character
    ``\\uNNNN``, so text with any file name in it can always be written as UTF-8."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    return "".join(
        f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"\\u{ord(c):04x}" for c in bad
    ), exc.end


NAME_ERRORS = "roseood.names"  # the error handler every text output is encoded with
codecs.register_error(NAME_ERRORS, _escape_unencodable)


def printable(text: str) -> str:
    """``text`` as roseood writes it: a file name's bytes that are not UTF-8 as ``\\xNN``
    (``bad\\xff.png``); any text that is valid UTF-8 unchanged."""
    return text.encode("utf-8", NAME_ERRORS).decode("utf-8")


STALE_TMP_S = 3600.0  # a temporary file untouched this long belongs to a write that was killed
STDOUT = "-"  # an output path meaning standard output (for commands that allow it)
_UMASK = os.umask(0)
os.umask(_UMASK)
FileState = tuple[int, int, int, int] | None  # (device, inode, mtime ns, size) of a file; None: absent
_CLAIMS: dict[str, FileState] = {}  # outputs checked by check_output: their state when last seen


def clean_stale_temps(folder: str | Path, max_age_s: float = STALE_TMP_S) -> list[Path]:
    """Delete ``.<name>.*.tmp`` files in ``folder`` not modified for ``max_age_s``; return what went."""
    removed = []
    now = time.time()
    for tmp in Path(folder).glob(".*.tmp"):
        try:
            if now - tmp.stat().st_mtime > max_age_s:
                tmp.unlink()
                removed.append(tmp)
        except OSError:  # vanished meanwhile or not ours to delete
            continue
    return removed


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is, or wraps, a Ctrl-C (torch.save turns one raised inside a write into a
    RuntimeError when its zip writer closes during the unwinding)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return "KeyboardInterrupt" in str(exc)


def _os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` that ``exc`` is or wraps: torch.save reports a failed write (disk full, I/O error)
    as a ``RuntimeError ... unexpected pos`` raised while the OSError is being handled."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def cannot_write(path: Path, exc: OSError) -> RoseError:
    """The one-line error for a write to ``path`` that failed with ``exc``."""
    return RoseError(f"cannot write {path}: {exc.strerror or exc}")


def _state(path: Path) -> FileState:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def written_in_place(path: str | Path) -> bool:
    """Whether ``path`` is standard output (``-``) or an existing character device or FIFO: written in
    place, never replaced."""
    if str(path) == STDOUT:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _write_in_place(path: Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Write to standard output (``-``) or an existing device/FIFO as it is, without a temporary file."""
    try:
        if str(path) == STDOUT:
            sys.stdout.flush()
            write(sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            with open(path, "wb") as f:
                write(f)
    except Exception as exc:  # an OSError, or torch.save's RuntimeError wrapping one (or a Ctrl-C)
        if _interrupted(exc):
            raise KeyboardInterrupt from None
        cause = _os_error(exc)
        if cause is None:
            raise
        raise cannot_write(path, cause) from None
    return path


def replace_if_unclaimed(tmp: str, path: Path) -> None:
    """Rename ``tmp`` to ``path``; if ``check_output`` claimed ``path`` and another process wrote it since,
    refuse (the other output stays) rather than both processes reporting success. The folder's lock
    makes the check and the rename one step for every roseood writer."""
    key = os.path.realpath(path)
    if key not in _CLAIMS:
        os.replace(tmp, path)
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _state(path) != _CLAIMS[key]:
            raise RoseError(
                f"{path} was written by another process while this one ran; that output is kept and "
                "this one discarded: rerun with another output path"
            )
        os.replace(tmp, path)
        _CLAIMS[key] = _state(path)
    finally:
        os.close(fd)  # releases the lock


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync it and rename it to ``path``.

    An ``OSError`` (unwritable folder, disk full), even one wrapped by the writer (torch.save's
    ``unexpected pos``), becomes a one-line ``RoseError`` naming ``path`` and the cause; a Ctrl-C, even one
    wrapped by the writer, stays a ``KeyboardInterrupt``. The old file survives any failure. ``-``
    (standard output) and an existing device or FIFO are written in place instead.
    """
    path = Path(path)
    if written_in_place(path):
        return _write_in_place(path, write)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temps(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; outputs get the usual permissions
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        replace_if_unclaimed(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if not isinstance(exc, KeyboardInterrupt) and _interrupted(exc):
            raise KeyboardInterrupt from None
        cause = _os_error(exc)
        if cause is not None:
            raise cannot_write(path, cause) from None
        raise
    return path


def atomic_save(obj: Any, path: str | Path) -> Path:
    """Write ``obj`` with ``torch.save`` to ``path`` atomically."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f))


def save_file(obj: dict[str, Any], path: str | Path) -> Path:
    """Write a roseood file (a dict with ``format``) atomically, sealed with its payload checksum."""
    from roseood.integrity import seal

    return atomic_save(seal(obj), path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda f: f.write(data))


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically (file names that are not UTF-8 as ``\\xNN``)."""
    return write_bytes(path, text.encode("utf-8", NAME_ERRORS))


def write_json(path: str | Path, obj: Any, indent: int = 2) -> Path:
    """Write ``obj`` as JSON (non-JSON values by ``str``) to ``path`` atomically."""
    return write_text(path, json.dumps(obj, indent=indent, default=str) + "\n")


def save_npy(path: str | Path, array: np.ndarray) -> Path:
    """Write one array as ``.npy`` (no pickles) to ``path`` atomically."""
    return atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))


def save_npz(path: str | Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """Write named arrays as a compressed ``.npz`` to ``path`` atomically (names as ``printable``)."""
    named = {printable(k): v for k, v in arrays.items()}
    return atomic_write(path, lambda f: np.savez_compressed(f, **named))  # type: ignore[arg-type]


def _writable_folder(folder: Path) -> None:
    """Refuse a folder that cannot be created or written, by creating and removing a file in it (or in
    its nearest existing ancestor, which is where it would be created)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise RoseError(f"cannot create folder {folder}: {probe} is a file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".rose-probe.", suffix=".tmp", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise RoseError(f"cannot write to {probe}: {exc.strerror or exc}") from None


def check_output(
    path: str | Path,
    *,
    inputs: Iterable[str | Path | None] = (),
    overwrite: bool = False,
    folder: bool = False,
    markers: Sequence[str] = (),
    hint: str = "pass --overwrite to replace it",
    stdout: bool = False,
) -> Path:
    """Check an output location before any work: not an input (symlinks resolved), a file or folder as
    expected, an existing output only with ``overwrite``, and its folder writable; then claim it, so
    that if another process writes it before this one does, this one's write fails (``atomic_write``).

    ``folder=True`` means ``path`` is a folder the output goes into; ``markers`` then name the files and
    folders in it whose presence means an earlier output would be replaced (e.g. ``report.md``,
    ``index.html``, ``thumbs``); ``hint``: the advice in the message about an existing output.
    ``stdout``: ``-`` means standard output. An existing path that is not a regular file (a FIFO, a
    device, a socket) is refused: a FIFO with no reader blocks its writer forever, and ``-`` streams the
    output where one is wanted.
    """
    if str(path) == STDOUT:
        if not stdout or folder:
            raise RoseError("this output cannot be standard output (-); name a file")
        return Path(STDOUT)
    out = Path(path).expanduser()
    real = os.path.realpath(out)
    for source in inputs:
        if source is not None and os.path.realpath(Path(source).expanduser()) == real:
            raise RoseError(f"output {path} is also an input; choose another output path")
    if folder and out.exists() and not out.is_dir():
        raise RoseError(f"{path} is a file; name a folder for this output")
    if not folder and out.is_dir():
        raise RoseError(f"{path} is a folder; name a file for this output")
    if not folder and out.exists() and not out.is_file():
        raise RoseError(
            f"{path} exists and is not a regular file (a FIFO, a device or a socket); name a file for this "
            "output, or - for standard output where the command takes it"
        )
    existing = [out / m for m in markers] if folder else [out]
    for item in existing:
        if item.exists() and not overwrite:
            raise RoseError(f"{item} exists; {hint}")
    _writable_folder(out if folder else out.parent)
    if not folder:
        _CLAIMS[real] = _state(out)
    return out


def read_torch_file(path: str | Path) -> Any:
    """``torch.load`` (weights only, to CPU); a missing or corrupt file is a one-line ``CheckpointError``."""
    import torch

    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, not a file")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__})") from None


def safe_load(path: str | Path, expected_format: str, bare: str = "") -> dict[str, Any]:
    """Load a roseood file and verify its checksum, raising ``CheckpointError`` with a one-line reason
    if it is unusable (see ``roseood.integrity``); ``bare``: what to do with a bare state dict instead
    (said after the reason)."""
    from roseood.integrity import same, verify

    obj = read_torch_file(path)
    if not isinstance(obj, dict) or not same(obj.get("format"), expected_format):
        found, plain = _found(obj)
        advice = f"; {bare}" if plain and bare else ""
        raise CheckpointError(f"{path}: expected a {expected_format} file, found {found}{advice}")
    verify(obj, path)
    return obj


def _found(obj: Any) -> tuple[str, bool]:
    """What a file that is not the roseood file expected holds, in words, and whether it is a bare state
    dict (tensors by name: ``torch.save(model.state_dict())``, a safetensors file)."""
    import torch

    if not isinstance(obj, dict):
        return f"a {type(obj).__name__}", False
    if "format" in obj:
        return shown(obj["format"]), False
    if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return f"a bare state dict of {len(obj)} tensors (weights without roseood's record of them)", True
    return f"a dict of {len(obj)} entries without roseood's format record", False


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (``algorithm``: a ``hashlib`` name), read in 1 MiB chunks."""
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def array_digest(images: np.ndarray) -> str:
    """Hash of an array's shape, dtype and bytes: identifies an image set exactly."""
    h = hashlib.sha256(f"{images.shape}{images.dtype}".encode())
    h.update(np.ascontiguousarray(images).tobytes())
    return h.hexdigest()[:16]


def share_equal_tensors(
    obj: Any, seen: dict[tuple[str, tuple[int, ...], str], torch.Tensor] | None = None
) -> Any:
    """``obj`` with equal tensors (anywhere in nested dicts/lists) replaced by one object, so that
    ``torch.save`` writes them once (e.g. two layers fed the same input share an eigenbasis)."""
    import torch

    seen = {} if seen is None else seen
    if isinstance(obj, dict):
        return {k: share_equal_tensors(v, seen) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(share_equal_tensors(v, seen) for v in obj)
    if isinstance(obj, torch.Tensor) and obj.numel():
        t = obj.detach().to("cpu").contiguous()
        key = (
            str(t.dtype),
            tuple(t.shape),
            hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest(),
        )
        return seen.setdefault(key, t)
    return obj


def fingerprint(state_dict: Mapping[str, torch.Tensor]) -> str:
    """A short content hash of a model's parameters and buffers, to tie detectors to their model."""
    import torch

    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key].detach().to("cpu").contiguous()
        h.update(key.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]
