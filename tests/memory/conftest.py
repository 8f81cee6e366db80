"""Fixtures of the memory suite: each test runs on both backends (`test_x[local-...]`,
`test_x[ray-...]`, see tests/backend_support.py), and each test that takes `store` runs
on every store kind.

- memory: an InMemoryStore;
- sqlite: an SQLiteStore on a real file in tmp_path;
- redis: a RedisStore on the real server (`redis_url`) under a prefix unique to the
  test, whose keys are deleted afterwards.

`make_store(**options)` builds more stores of the test's kind; sqlite and redis ones
share the file / prefix (two clients of one store).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backend_support import on_backend, parametrize
from memory_support import KINDS, build_store, delete_prefix


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc)


@pytest.fixture(autouse=True)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Any]]:
    prefix = f"raygent-memtest-{uuid.uuid4().hex[:12]}"
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    made: list[Any] = []

    def make(**options: Any) -> Any:
        store = build_store(kind, tmp_path, url, prefix, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
    if url is not None:
        delete_prefix(url, prefix)


@pytest.fixture
def store(make_store: Callable[..., Any]) -> Any:
    return make_store()
