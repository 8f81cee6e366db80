"""The combination matrix runs on both backends (`test_x[...-local]`, `test_x[...-ray]`,
tests/backend_support.py) against one simulator for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backend_support import on_backend, parametrize
from combo_support import SCRIPT

from raygent.sim import Simulator, serve


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with serve(SCRIPT) as running:
        yield running
