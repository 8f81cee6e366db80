"""Every durable-run test runs on both backends: `test_x[local]`, `test_x[ray]` (see
tests/backend_support.py), except where a killed child process is resumed locally. The
stores a test opened are closed after it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from backend_support import on_backend, parametrize
from durable_support import OPENED


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


@pytest.fixture(autouse=True)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


@pytest.fixture(autouse=True)
async def close_stores() -> AsyncIterator[None]:
    yield
    while OPENED:
        await OPENED.pop().aclose()
