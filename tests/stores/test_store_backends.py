"""What only a durable store can show: two processes writing one session, a write that
fails half-way, the SQLite schema check and locks, Redis TTLs, scripts and outages."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import sqlite3
import threading
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from store_support import FakeClock, MakeStore, assert_batches_intact, batch_of, process_writer

from raygent import UserMessage
from raygent.stores import (
    AppendResult,
    RedisStore,
    RunConflictError,
    Scope,
    SQLiteStore,
    StoreDataError,
    StoreUnavailableError,
)
from raygent.stores.sqlite._db import SCHEMA

SCOPE = Scope("shared-session", "user-1", {"tenant": "t"})


def say(text: str) -> list[Any]:
    return [UserMessage(content=text)]


# -- both durable stores --------------------------------------------------------------


@pytest.mark.kinds("sqlite", "redis", "postgres")
async def test_store_two_processes_writing_one_session_never_fork(make_store: MakeStore) -> None:
    # The store goes to each process by pickle, unconnected; the SQLite file does not
    # exist yet, so the two processes also race to create the schema.
    store, batches = make_store(key_metadata=("tenant",)), 40
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    processes = [
        context.Process(target=process_writer, args=(store, SCOPE, writer, batches, barrier))
        for writer in range(2)
    ]
    for process in processes:
        process.start()

    def join() -> list[int | None]:
        for process in processes:
            process.join(timeout=90)
        return [process.exitcode for process in processes]

    assert await asyncio.to_thread(join) == [0, 0]
    expected = {(f"w{w}", b): batch_of(w, b) for w in range(2) for b in range(batches)}
    assert_batches_intact(await store.get_conversation(store.ref(SCOPE)), expected)


# -- SQLite -----------------------------------------------------------------------------


@pytest.mark.kinds("sqlite")
async def test_store_sqlite_rolls_back_a_batch_that_fails_half_way(store: SQLiteStore) -> None:
    await store.append(SCOPE, "r", 0, say("kept"))
    with sqlite3.connect(store.path) as db:  # the third row of the next batch will fail
        db.execute(
            "CREATE TRIGGER fail_third BEFORE INSERT ON raygent_messages"
            " WHEN NEW.position = 3 BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
        )
    with pytest.raises(StoreDataError, match="disk says no"):
        await store.append(SCOPE, "r", 1, say("1") + say("2") + say("3"))
    snapshot = await store.snapshot(SCOPE)
    assert ([m.text for m in snapshot.messages], snapshot.revision) == (["kept"], 1)
    assert (await store.append(SCOPE, "r", 2, say("next"))).first_position == 1


@pytest.mark.kinds("sqlite")
async def test_store_sqlite_reports_a_missing_position(store: SQLiteStore) -> None:
    await store.append(SCOPE, "r", 0, say("a") + say("b") + say("c"))
    with sqlite3.connect(store.path) as db:
        db.execute("DELETE FROM raygent_messages WHERE position = 1")
    with pytest.raises(StoreDataError, match="no message at position 1") as caught:
        await store.load(SCOPE)
    assert caught.value.details["position"] == 1


async def test_store_sqlite_refuses_another_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    fresh = SQLiteStore(path)
    await fresh.ensure()
    await fresh.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM raygent_schema").fetchall() == [(3,)]
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        db.execute("UPDATE raygent_schema SET version = 99")
    store = SQLiteStore(path)
    try:
        for attempt in (store.ensure, lambda: store.load(SCOPE)):
            with pytest.raises(StoreDataError, match="schema version") as caught:
                await attempt()
            assert caught.value.details["found"] == [99]
    finally:
        await store.aclose()


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master")}


async def test_store_sqlite_opens_a_version_1_file_and_adds_the_run_tables(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    written = SQLiteStore(path)
    try:
        await written.append(SCOPE, "r", 0, say("a"))
    finally:
        await written.aclose()
    # Take the file back to version 1 (before durable runs): its tables are then exactly
    # those of a file made from version 1's schema.
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE raygent_run_entries")
        db.execute("DROP TABLE raygent_runs")
        db.execute("DROP TABLE raygent_cache")  # added on connect, to any version
        db.execute("DROP TABLE raygent_timings")  # so is this one
        db.execute("UPDATE raygent_schema SET version = 1")
    with sqlite3.connect(tmp_path / "v1.db") as db:
        db.executescript(SCHEMA)
    assert _tables(path) == _tables(tmp_path / "v1.db")
    store, other = SQLiteStore(path), SQLiteStore(path)
    try:
        assert [m.text for m in await store.load(SCOPE)] == ["a"]
        assert await store.start_run(SCOPE, b"h") == 1
        await other.ensure()  # a second client finds the file migrated
        assert (await other.load_run(SCOPE)) is not None
    finally:
        await store.aclose()
        await other.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM raygent_schema").fetchall() == [(3,)]


# Version 2's run tables, as that version created them: no write time on the entries,
# the run row's `length` and `updated_at` rewritten by every append.
_V2_RUN_SCHEMA = """
CREATE TABLE raygent_runs (
    ref TEXT PRIMARY KEY, epoch INTEGER NOT NULL, length INTEGER NOT NULL, outcome BLOB,
    updated_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX raygent_runs_updated ON raygent_runs (updated_at);
CREATE TABLE raygent_run_entries (
    ref TEXT NOT NULL, seq INTEGER NOT NULL, entry BLOB NOT NULL, PRIMARY KEY (ref, seq)
);
"""


async def test_store_sqlite_opens_a_version_2_file_and_goes_on_with_its_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.db"
    clock = FakeClock()
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA + _V2_RUN_SCHEMA)
        db.execute("INSERT INTO raygent_schema (version) VALUES (2)")
        ref = SQLiteStore(path).ref(SCOPE)
        # A run version 2 wrote: its header and one entry, last written at clock.now.
        db.execute("INSERT INTO raygent_runs VALUES (?, 1, 1, NULL, ?)", (ref, clock.now))
        for seq, entry in ((-1, b"header"), (0, b"e0")):
            db.execute("INSERT INTO raygent_run_entries VALUES (?, ?, ?)", (ref, seq, entry))
    store = SQLiteStore(path, ttl=60, clock=clock)
    try:
        record = await store.load_run(SCOPE)
        assert record is not None and (record.header, record.entries) == (b"header", [b"e0"])
        with pytest.raises(RunConflictError) as caught:
            await store.append_run(SCOPE, 1, 2, b"e2")
        assert (caught.value.reason, caught.value.details["actual"]) == ("sequence", 1)
        clock.advance(50)
        await store.append_run(SCOPE, 1, 1, b"e1")
        clock.advance(50)  # 100 s after the run row's time, 50 s after the new entry
        record = await store.load_run(SCOPE)
        assert record is not None and record.entries == [b"e0", b"e1"]
        assert record.updated_at == datetime.fromtimestamp(clock.now - 50, timezone.utc)
        assert await store.prune() == 0
        clock.advance(11)
        assert await store.prune() == 1
        assert await store.load_run(SCOPE) is None
    finally:
        await store.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM raygent_schema").fetchall() == [(3,)]


async def test_store_sqlite_reports_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 100)
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreDataError, match="not a database"):
            await store.ensure()
    finally:
        await store.aclose()


async def test_store_sqlite_shares_a_file_with_other_tables(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
    store = SQLiteStore(path)
    try:
        await store.append(SCOPE, "r", 0, say("a"))
        assert [m.text for m in await store.load(SCOPE)] == ["a"]
    finally:
        await store.aclose()


async def test_store_sqlite_in_memory_database() -> None:
    store = SQLiteStore(":memory:")
    try:
        await store.append(SCOPE, "r", 0, say("a"))
        await store.append(SCOPE, "r", 1, say("b"))
        assert [m.text for m in await store.load(SCOPE)] == ["a", "b"]
    finally:
        await store.aclose()


@pytest.mark.kinds("sqlite")
async def test_store_sqlite_lock_held_too_long_is_retryable(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("raygent.stores.sqlite._db.BUSY_TIMEOUT_MS", 50)
    await store.ensure()
    await store.aclose()  # the next connection gets the short timeout
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError) as caught:
            await store.append(SCOPE, "r", 0, say("a"))
        assert caught.value.retryable
        blocker.execute("ROLLBACK")
        assert await store.append(SCOPE, "r", 0, say("a")) == AppendResult(0, 1)
    finally:
        blocker.close()


@pytest.mark.kinds("sqlite")
async def test_store_sqlite_write_waits_for_a_lock_on_the_worker_and_sees_what_it_missed(
    store: SQLiteStore,
) -> None:
    # A small write runs inline on the loop's thread only if it can take the lock at
    # once; here another connection holds it, so the write goes to the worker and waits
    # there while the loop goes on, then checks again what the other writer committed.
    epoch = await store.start_run(SCOPE, b"header")
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        write = asyncio.create_task(store.append_run(SCOPE, epoch, 0, b"mine"))
        await asyncio.sleep(0)  # the task runs up to its wait for the worker
        assert not write.done()  # the loop was not blocked by the held lock
        blocker.execute(
            "INSERT INTO raygent_run_entries (ref, seq, entry, at) VALUES (?, 0, ?, 0)",
            (store.ref(SCOPE), b"theirs"),
        )
        blocker.execute("COMMIT")
        with pytest.raises(RunConflictError) as caught:
            await write
        assert caught.value.reason == "sequence"
    finally:
        blocker.close()
    record = await store.load_run(SCOPE)
    assert record is not None and record.entries == [b"theirs"]
    await store.append_run(SCOPE, epoch, 1, b"next")  # the lock is free: inline again
    record = await store.load_run(SCOPE)
    assert record is not None and record.entries == [b"theirs", b"next"]


@pytest.mark.kinds("sqlite")
async def test_store_sqlite_write_never_overtakes_a_call_made_before_it(
    store: SQLiteStore,
) -> None:
    # The reads are queued on the worker (held up behind a gate) when the appends are
    # made: the appends must not take effect inline before them.
    epoch = await store.start_run(SCOPE, b"header")
    gate = threading.Event()
    held = asyncio.ensure_future(store._run(lambda db: gate.wait()))
    reads = asyncio.gather(store.load_run(SCOPE), store.load(SCOPE))
    await asyncio.sleep(0)  # the reads are queued
    writes = asyncio.gather(
        store.append_run(SCOPE, epoch, 0, b"entry"), store.append(SCOPE, "r", 0, say("a"))
    )
    await asyncio.sleep(0)  # the writes are made
    gate.set()
    await held
    (run, messages), (_, appended) = await reads, await writes
    assert run is not None and run.entries == [] and messages == []
    assert appended == AppendResult(0, 1)
    after = await store.load_run(SCOPE)
    assert after is not None and after.entries == [b"entry"]


# -- Redis ------------------------------------------------------------------------------


def _pttls(store: RedisStore, ref: str) -> list[int]:
    with redis.Redis.from_url(store.url) as client:
        return [int(client.pttl(key)) for key in store.keys(ref)[:4]]


@pytest.mark.kinds("redis")
async def test_store_redis_refreshes_the_ttl_of_every_key_on_every_write(
    make_store: MakeStore,
) -> None:
    store = make_store(ttl=1000)
    ref = store.ref(SCOPE)
    await store.append(SCOPE, "r", 0, say("a"))
    await store.record_error(SCOPE, "r", {"code": "x"})
    assert all(0 < ttl <= 1_000_000 for ttl in _pttls(store, ref))
    with redis.Redis.from_url(store.url) as client:
        for key in store.keys(ref)[:4]:
            client.pexpire(key, 5_000)
    for write in (
        lambda: store.append(SCOPE, "r", 1, say("b")),
        lambda: store.record_error(SCOPE, "r", {"code": "y"}),
    ):
        await write()
        assert all(ttl > 900_000 for ttl in _pttls(store, ref)), "a key kept the short TTL"
        with redis.Redis.from_url(store.url) as client:
            for key in store.keys(ref)[:4]:
                client.pexpire(key, 5_000)
    plain = make_store()
    await plain.append(Scope("no-ttl"), "r", 0, say("a"))
    assert _pttls(plain, plain.ref(Scope("no-ttl")))[:3] == [-1, -1, -1]  # no errors key yet


async def _until_gone(store: RedisStore, ref: str, timeout: float = 10) -> None:
    """Poll Redis (not a guessed sleep) until every key of `ref` has expired."""
    deadline = time.monotonic() + timeout
    with redis.Redis.from_url(store.url) as client:
        while time.monotonic() < deadline:
            if not client.exists(*store.keys(ref)[:4]):
                return
            await asyncio.sleep(0.05)
    pytest.fail(f"the keys of {ref!r} outlived their TTL by {timeout} s")


@pytest.mark.kinds("redis")
async def test_store_redis_conversation_expires_after_its_ttl(make_store: MakeStore) -> None:
    store = make_store(ttl=1)
    ref = store.ref(SCOPE)
    await store.append(SCOPE, "r", 0, say("a"))
    await store.record_error(SCOPE, "r", {"code": "x"})
    assert 0 < min(_pttls(store, ref)) <= 1000
    await _until_gone(store, ref)
    assert await store.load(SCOPE) == []
    assert await store.errors(SCOPE) == []
    assert await store.list_conversations() == []  # the stale index entry is skipped
    assert await store.prune() == 1  # and prune drops it
    assert (await store.append(SCOPE, "r", 0, say("a"))).duplicate is False


@pytest.mark.kinds("redis")
async def test_store_redis_script_that_meets_a_foreign_key_writes_nothing(
    store: RedisStore,
) -> None:
    await store.append(SCOPE, "r", 0, say("kept"))
    batches_key = store.keys(store.ref(SCOPE))[1]
    with redis.Redis.from_url(store.url) as client:
        saved = client.zrange(batches_key, 0, -1, withscores=True)
        client.delete(batches_key)
        client.set(batches_key, "someone else's string")
        with pytest.raises(StoreDataError, match="WRONGTYPE"):
            await store.append(SCOPE, "r", 1, say("1") + say("2"))
        with pytest.raises(StoreDataError):
            await store.replace_prefix(SCOPE, 1, 1, say("k"), "c")
        assert [m.text for m in await store.load(SCOPE)] == ["kept"]
        client.delete(batches_key)
        client.zadd(batches_key, dict(saved))
    meta_key = store.keys(store.ref(SCOPE))[2]
    with redis.Redis.from_url(store.url) as client:
        client.hset(meta_key, "rev", "not a number")
    with pytest.raises(StoreDataError, match="malformed revision"):
        await store.append(SCOPE, "r", 1, say("x"))
    with pytest.raises(StoreDataError, match="revision"):
        await store.snapshot(SCOPE)
    assert [m.text for m in await store.load(SCOPE)] == ["kept"]


@pytest.mark.kinds("redis")
async def test_store_redis_reloads_scripts_the_server_forgot(store: RedisStore) -> None:
    await store.append(SCOPE, "r", 0, say("a"))
    with redis.Redis.from_url(store.url) as client:
        client.script_flush()
    await store.append(SCOPE, "r", 1, say("b"))
    await store.record_error(SCOPE, "r", {"code": "x"})
    revision = (await store.snapshot(SCOPE)).revision
    assert await store.replace_prefix(SCOPE, revision, 1, say("A"), "c") == "committed"
    assert [m.text for m in await store.load(SCOPE)] == ["A", "b"]


@pytest.mark.kinds("redis")
async def test_store_redis_keeps_every_key_under_its_prefix(store: RedisStore) -> None:
    await store.append(SCOPE, "r", 0, say("a"))
    await store.record_error(SCOPE, "r", {"code": "x"})
    with redis.Redis.from_url(store.url) as client:
        keys = {k.decode() for k in client.scan_iter(match=f"{store.prefix}:*")}
    assert keys == set(store.keys(store.ref(SCOPE)))
    tagged = [k for k in keys if k != store.index_key]
    assert {k[k.index("{") : k.index("}") + 1] for k in tagged} == {f"{{{store.ref(SCOPE)}}}"}


async def test_store_redis_unreachable_is_retryable_and_hides_the_password() -> None:
    store = RedisStore("redis://:sekrit-password@127.0.0.1:1/0")
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.load(SCOPE)
        assert caught.value.retryable
        assert "sekrit" not in str(caught.value) + repr(store)
        assert "sekrit" not in str(caught.value.to_dict())
    finally:
        await store.aclose()


# -- Redis connections: a bounded pool per event loop ------------------------------------


def _pool_size(store: RedisStore) -> int:
    pool = store._connection().client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


@pytest.mark.kinds("redis")
async def test_store_redis_waits_for_a_connection_when_all_are_busy(
    make_store: MakeStore,
) -> None:
    store = make_store(max_connections=4)
    sessions = [Scope(f"busy-{i}") for i in range(20)]
    appends = [store.append(sessions[i % 20], f"run-{i}", 0, say(f"m{i}")) for i in range(200)]
    loads = [store.load(sessions[i % 20]) for i in range(100)]
    results = await asyncio.gather(*appends, *loads)  # 300 at once, 4 connections
    assert len(results) == 300
    assert _pool_size(store) == 4  # all four were used, never a fifth
    stored = [await store.load(scope) for scope in sessions]
    assert [len(history) for history in stored] == [10] * 20
    assert sorted(m.text for h in stored for m in h) == sorted(f"m{i}" for i in range(200))


@pytest.mark.kinds("redis")
async def test_store_redis_gives_up_waiting_after_pool_timeout(make_store: MakeStore) -> None:
    store = make_store(max_connections=1, pool_timeout=0.05)
    pool = store._connection().client.connection_pool
    held = await pool.get_connection()  # the only connection, taken from under the store
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.load(SCOPE)
        assert caught.value.retryable
    finally:
        await pool.release(held)
    assert await store.load(SCOPE) == []


@pytest.mark.kinds("redis")
async def test_store_redis_closes_the_connections_of_a_loop_that_ends(store: RedisStore) -> None:
    async def elsewhere() -> int:
        scopes = [Scope(f"loop-{i}") for i in range(8)]
        await asyncio.gather(*(store.append(s, "r", 0, say("a")) for s in scopes))
        return _pool_size(store)  # and no store.aclose() in this loop

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opened = await asyncio.to_thread(asyncio.run, elsewhere())
        gc.collect()
    assert opened > 1
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert len(store._connections) == 0  # the loop is let go
    assert [m.text for m in await store.load(Scope("loop-3"))] == ["a"]


def test_store_redis_checks_its_pool_options() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        RedisStore(max_connections=0)
    with pytest.raises(ValueError, match="pool_timeout"):
        RedisStore(pool_timeout=0)
