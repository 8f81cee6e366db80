"""Fixtures of the response cache suite.

- `cache_kind`: a test that takes it runs on every store (memory, sqlite, redis,
  postgres) unless it names its kinds with @pytest.mark.kinds(...);
- `make_cache(**options)`: a `ResponseCache` on a fresh store of that kind (a file in
  tmp_path, a Redis prefix, a PostgreSQL schema, all removed afterwards);
- `backend_kind`: a test that takes it runs on the local backend and on Ray (the
  session's Ray, started once by tests/conftest.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from backend_support import on_backend

from raygent import ResponseCache
from raygent.stores import InMemoryStore, PostgresStore, RedisStore, SQLiteStore

POSTGRES_DSN = os.environ.get(
    "RAYGENT_TEST_POSTGRES_DSN",
    "postgresql://raygent:raygent-test-secret@127.0.0.1:5432/raygent_test",
)
KINDS = ("memory", "sqlite", "redis", "postgres")


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    try:
        psycopg.connect(POSTGRES_DSN, connect_timeout=3).close()
    except psycopg.Error as exc:
        message = f"no PostgreSQL answers at 127.0.0.1:5432 ({type(exc).__name__})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true: a missing PostgreSQL is a failure)")
        pytest.skip(message)
    return POSTGRES_DSN


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    marker = metafunc.definition.get_closest_marker("kinds")
    kinds = marker.args if marker else KINDS
    if "cache_kind" in names and "backend_kind" in names:
        # A test marked `across_processes` needs the cache shared by Ray's runner
        # processes: its in-memory case runs on the local backend only (not generated
        # on Ray, rather than skipped).
        shared = metafunc.definition.get_closest_marker("across_processes") is not None
        combos = [
            (backend, kind)
            for backend in ("local", "ray")
            for kind in kinds
            if not (shared and backend == "ray" and kind == "memory")
        ]
        metafunc.parametrize(("backend_kind", "cache_kind"), combos, indirect=["backend_kind"])
    elif "cache_kind" in names:
        metafunc.parametrize("cache_kind", kinds)
    elif "backend_kind" in names:
        metafunc.parametrize("backend_kind", ["local", "ray"], indirect=True)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kinds(*names): the stores a cache test runs on")
    config.addinivalue_line(
        "markers",
        "across_processes: the cache is shared by Ray's runner processes (an in-memory "
        "one is per process: that case runs on the local backend only)",
    )


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


@pytest.fixture
async def make_cache(
    cache_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    prefix = f"raygent-cache-test-{uuid.uuid4().hex[:12]}"
    schema = prefix.replace("-", "_")
    stores: list[Any] = []

    def make(store_options: dict[str, Any] | None = None, **options: Any) -> ResponseCache:
        extra = store_options or {}
        store: Any
        if cache_kind == "memory":
            store = InMemoryStore(**extra) if extra else None
        elif cache_kind == "sqlite":
            store = SQLiteStore(tmp_path / "cache.db", **extra)
        elif cache_kind == "redis":
            url = request.getfixturevalue("redis_url")
            store = RedisStore(url, prefix=prefix, **extra)
        else:
            dsn = request.getfixturevalue("postgres_dsn")
            store = PostgresStore(dsn, schema=schema, **extra)
        if store is not None:
            stores.append(store)
        return ResponseCache(store, **options)

    yield make
    for store in stores:
        await store.aclose()
    if cache_kind == "redis" and stores:
        with redis.Redis.from_url(request.getfixturevalue("redis_url")) as client:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
    if cache_kind == "postgres" and stores:
        with psycopg.connect(request.getfixturevalue("postgres_dsn"), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
