"""Per-input random numbers, so that a stochastic score is reproducible.

Inside ``per_input_seed(seed)``, the sampling of the built-in models (a VAE's latent and IWAE samples, a
Glow's dequantisation noise) and of Likelihood Regret draws each input's noise from a generator seeded
by ``seed``, a stream name and that input's own bytes. An input's score then depends on nothing else:
not on the run, the batch or chunk it is scored in, nor the number of processes. Detectors that sample
take a ``seed`` parameter and score inside this context. Outside it (training), noise comes from torch's
global generator as usual. A model of the user's gets the same by drawing its noise with ``randn``/``rand``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

_SEED: ContextVar[int | None] = ContextVar("roseood_per_input_seed", default=None)


@contextmanager
def per_input_seed(seed: int) -> Iterator[None]:
    """Within this block, ``randn``/``rand`` draw every input's noise from ``seed`` and its bytes."""
    token = _SEED.set(int(seed))
    try:
        yield
    finally:
        _SEED.reset(token)


def _generators(x: Tensor, seed: int, stream: str) -> list[torch.Generator]:
    """One CPU generator per row of ``x``, seeded by SHA-256 of (seed, stream, the row's dtype and bytes)."""
    rows = x.detach().to("cpu").contiguous()
    prefix = f"{seed}/{stream}/{rows.dtype}/{tuple(rows.shape[1:])}/".encode()
    flat = rows.reshape(rows.shape[0], -1).view(torch.uint8).numpy() if rows.numel() else None
    gens = []
    for i in range(rows.shape[0]):
        digest = hashlib.sha256(prefix + (flat[i].tobytes() if flat is not None else b"")).digest()
        gens.append(torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1))
    return gens


def _draw(kind: str, x: Tensor, shape: tuple[int, ...], stream: str) -> Tensor:
    seed = _SEED.get()
    draw = torch.randn if kind == "normal" else torch.rand
    if seed is None or torch._C._functorch.is_batchedtensor(x):  # no per-input seed (e.g. in training)
        return draw(x.shape[0], *shape, device=x.device, dtype=x.dtype)
    rows = [draw(shape, generator=g) for g in _generators(x, seed, stream)]
    out = torch.stack(rows) if rows else torch.empty(0, *shape)
    return out.to(x.device, x.dtype)


def randn(x: Tensor, *shape: int, stream: str) -> Tensor:
    """Standard normal noise of shape (N, *shape) for the N inputs ``x`` (per input inside
    ``per_input_seed``; ``stream`` names the use, so two uses of one input draw different numbers)."""
    return _draw("normal", x, shape, stream)


def rand(x: Tensor, *shape: int, stream: str) -> Tensor:
    """Uniform [0, 1) noise of shape (N, *shape) for the N inputs ``x`` (see ``randn``)."""
    return _draw("uniform", x, shape, stream)
