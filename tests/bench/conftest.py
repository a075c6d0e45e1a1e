"""The module-scoped smoke run of a bench test file's experiment group and the group's parameters."""

from __future__ import annotations

import pytest

from tests.bench.smoke import RUN, TABLES_WITH_SCORES, Smoke, run_group


@pytest.fixture(scope="module")
def smoke_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    return run_group(tmp_path_factory, request.module.GROUP)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """In a module with a ``GROUP``, unparametrized ``name``: each experiment the group runs; ``table``:
    those of them that save raw scores."""
    if not hasattr(metafunc.module, "GROUP") or metafunc.definition.get_closest_marker("parametrize"):
        return
    group = RUN[metafunc.module.GROUP]
    if "name" in metafunc.fixturenames:
        metafunc.parametrize("name", group)
    if "table" in metafunc.fixturenames:
        metafunc.parametrize("table", [n for n in group if n in TABLES_WITH_SCORES])
