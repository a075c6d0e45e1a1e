"""Shared fixtures: tiny models that train in seconds, the shipped demo model, the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_limits

from roseood import memory
from roseood.models import VAE

SHARED_DATA = Path(os.environ.get("ROSEOOD_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
needs_shared_data = pytest.mark.skipif(
    not (SHARED_DATA / "fashion_mnist_test.npz").exists(), reason="../shared/data is not present"
)
# ``ROSEOOD_TESTS=full``: the slow tests in their full form (every bench experiment on both sets, the DDPM
# pages' recipes, DDPM-OOD at its defaults); else the reduced form CI runs
FULL = os.environ.get("ROSEOOD_TESTS", "") == "full"


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """Tiny tensors run faster on one thread, and tests must not fight over the two CI cores. Session
    scope: module-scoped fixtures (the bench smoke runs) are set up before any function-scoped one, and
    two workers × two threads on two cores ran them about three times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):  # numpy's and scipy's BLAS too (scikit-learn's mixtures, the eigenbases)
        yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def _no_fsync():
    """Files are still written to a temporary name and renamed over the target (``atomic_write``), but
    not forced to the disk: a test never loses power, and a run's ≈ 3 000 fsyncs cost about 4 ms each
    (≈ 5 % of the suite's time here). The subprocesses the tests start still fsync."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        yield


TEST_MEMORY = 4 * 2**30  # what check_memory may grant a test, whatever the machine has free


@pytest.fixture(autouse=True)
def _bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every allocation that ``check_memory`` guards sees at most ``TEST_MEMORY`` free: whether a file's
    size is accepted then does not depend on the machine, and a hypothesis example the machine could just
    hold (denoising k = 2**26 is 17 GB) is refused in one line instead of filling memory beside another
    worker until the kernel kills both (seen twice on a 24 GB machine)."""
    real = memory.available

    def capped(device: object = None) -> int | None:
        free = real(device)
        return TEST_MEMORY if free is None else min(free, TEST_MEMORY)

    monkeypatch.setattr(memory, "available", capped)


@pytest.fixture
def tiny_vae() -> VAE:
    """A randomly initialised 1-channel VAE (ngf 4, latent 4) in eval mode with non-trivial BN stats."""
    torch.manual_seed(0)
    model = VAE(in_channels=1, ngf=4, nz=4)
    model.train()
    with torch.no_grad():
        model.train_loss(torch.rand(32, 1, 32, 32))
    return model.eval()


@pytest.fixture
def images() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.rand(24, 1, 32, 32, generator=g)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a ``slow`` test run first, then the rest by number of tests (xdist's own order, which
    pyproject.toml's ``--no-loadscope-reorder`` turns off): by test count alone the one-test heavy files (the
    two-process job, the wheel install, the recorded scores: 16-36 s of CPU each) came last, and one worker
    ran them while the other had nothing left."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    order = sorted(
        files.values(), key=lambda tests: (not any(t.get_closest_marker("slow") for t in tests), -len(tests))
    )
    items[:] = [item for tests in order for item in tests]
