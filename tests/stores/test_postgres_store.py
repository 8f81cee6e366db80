"""PostgresStore on the real server: a connection killed mid-append, the server restarted
mid-batch, the schema version, the DSN's password, and durable runs fenced by epoch.

(The conformance suite and two spawned writers run on it too: test_store_*.py.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from typing import Any

import psycopg
import pytest
from store_support import MakeStore, _pg, batch_of, batch_records, postgres_answers

from raygent import UserMessage
from raygent.stores import (
    AppendResult,
    PostgresStore,
    RunConflictError,
    RunStore,
    Scope,
    StoreDataError,
    StoreUnavailableError,
)

pytestmark = pytest.mark.kinds("postgres")
SCOPE = Scope("s1")


async def _until(condition: Any, timeout: float = 30) -> None:
    """Poll a condition (not a guessed sleep) until it holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


async def _blocked_pids(store: PostgresStore) -> list[int]:
    """Backends of the store waiting on a row lock inside one of its writes (the append
    statement or function: any statement on the store's schema)."""
    query = (
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE %s ORDER BY pid"
    )
    rows = await asyncio.to_thread(_pg, store, query, (f'%"{store.schema}".%',))
    return [int(pid) for (pid,) in rows]


async def _lock_conversations(
    store: PostgresStore, scopes: list[Scope]
) -> psycopg.AsyncConnection[Any]:
    """A transaction holding the row lock of each conversation (so appends wait on it)."""
    blocker = await psycopg.AsyncConnection.connect(store.dsn)
    refs = [store.ref(s) for s in scopes]
    await blocker.execute(
        f'SELECT 1 FROM "{store.schema}".conversations WHERE ref = ANY(%s) FOR UPDATE', (refs,)
    )
    return blocker


async def test_postgres_connection_killed_mid_append_writes_once_or_not_at_all(
    store: PostgresStore,
) -> None:
    await store.append(SCOPE, "r", 0, batch_of(0, 0))
    blocker = await _lock_conversations(store, [SCOPE])
    try:
        append = asyncio.ensure_future(store.append(SCOPE, "r", 1, batch_of(0, 1)))
        await _until(lambda: _has(_blocked_pids(store)))
        [pid] = await _blocked_pids(store)
        await blocker.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreUnavailableError) as caught:
            await append
        assert caught.value.retryable
    finally:
        await blocker.close()
    stored = await store.get_conversation(store.ref(SCOPE))
    assert [(s.run_id, s.turn) for s in stored].count(("r", 1)) in (0, len(batch_of(0, 1)))
    retried = await store.append(SCOPE, "r", 1, batch_of(0, 1))
    again = await store.append(SCOPE, "r", 1, batch_of(0, 1))
    assert again.duplicate and again.first_position == retried.first_position
    assert await store.load(SCOPE) == batch_of(0, 0) + batch_of(0, 1)


async def test_postgres_retry_that_waited_on_its_first_attempt_is_a_duplicate(
    store: PostgresStore,
) -> None:
    """The first attempt holds the row lock (still uncommitted) when its retry starts: the
    retry's fast UPDATE waits, then finds the batch id taken and undoes its counters."""
    await store.append(SCOPE, "r", 0, batch_of(0, 0))
    messages = batch_of(0, 1)
    batch = store._batch(SCOPE, "r", 1, messages, None)
    params = (*store._scope_args(batch.ref, SCOPE, batch.now), batch.batch_id, None, "r", 1)
    first = await psycopg.AsyncConnection.connect(store.dsn)  # a transaction until commit
    try:
        await first.execute(store._q["APPEND"], (*params, batch.payloads))
        retry = asyncio.ensure_future(store.append(SCOPE, "r", 1, messages))
        await _until(lambda: _has(_blocked_pids(store)))
        await first.commit()
        result = await retry
    finally:
        await first.close()
    assert result == AppendResult(len(batch_of(0, 0)), len(messages), duplicate=True)
    assert await store.load(SCOPE) == batch_of(0, 0) + messages
    assert (await store.snapshot(SCOPE)).revision == 2
    after = await store.append(SCOPE, "r", 2, batch_of(0, 2))
    assert after.first_position == len(batch_of(0, 0) + messages)


