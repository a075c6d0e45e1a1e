"""Several processes as one job with ``torch.distributed`` (torchrun): gloo on CPU, NCCL on CUDA.

Everything here is a no-op in a single process, so library code calls it unconditionally: ROSE splits its
fit images into contiguous shards (``shard``), adds the per-process Fisher sums together (``all_reduce``,
float64), takes the eigendecompositions from rank 0 (``broadcast``) and puts per-image rows back together
in input order (``gather_rows``). Files are written by rank 0 only (``is_main``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from roseood.errors import RoseError
from roseood.launch import launched

DEFAULT_TIMEOUT_S = 600.0


def init(timeout_s: float | None = None) -> bool:
    """Join the process group torchrun describes in the environment; returns whether one is active.

    The backend is NCCL when CUDA is available (each process on ``cuda:LOCAL_RANK``), else gloo. A
    collective waiting longer than ``timeout_s`` (default ``$ROSEOOD_DIST_TIMEOUT`` or 600 s) fails
    instead of hanging."""
    if active() or not launched():
        return active()
    timeout = timeout_s or float(os.environ.get("ROSEOOD_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return True


def shutdown() -> None:
    """Leave the process group (if any)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def active() -> bool:
    """Whether a process group with more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world() -> int:
    return dist.get_world_size() if active() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    """Whether this process writes files and prints results (rank 0)."""
    return rank() == 0


def device(requested: str | torch.device = "auto") -> str:
    """The device this process uses for a requested ``auto``/``cpu``/``cuda[:i]``/``mps``.

    ``auto`` picks CUDA, then MPS, then the CPU. Under torchrun ``cuda`` (or ``auto`` with CUDA) is this
    process's own GPU, ``cuda:LOCAL_RANK``; naming another index is refused, since the processes would
    share one GPU.
    """
    requested = str(requested)
    if requested == "auto":
        if torch.cuda.is_available():
            requested = "cuda"
        elif torch.backends.mps.is_available():
            return "mps"
        else:
            return "cpu"
    if requested.startswith("cuda") and launched():
        if requested not in ("cuda", f"cuda:{local_rank()}"):
            raise RoseError(
                f"device {requested}: under torchrun name cuda or auto, and each process takes the GPU "
                "of its LOCAL_RANK (choose the GPUs with CUDA_VISIBLE_DEVICES)"
            )
        return f"cuda:{local_rank()}"
    return requested


def shard(n: int) -> slice:
    """This process's contiguous part of ``n`` items (sizes differ by at most one, rank order)."""
    r, w = rank(), world()
    return slice(n * r // w, n * (r + 1) // w)


def _comm_device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )


def all_reduce(t: Tensor) -> Tensor:
    """The sum of ``t`` over all processes, in float64 (returned on ``t``'s device)."""
    if not active():
        return t
    buf = t.to(_comm_device(), torch.float64).contiguous()
    dist.all_reduce(buf)
    return buf.to(t.device)


def broadcast(t: Tensor) -> Tensor:
    """Rank 0's ``t`` on every process (same shape and dtype everywhere)."""
    if not active():
        return t
    buf = t.to(_comm_device()).contiguous()
    dist.broadcast(buf, 0)
    return buf.to(t.device)


def gather_rows(t: Tensor) -> Tensor:
    """Every process's rows of ``t`` (possibly none) concatenated in rank order, on every process."""
    if not active():
        return t
    sizes = [torch.zeros(1, dtype=torch.int64, device=_comm_device()) for _ in range(world())]
    dist.all_gather(sizes, torch.tensor([t.shape[0]], device=_comm_device()))
    counts = [int(s.item()) for s in sizes]
    padded = t.new_zeros(max(counts), *t.shape[1:]).to(_comm_device())
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(t.device)


def gather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj`` (picklable, e.g. its random generators' states) in rank order, on every
    process; a list of one outside torchrun."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def any_process(*flags: bool) -> tuple[bool, ...]:
    """Each flag true on any process (the same answer everywhere, so all processes act together)."""
    if not active():
        return flags
    summed = all_reduce(torch.tensor([float(f) for f in flags]))
    return tuple(bool(v > 0) for v in summed.tolist())


def average_gradients(module: torch.nn.Module) -> None:
    """Replace every parameter gradient by its mean over processes (one flat all-reduce)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not active() or not grads:
        return
    flat = all_reduce(torch.cat([g.flatten() for g in grads])) / world()
    for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        g.copy_(part.view_as(g))


def share_module(module: torch.nn.Module, average_buffers: bool = False) -> None:
    """Give every process rank 0's parameters (and, with ``average_buffers``, the mean of floating buffers
    such as BatchNorm statistics)."""
    if not active():
        return
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(broadcast(p.detach()))
        for b in module.buffers():
            b.copy_(all_reduce(b) / world() if average_buffers and b.is_floating_point() else broadcast(b))


def barrier() -> None:
    """Wait for every process (e.g. until rank 0 has written a file the others read)."""
    if active():
        dist.barrier()


def check_enough(n: int, what: str) -> None:
    """Refuse to split fewer than one item per process."""
    if n < world():
        raise RoseError(f"{n} {what} cannot be split over {world()} processes; use fewer processes")
