"""Fixtures of the store suite: every conformance test runs on each store.

- memory: an InMemoryStore;
- sqlite: a SQLiteStore on a real file in tmp_path;
- redis: a RedisStore on the real server (`redis_url`), under a prefix unique to the
  test, whose keys are deleted afterwards;
- postgres: a PostgresStore on the real server (`postgres_dsn`), in a schema unique to
  the test, dropped afterwards.

`make_store(**options)` builds more stores of the same kind; the durable ones
share the file / prefix / schema, so two of them are two clients of one store.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from store_support import FakeClock, MakeStore, delete_prefix, drop_schema, postgres_answers

from raygent.stores import InMemoryStore, PostgresStore, RedisStore, SQLiteStore

POSTGRES_DSN = os.environ.get(
    "RAYGENT_TEST_POSTGRES_DSN",
    "postgresql://raygent:raygent-test-secret@127.0.0.1:5432/raygent_test",
)


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """The real PostgreSQL (.ci/run creates the role and database). Missing PostgreSQL
    skips locally but fails under CI=true, as Redis does."""
    problem = postgres_answers(POSTGRES_DSN)
    if problem is not None:
        message = f"no PostgreSQL answers at 127.0.0.1:5432 ({problem})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true: a missing PostgreSQL is a failure)")
        pytest.skip(message)
    return POSTGRES_DSN


def build(kind: str, tmp_path: Path, request: pytest.FixtureRequest, prefix: str) -> MakeStore:
    schema = prefix.replace("-", "_")

    def make(**options: Any) -> Any:
        if kind == "memory":
            return InMemoryStore(**options)
        if kind == "sqlite":
            return SQLiteStore(tmp_path / "store.db", **options)
        if kind == "postgres":
            return PostgresStore(request.getfixturevalue("postgres_dsn"), schema=schema, **options)
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
    if kind == "postgres" and made:
        drop_schema(request.getfixturevalue("postgres_dsn"), prefix.replace("-", "_"))


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
        kinds = marker.args if marker else ("memory", "sqlite", "redis", "postgres")
        metafunc.parametrize("kind", kinds)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kinds(*names): the stores a store test runs on")
