"""Sessions stay whole across jobs (issue 37.2): a new job's items are new turns of their
sessions (input and answer stored, in order), whatever keys an earlier job used; only a
resume (or a retry of the same attempt) is deduplicated.

Every save policy x sink or none x new job or resume x backend x store. A "new job" is a
second batch call in this process (the in-memory store cannot outlive it; the README's
example run twice in two processes is in test_batch_rerun.py). The resume finds the
first job's sink without the row of an item whose answer its session holds (a driver
killed between the two writes): the item is recovered from its session, not run and
stored again.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from backend_support import BACKENDS, on_backend

import raygent
from raygent import Memory, Message, ModelOptions
from raygent.memory import SavePolicy
from raygent.stores import InMemoryStore, PostgresStore, RedisStore, Scope, SQLiteStore
from raygent.testing import FunctionModel

POLICIES: tuple[SavePolicy, ...] = ("message", "turn", "run")
STORES = ("memory", "sqlite", "redis", "postgres")
SCENARIOS = ("new-job", "new-job-on-a-sink", "resume")
POSTGRES_DSN = os.environ.get(
    "RAYGENT_TEST_POSTGRES_DSN",
    "postgresql://raygent:raygent-test-secret@127.0.0.1:5432/raygent_test",
)


def answer(messages: list[Message], options: ModelOptions) -> str:
    # What the run saw: its question and how long the history was.
    return f"{messages[-1].text} after {len(messages)}"


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from on_backend(request)


@pytest.fixture(scope="module")
async def stores(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[[str], Any]]:
    """One store of each kind for the module (each test has sessions of its own)."""
    prefix = f"raygent-jobs-{uuid.uuid4().hex[:12]}"
    schema = prefix.replace("-", "_")
    made: dict[str, Any] = {}

    def get(kind: str) -> Any:
        if kind not in made:
            if kind == "memory":
                made[kind] = InMemoryStore()
            elif kind == "sqlite":
                made[kind] = SQLiteStore(tmp_path_factory.mktemp("jobs") / "sessions.db")
            elif kind == "redis":
                made[kind] = RedisStore(request.getfixturevalue("redis_url"), prefix=prefix)
            else:
                _postgres_or_skip()
                made[kind] = PostgresStore(POSTGRES_DSN, schema=schema)
        return made[kind]

    yield get
    for store in made.values():
        await store.aclose()
    if "redis" in made:
        with redis.Redis.from_url(request.getfixturevalue("redis_url")) as client:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
    if "postgres" in made:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as db:
            db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


def _postgres_or_skip() -> None:
    """Missing PostgreSQL skips locally but fails under CI=true (as tests/stores does)."""
    try:
        with psycopg.connect(POSTGRES_DSN, connect_timeout=3) as db:
            db.execute("SELECT 1")
    except Exception as exc:
        message = f"no PostgreSQL answers at 127.0.0.1:5432 ({exc})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " (CI=true: a missing PostgreSQL is a failure)")
        pytest.skip(message)


def _items(a: str, b: str) -> list[dict[str, str]]:
    return [
        {"key": "a1", "input": "a1", "session_id": a},
        {"key": "b1", "input": "b1", "session_id": b},
        {"key": "a2", "input": "a2", "session_id": a},
    ]


def _without_row(sink: Path, key: str) -> None:
    """The sink as a driver killed after the item's session write leaves it."""
    lines = sink.read_text().splitlines(keepends=True)
    sink.write_text("".join(line for line in lines if json.loads(line)["key"] != key))


async def _history(store: Any, session: str) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in await store.load(Scope(session))]


def _turns(*asked: str) -> list[tuple[str, str]]:
    """A history of alternating questions and answers, each answer after all before it."""
    turns: list[tuple[str, str]] = []
    for question in asked:
        turns += [("user", question), ("assistant", f"{question} after {len(turns) + 1}")]
    return turns


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("policy", POLICIES)
async def test_a_sessions_history_stays_whole_across_jobs(
    backend_kind: str,
    policy: SavePolicy,
    kind: str,
    scenario: str,
    stores: Callable[[str], Any],
    tmp_path: Path,
) -> None:
    store = stores(kind)
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    bot = raygent.agent(model=FunctionModel(answer), memory=Memory(store, policy))
    # An in-memory store lives in this process: its batches run here on Ray too.
    options: dict[str, Any] = {"progress": False, "runners": 0 if kind == "memory" else None}
    sink = None if scenario == "new-job" else tmp_path / "out.jsonl"
    first = await raygent.batch(bot, _items(a, b), sink=sink, **options)
    assert first.ok, first.items
    if scenario == "resume":
        assert sink is not None
        _without_row(sink, "a2")
        again = await raygent.batch(bot, _items(a, b), sink=sink, resume=True, **options)
        assert again.ok and (again.report.skipped, again.report.succeeded) == (2, 1)
        assert await _history(store, a) == _turns("a1", "a2")  # a2 stored once
        assert await _history(store, b) == _turns("b1")
        rows = [json.loads(line) for line in sink.read_text().splitlines()]
        assert sorted(r["key"] for r in rows) == ["a1", "a2", "b1"]
        assert next(r["data"] for r in rows if r["key"] == "a2") == "a2 after 3"
        return
    mode = None if sink is None else "append"
    again = await raygent.batch(bot, _items(a, b), sink=sink, mode=mode, **options)
    assert again.ok and again.report.succeeded == 3
    # The second job's questions are new turns, each run seeing the whole history.
    assert await _history(store, a) == _turns("a1", "a2", "a1", "a2")
    assert await _history(store, b) == _turns("b1", "b1")
    if sink is None:
        assert [item.data for item in again.items] == ["a1 after 5", "b1 after 3", "a2 after 7"]
    else:
        rows = [json.loads(line) for line in sink.read_text().splitlines()]
        assert len(rows) == 6 and len({r["job"] for r in rows}) == 2
        assert [r["data"] for r in rows[3:] if r["key"] == "a2"] == ["a2 after 7"]
