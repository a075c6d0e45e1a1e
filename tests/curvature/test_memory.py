"""The memory budget: sizes parsed as users write them, and a plan that obeys the budget or says why not."""

from __future__ import annotations

import pytest
import torch

from roseood import memory
from roseood.curvature.memory import MemoryPlan, saved_bytes
from roseood.errors import RoseError
from roseood.memory import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4G", 4 * 2**30),
        ("500M", 500 * 2**20),
        ("1.5GB", int(1.5 * 2**30)),
        ("2GiB", 2 * 2**30),
        ("1000", 1000),
    ],
)
def test_sizes_read_like_the_cli_writes_them(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "4X", "-1G", "0", ""])
def test_bad_sizes_are_one_line_errors(text):
    with pytest.raises(RoseError, match="memory must be"):
        parse_size(text)


def test_format_size_reads_back():
    assert format_size(3.1 * 2**30) == "3.1 GiB" and format_size(540 * 2**20) == "540 MiB"


def plan(budget: int | None, wanted: int = 64) -> MemoryPlan:
    return MemoryPlan(params=10, layers=2, rows=8, fixed=100, per_image=10, wanted=wanted, budget=budget)


def test_plan_takes_as_many_images_as_the_budget_allows():
    assert plan(None).images == 64
    assert plan(155).images == 5 and plan(155).peak == 150 <= 155
    assert plan(10_000).images == 64  # never more than asked for
    assert "5 images (40 rows) per batch" in plan(155).line() and "budget 155 B" in plan(155).line()


def test_the_plan_line_counts_a_small_layer_set_in_parameters_not_as_zero_millions():
    assert plan(None).line().startswith("ROSE: 10 parameters in 2 layers")  # a LoRA's few thousand
    big = MemoryPlan(params=35_700_000, layers=220, rows=8, fixed=100, per_image=10, wanted=1, budget=None)
    assert big.line().startswith("ROSE: 35.7 M parameters in 220 layers")


def test_a_plan_that_cannot_fit_one_image_is_refused_in_one_line():
    plan(110).check()  # exactly one image fits
    with pytest.raises(RoseError, match=r"for one image per batch .* budget is 109 B") as info:
        plan(109).check()
    assert "\n" not in str(info.value)


def test_default_budget_is_what_is_used_plus_a_share_of_what_is_free(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(memory, "available", lambda device: 1000)
    monkeypatch.setattr(memory, "in_use", lambda device: 300)
    assert memory.budget(cpu) == 300 + 500
    assert memory.budget(cpu, "1K") == 1024
    memory.set_memory("2K")
    try:
        assert memory.budget(cpu) == 2048 and memory.budget(cpu, 10) == 10
    finally:
        memory.set_memory(None)
    monkeypatch.setattr(memory, "available", lambda device: None)
    assert memory.budget(cpu) is None  # unknown: no bound


def test_saved_bytes_counts_activations_not_weights():
    net = torch.nn.Linear(100, 50)
    x = torch.randn(8, 100, requires_grad=False)
    with saved_bytes({net.weight.untyped_storage().data_ptr()}) as total:
        net(x).tanh().sum()
    # the linear layer's input (8·100) and tanh's output (8·50) float32; not the weight
    assert total() == 4 * (8 * 100 + 8 * 50)


def test_memory_in_use_on_the_cpu_is_read_after_malloc_gives_back_what_it_keeps(monkeypatch):
    """glibc keeps freed blocks resident; ``in_use`` asks it to give them back first (``malloc_trim``),
    and a C library without that call is read as it is."""
    calls: list[int] = []

    class Glibc:
        def malloc_trim(self, pad: int) -> int:
            calls.append(pad)
            return 1

    monkeypatch.setattr(memory, "c_library", Glibc)
    assert memory.in_use(torch.device("cpu")) >= 0 and calls == [0]  # 0 where no /proc tells
    monkeypatch.setattr(memory, "c_library", lambda: object())  # e.g. musl or macOS: no malloc_trim
    assert memory.in_use(torch.device("cpu")) >= 0
    monkeypatch.setattr(memory, "c_library", lambda: None)  # no C library to open
    assert memory.in_use(torch.device("cpu")) >= 0
