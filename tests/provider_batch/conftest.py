"""Provider-batch scenarios run on both backends: `test_x[local]`, `test_x[ray]`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backend_support import on_backend, parametrize


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "by_api_and_backend(pairs): (backend, api) pairs to run a test on"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    pairs = metafunc.definition.get_closest_marker("by_api_and_backend")
    if pairs is not None:
        metafunc.parametrize(("backend_kind", "api"), pairs.args[0], indirect=["backend_kind"])
        return
    parametrize(metafunc)


@pytest.fixture(autouse=True)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)
