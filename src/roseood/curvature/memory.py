"""A memory budget for per-sample-gradient work: how many images a batch may hold so that fitting or scoring
stays within it, worked out before the work starts from a one-image probe of the model.

The budget bounds the process's peak memory (resident memory on the CPU, PyTorch's allocations on a
GPU): what is already in use (the model, PyTorch itself), the Fishers' own tensors, and per image of a
batch the activations the backward pass keeps plus the largest layer's per-sample gradients (layers are
handled one at a time, see :meth:`~roseood.curvature.LayerGradients.stream`). Default: what is in use
now plus half of what the machine (or the GPU) has available; ``set_memory`` (the CLI's ``--memory``)
sets it for the process, a detector's ``memory=`` for itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from roseood.errors import RoseError

DEFAULT_SHARE = 0.5  # of the memory available when no budget is set
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_process_budget: int | None = None


def parse_size(value: int | float | str) -> int:
    """Bytes from a size such as ``4G``, ``500M``, ``1.5GB``, ``2GiB`` or a plain number of bytes (units
    are powers of 1024); a bad or non-positive size is a ``RoseError``."""
    if isinstance(value, bool):
        raise RoseError(f"memory must be a size such as 4G or 500M, got {value!r}")
    if isinstance(value, int | float):
        size = int(value)
    else:
        match = _SIZE.match(str(value))
        if match is None:
            raise RoseError(f"memory must be a size such as 4G or 500M, got {value!r}")
        size = int(float(match[1]) * _UNITS[match[2].upper()])
    if size <= 0:
        raise RoseError(f"memory must be positive, got {value!r}")
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
    (0 where the system does not say)."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _proc_value(Path("/proc/self/status"), "VmRSS") or 0


def available(device: torch.device) -> int | None:
    """Memory still free for this process: the GPU's free memory, else the machine's available memory
    (Linux); None where it is not known."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return _meminfo("MemAvailable") if device.type == "cpu" else None


def budget(device: torch.device, memory: int | float | str | None = None) -> int | None:
    """The peak memory allowed: ``memory``, else the process's ``set_memory``, else what is in use plus
    ``DEFAULT_SHARE`` of what is available; None (no bound) where the system does not say."""
    given = memory if memory is not None else _process_budget
    if given is not None:
        return parse_size(given)
    free = available(device)
    return None if free is None else in_use(device) + int(DEFAULT_SHARE * free)


@contextmanager
def saved_bytes(exclude: Collection[int] = ()) -> Iterator[Callable[[], int]]:
    """Count the bytes autograd saves for the backward pass inside the block (each storage once; not
    the storages whose ``data_ptr`` is in ``exclude``, e.g. the weights): ``with saved_bytes() as total:
    ...; total()``."""
    seen: dict[tuple[torch.device, int], int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            seen[(t.device, storage.data_ptr())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield lambda: sum(seen.values())


@dataclass(frozen=True)
class MemoryPlan:
    """Images per batch under a budget, and the peak memory that gives.

    ``fixed``: bytes held whatever the batch (the process now, the Fishers, kept gradients);
    ``per_image``: bytes each image of a batch adds (its activations and the largest layer's per-sample
    gradients)."""

    params: int
    layers: int
    rows: int  # rows of the model's loss per image
    fixed: int
    per_image: int
    wanted: int  # images per batch without a budget
    budget: int | None
    what: str = "ROSE"

    @property
    def images(self) -> int:
        """Images per batch: as many as wanted, fewer if the budget says so (at least one)."""
        if self.budget is None:
            return self.wanted
        return max(1, min(self.wanted, (self.budget - self.fixed) // max(self.per_image, 1)))

    @property
    def peak(self) -> int:
        return self.fixed + self.images * self.per_image

    @property
    def fits(self) -> bool:
        return self.budget is None or self.peak <= self.budget

    def line(self) -> str:
        """The plan in one line, e.g. ``ROSE: 35.7 M parameters in 220 layers (one at a time), 1 image
        (8 rows) per batch, ≈ 3.1 GiB peak (budget 4.0 GiB)``."""
        rows = f" ({self.images * self.rows} rows)" if self.rows > 1 else ""
        images = f"{self.images} image{'s' if self.images != 1 else ''}{rows} per batch"
        limit = f"budget {format_size(self.budget)}" if self.budget is not None else "no budget"
        return (
            f"{self.what}: {self.params / 1e6:.1f} M parameters in {self.layers} layers (one at a time), "
            f"{images}, ≈ {format_size(self.peak)} peak ({limit})"
        )

    def check(self) -> None:
        """A ``RoseError`` in one line when even one image per batch exceeds the budget."""
        if self.fits:
            return
        assert self.budget is not None
        raise RoseError(
            f"{self.what} needs ≈ {format_size(self.peak)} for one image per batch "
            f"({format_size(self.fixed)} held, {format_size(self.per_image)} per image) but the memory "
            f"budget is {format_size(self.budget)}: raise --memory (memory=), choose fewer layers "
            "or rose-diag, or use a GPU"
        )
