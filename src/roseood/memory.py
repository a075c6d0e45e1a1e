"""Every question about memory in one place: how much a device has free and this process uses, the budget
of per-sample-gradient work (``set_memory`` / ``--memory``: what is in use plus ``DEFAULT_SHARE`` of what is
available, unless set), the refusal of an allocation that cannot fit (``check_memory``), and sizes read
and written in one unit, powers of 1024 (``4G``, ``3.1 GiB``). torch loads only when a device is asked
about, so the command line can parse ``--memory`` without it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roseood.errors import RoseError

if TYPE_CHECKING:
    import torch

DEFAULT_SHARE = 0.5  # of the memory available when no budget is set
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_process_budget: int | None = None


def parse_size(value: int | float | str, name: str = "memory") -> int:
    """Bytes from a size such as ``4G``, ``500M``, ``1.5GB``, ``2GiB`` or a plain number of bytes (units
    are powers of 1024); a bad or non-positive size is a ``RoseError`` naming the setting ``name``."""
    if isinstance(value, bool):
        raise RoseError(f"{name} must be a size such as 4G or 500M, got {value!r}")
    if isinstance(value, int | float):
        size = int(value)
    else:
        match = _SIZE.match(str(value))
        if match is None:
            raise RoseError(f"{name} must be a size such as 4G or 500M, got {value!r}")
        size = int(float(match[1]) * _UNITS[match[2].upper()])
    if size <= 0:
        raise RoseError(f"{name} must be positive, got {value!r}")
    return size


def format_size(n: float) -> str:
    """``3.1 GiB``, ``540 MiB``: sizes as the plan line shows them."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:.0f} {unit}"
    return f"{int(n)} B"


def set_memory(value: int | float | str | None) -> None:
    """The budget of every detector in this process that sets none itself (None: the default share)."""
    global _process_budget
    _process_budget = None if value is None else parse_size(value)


def _meminfo(key: str) -> int | None:
    """A /proc/meminfo line in bytes (Linux); None elsewhere."""
    return _proc_value(Path("/proc/meminfo"), key)


def _proc_value(path: Path, key: str) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match[1]) * 1024 if match else None


def in_use(device: torch.device) -> int:
    """Memory this process holds now: PyTorch's allocations on a GPU, the resident memory elsewhere
    (0 where the system does not say), after malloc has given back the freed memory it keeps."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.memory_allocated(device))
    _return_freed_memory()
    return _proc_value(Path("/proc/self/status"), "VmRSS") or 0


def _return_freed_memory() -> None:
    """glibc keeps freed blocks for reuse and they stay resident: after a Fisher's fit, 1.4 GiB of the
    2.4 GiB a 3.5 M-parameter UNet's process held. ``malloc_trim`` gives them back so that the resident
    memory is what is held (a C library without it: nothing)."""
    trim = getattr(c_library(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def c_library() -> Any:
    """The process's C library (``ctypes``), None where it cannot be opened: malloc's own settings."""
    try:
        return ctypes.CDLL(None)
    except (OSError, TypeError):  # TypeError: Windows takes no None
        return None


def available(device: Any = None) -> int | None:
    """Bytes an allocation on ``device`` (default: the CPU) can take now: a CUDA device's free memory,
    else the machine's available memory (Linux's MemAvailable, elsewhere the physical memory); None
    where it cannot be told."""
    import torch

    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    if dev.type != "cpu":
        return None
    free = _meminfo("MemAvailable")
    if free is not None:
        return free
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def budget(device: torch.device, memory: int | float | str | None = None) -> int | None:
    """The peak memory allowed: ``memory``, else the process's ``set_memory``, else what is in use plus
    ``DEFAULT_SHARE`` of what is available; None (no bound) where the system does not say."""
    given = memory if memory is not None else _process_budget
    if given is not None:
        return parse_size(given)
    free = available(device)
    return None if free is None else in_use(device) + int(DEFAULT_SHARE * free)


def check_memory(nbytes: float, what: str, *, device: Any = None, hint: str = "") -> None:
    """Refuse, before it is made, an allocation of about ``nbytes`` that cannot fit in the memory of
    ``device`` (see ``available``): one line saying ``what`` needs it, and ``hint`` (what to lower)."""
    free = available(device)
    if free is not None and nbytes > free:
        where = "on this machine" if device is None or str(device) == "cpu" else f"on {device}"
        more = f"; {hint}" if hint else ""
        raise RoseError(
            f"{what} needs about {format_size(nbytes)}, more than the {format_size(free)} free {where}{more}"
        )


def module_bytes(build: Callable[[], Any]) -> int:
    """Bytes of the parameters and buffers of the ``torch.nn.Module`` that ``build()`` returns, measured by
    building it on torch's meta device (no memory is allocated): how much building it for real takes."""
    import torch

    with torch.device("meta"):
        module = build()
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