async def test_postgres_append_onto_a_foreign_row_fails_and_writes_nothing(
    store: PostgresStore,
) -> None:
    """A row already at the next position (written behind the store's back: what a fork
    would leave) fails the append's insert on the primary key: a StoreDataError, nothing
    written, and not taken for a duplicate batch (whose key fails the same way in a race)."""
    await store.append(SCOPE, "r", 0, batch_of(0, 0))
    ref, length = store.ref(SCOPE), len(batch_of(0, 0))
    counters = "SELECT revision, length FROM {s}.conversations WHERE ref = %s"
    foreign = UserMessage(content="foreign").model_dump_json().encode()
    _pg(store, "INSERT INTO {s}.messages VALUES (%s, %s, 'x', 9, 0, %s)", (ref, length, foreign))
    with pytest.raises(StoreDataError):
        await store.append(SCOPE, "r", 1, batch_of(0, 1))
    assert _pg(store, counters, (ref,)) == [(1, length)]
    assert batch_records(store, SCOPE) == 1
    assert [s.run_id for s in await store.get_conversation(ref)] == ["r"] * length + ["x"]


async def _has(pids: Any) -> bool:
    return bool(await pids)


def _restart_server(store: PostgresStore) -> str:
    """Restart the PostgreSQL cluster on port 5432 (as root, with pg_ctlcluster), or where
    that is impossible, terminate every backend of the database: what a client sees of a
    restart. Returns which was done."""
    if shutil.which("pg_ctlcluster") and shutil.which("pg_lsclusters") and os.geteuid() == 0:
        listing = subprocess.run(
            ["pg_lsclusters", "-h"], check=True, capture_output=True, text=True
        ).stdout
        for line in listing.splitlines():
            version, name, port = line.split()[:3]
            if port == "5432":
                subprocess.run(
                    ["pg_ctlcluster", version, name, "restart", "-m", "fast"],
                    check=True,
                    capture_output=True,
                )
                return "restarted"
    _pg(
        store,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    return "terminated"


async def _retrying(store: PostgresStore, scope: Scope, writer: int, index: int) -> None:
    """Append until it lands: stale pooled connections fail once each after a restart."""
    for _ in range(store.max_connections + 5):
        try:
            await store.append(scope, f"w{writer}", index, batch_of(writer, index))
            return
        except StoreUnavailableError:
            continue
    raise AssertionError("the append never landed")


async def test_postgres_server_restarted_mid_batch_loses_and_doubles_nothing(
    make_store: MakeStore,
) -> None:
    store = make_store(max_connections=8)
    scopes = [Scope(f"s{i}") for i in range(6)]
    for writer, scope in enumerate(scopes):
        await store.append(scope, f"w{writer}", 0, batch_of(writer, 0))
    blocker = await _lock_conversations(store, scopes[:3])
    try:  # three appends wait on the lock, three commit; then the server goes away
        waiting = [
            asyncio.ensure_future(store.append(s, f"w{w}", 1, batch_of(w, 1)))
            for w, s in enumerate(scopes[:3])
        ]
        for w, s in enumerate(scopes[3:], start=3):
            await store.append(s, f"w{w}", 1, batch_of(w, 1))

        async def all_waiting() -> bool:
            return len(await _blocked_pids(store)) == 3

        await _until(all_waiting)
        await asyncio.to_thread(_restart_server, store)
        outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    finally:
        await blocker.close()
    # An append in flight fails, typed and retryable, or it committed as the server went
    # down (a shutdown ends the blocker too, and a waiting append may get its lock and
    # commit before its own backend is ended): never anything else.
    assert len(outcomes) == 3
    for outcome in outcomes:
        if isinstance(outcome, AppendResult):
            assert not outcome.duplicate
        else:
            assert isinstance(outcome, StoreUnavailableError) and outcome.retryable, outcome

    async def answers() -> bool:
        return await asyncio.to_thread(postgres_answers, store.dsn) is None

    await _until(answers, timeout=60)
    for w, s in enumerate(scopes):  # every writer retries its whole batch of turns
        for index in range(3):
            await _retrying(store, s, w, index)
    for w, s in enumerate(scopes):
        assert await store.load(s) == batch_of(w, 0) + batch_of(w, 1) + batch_of(w, 2)


async def test_postgres_refuses_a_schema_newer_than_the_code(make_store: MakeStore) -> None:
    first = make_store()
    await first.ensure()
    _pg(first, "UPDATE {s}.schema_version SET version = version + 1")
    later = make_store()
    with pytest.raises(StoreDataError) as caught:
        await later.append(SCOPE, "r", 0, [UserMessage(content="a")])
    assert caught.value.details["reason"] == "schema_version"
    assert caught.value.details["found"] == [2]
    assert caught.value.details["supported"] == 1


async def test_postgres_creates_its_schema_with_a_version_row(store: PostgresStore) -> None:
    await store.ensure()
    assert _pg(store, "SELECT version FROM {s}.schema_version") == [(1,)]
    await store.ensure()  # a second store start finds it and creates nothing
    assert _pg(store, "SELECT version FROM {s}.schema_version") == [(1,)]


async def test_postgres_password_never_shows(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    password = "sekrit-pg-password-42"
    dsn = f"postgresql://raygent:{password}@127.0.0.1:1/raygent_test"
    store = PostgresStore(dsn, pool_timeout=1.0)
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.load(SCOPE)
    finally:
        await store.aclose()
    exc = caught.value
    shown = [str(exc), repr(exc), repr(exc.to_dict()), repr(store), caplog.text]
    shown += [record.getMessage() for record in caplog.records]
    assert all(password not in text for text in shown)
    assert exc.retryable
    # A reachable server with the password in the DSN: nothing shows it either.
    good = PostgresStore(postgres_dsn)
    assert "raygent-test-secret" not in repr(good)


def test_postgres_checks_its_options() -> None:
    with pytest.raises(ValueError):
        PostgresStore("postgresql://x@127.0.0.1/db", schema="Bad-Name")
    with pytest.raises(ValueError):
        PostgresStore("postgresql://x@127.0.0.1/db", max_connections=0)
    with pytest.raises(ValueError):
        PostgresStore("postgresql://x@127.0.0.1/db", pool_timeout=0)


# -- durable runs -------------------------------------------------------------------


async def test_postgres_runs_are_fenced_by_epoch(store: PostgresStore) -> None:
    assert isinstance(store, RunStore)
    run = Scope("run-1")
    assert await store.start_run(run, b"header") == 1
    with pytest.raises(RunConflictError) as exists:
        await store.start_run(run, b"other")
    assert exists.value.details["reason"] == "exists"
    await store.append_run(run, 1, 0, b"e0")
    await store.append_run(run, 1, 0, b"e0")  # a retry of a stored entry: no-op
    with pytest.raises(RunConflictError) as sequence:
        await store.append_run(run, 1, 2, b"e2")
    assert sequence.value.details["reason"] == "sequence"
    claims = await asyncio.gather(
        store.claim_run(run, 1), store.claim_run(run, 1), return_exceptions=True
    )
    assert sorted(map(type, claims), key=str) == sorted([int, RunConflictError], key=str)
    with pytest.raises(RunConflictError) as fenced:
        await store.append_run(run, 1, 1, b"late")  # the old holder writes nothing
    assert fenced.value.details["reason"] == "epoch"
    await store.append_run(run, 2, 1, b"e1")
    record = await store.load_run(run)
    assert record is not None and record.entries == [b"e0", b"e1"] and record.epoch == 2
    await store.finish_run(run, 2, b"done", drop_entries=True)
    with pytest.raises(RunConflictError) as finished:
        await store.append_run(run, 2, 2, b"more")
    assert finished.value.details["reason"] == "finished"
    record = await store.load_run(run)
    assert record is not None and (record.entries, record.outcome) == ([], b"done")
    await store.delete_run(run)
    assert await store.load_run(run) is None
    with pytest.raises(RunConflictError) as missing:
        await store.claim_run(run, 2)
    assert missing.value.details["reason"] == "missing"


async def test_postgres_runs_expire_and_prune_with_the_ttl(make_store: MakeStore) -> None:
    from store_support import FakeClock

    clock = FakeClock()
    store = make_store(ttl=60, clock=clock)
    await store.start_run(Scope("old"), b"h")
    clock.advance(61)
    assert await store.load_run(Scope("old")) is None
    assert await store.start_run(Scope("old"), b"again") == 1  # expired: starts afresh
    clock.advance(61)
    assert await store.prune() == 1
    assert _pg(store, "SELECT count(*) FROM {s}.runs") == [(0,)]
