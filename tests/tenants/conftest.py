"""Tests that ask for `backend_kind` run on both backends: `test_x[local]`, `test_x[ray]`
(see tests/backend_support.py); the others run once, in-process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backend_support import on_backend, parametrize


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)
