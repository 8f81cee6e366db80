"""Provider-batch scenarios run on both backends: `test_x[local]`, `test_x[ray]`; a
bucket of its own in moto's S3 for each test of Bedrock's jobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backend_support import on_backend, parametrize
from pb_support import new_bucket


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


@pytest.fixture
def bucket(moto_s3: str) -> str:
    """A bucket of its own on moto's S3 server (Bedrock's jobs' records): its name."""
    return new_bucket(moto_s3)
