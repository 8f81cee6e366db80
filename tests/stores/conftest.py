"""Fixtures of the store suite: every conformance test runs on each store.

- memory: an InMemoryStore;
- sqlite: a SQLiteStore on a real file in tmp_path;
- redis: a RedisStore on the real server (`redis_url`), under a prefix unique to the
  test, whose keys are deleted afterwards.

`make_store(**options)` builds more stores of the same kind; sqlite and redis ones
share the file / prefix, so two of them are two clients of one store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from store_support import FakeClock, MakeStore, delete_prefix

from raygent.stores import InMemoryStore, RedisStore, SQLiteStore


def build(kind: str, tmp_path: Path, request: pytest.FixtureRequest, prefix: str) -> MakeStore:
    def make(**options: Any) -> Any:
        if kind == "memory":
            return InMemoryStore(**options)
        if kind == "sqlite":
            return SQLiteStore(tmp_path / "store.db", **options)
        return RedisStore(request.getfixturevalue("redis_url"), prefix=prefix, **options)

    return make


@pytest.fixture
async def make_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[MakeStore]:
    prefix = f"raygent-test-{uuid.uuid4().hex[:12]}"
    made: list[Any] = []
    build_one = build(kind, tmp_path, request, prefix)

    def make(**options: Any) -> Any:
        store = build_one(**options)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
    if kind == "redis" and made:  # nothing made: Redis may be absent (test skipped)
        delete_prefix(request.getfixturevalue("redis_url"), prefix)


@pytest.fixture
def store(make_store: MakeStore) -> Any:
    return make_store()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # `kind` runs a test on every store unless the test names its kinds with
    # @pytest.mark.kinds("sqlite", "redis").
    if "kind" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("kinds")
        kinds = marker.args if marker else ("memory", "sqlite", "redis")
        metafunc.parametrize("kind", kinds)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kinds(*names): the stores a store test runs on")
