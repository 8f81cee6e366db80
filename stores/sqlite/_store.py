"""SQLiteStore: the embedded, durable default.

Every call runs on the store's own worker thread with one connection (opened lazily,
so an unused store pickles cleanly and each Ray worker opens its own), except small
writes (appends, run writes), which run inline on the caller's thread when the write lock
is free at once and nothing is queued (see _db.Worker.inline). Writes are
`BEGIN IMMEDIATE` transactions (or one write statement, which takes the lock the same
way), which makes several processes writing one file safe.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from raygent.errors import RaygentError
from raygent.messages import Message

from .._base import (
    COMPACTED_TURN,
    MAX_BATCH_IDS,
    MAX_ERRORS,
    Batch,
    Clock,
    check_messages,
    conflict,
)
from .._cache import BaseCacheStore
from .._codec import (
    check_ref,
    decode_error,
    decode_json,
    encode_batch,
    encode_error,
    encode_json,
    to_datetime,
)
from .._timings import MAX_TIMINGS, BaseTimingStore, sample_of, sample_row
from ..protocol import (
    AppendResult,
    ConversationInfo,
    ErrorRecord,
    Scope,
    Snapshot,
    StoreDataError,
    StoredMessage,
    TimingSample,
)
from ._db import Busy, Worker, immediate
from ._runs import SQLiteRuns

__all__ = ["SQLiteStore"]

T = TypeVar("T")
Db = sqlite3.Connection

_LOAD = """
SELECT m.position, m.payload FROM raygent_messages m
JOIN raygent_conversations c ON c.ref = m.ref
WHERE m.ref = ? AND c.updated_at >= ? ORDER BY m.position
"""
_UPSERT = """
INSERT INTO raygent_conversations
    (ref, session_id, user_id, metadata, revision, length, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (ref) DO UPDATE SET
    session_id = excluded.session_id, user_id = excluded.user_id,
    metadata = excluded.metadata, revision = excluded.revision,
    length = excluded.length, updated_at = excluded.updated_at
"""
# Batch ids are trimmed every _TRIM_EVERY revisions, not on each append: a trim scans
# the conversation's few hundred ids, and an index to avoid that costs a page per commit.
_TRIM_EVERY = 32
_TRIM_BATCHES = "DELETE FROM raygent_batches WHERE ref = ? AND seq <= ?"
_CAP_ERRORS = """
DELETE FROM raygent_errors WHERE ref = ?1 AND id <= (
    SELECT id FROM raygent_errors WHERE ref = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
"""
_CACHE_GET = "SELECT value, expires_at FROM raygent_cache WHERE namespace = ? AND key = ?"
_CACHE_PUT = """
INSERT INTO raygent_cache (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
"""
_CACHE_PRUNE = "DELETE FROM raygent_cache WHERE expires_at <= ?"
_TIMINGS_ADD = "INSERT INTO raygent_timings (key, way, seconds, ok, at) VALUES (?, ?, ?, ?, ?)"
_TIMINGS_TRIM = """
DELETE FROM raygent_timings WHERE key = ?1 AND id <= (
    SELECT id FROM raygent_timings WHERE key = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
"""
_TIMINGS_GET = (
    "SELECT way, seconds, ok, at FROM raygent_timings WHERE key = ? ORDER BY id DESC LIMIT ?"
)
_TABLES = ("raygent_messages", "raygent_batches", "raygent_errors", "raygent_conversations")


class SQLiteStore(BaseCacheStore, BaseTimingStore, SQLiteRuns):
    """Conversations (and durable runs, see _runs; cached values in `raygent_cache`) in
    one SQLite file (WAL mode), or `:memory:` for one process.

    Payloads are the messages' JSON: as fast as msgpack here (see _codec) and readable
    with the sqlite3 shell. Pickling drops the connection; a pickled `:memory:` store
    arrives empty.
    """

    def __init__(
        self,
        path: str | Path = "raygent.db",
        *,
        key_metadata: Sequence[str] = (),
        ttl: float | None = None,
        clock: Clock = time.time,
    ) -> None:
        super().__init__(key_metadata=key_metadata, ttl=ttl, clock=clock)
        self.path = str(path)
        self._worker: Worker | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, key_metadata={self.key_metadata!r}, ttl={self.ttl})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_worker"] = None
        return state

    def _encode(self, message: Message) -> bytes:
        return encode_json(message)

    def _current_worker(self) -> Worker:
        worker = self._worker
        if worker is None or worker.pid != os.getpid():  # new, or inherited across fork
            worker = self._worker = Worker(self.path)
        return worker

    async def _run(self, fn: Callable[[Db], T]) -> T:
        return await asyncio.wrap_future(self._current_worker().submit(fn))

    async def _write(self, fn: Callable[[Db], T]) -> T:
        """A small write transaction: inline when the lock is free (see Worker.inline),
        else on the worker like any call."""
        worker = self._current_worker()
        try:
            return worker.inline(fn)
        except Busy:
            return await asyncio.wrap_future(worker.submit(fn))

    async def ensure(self) -> None:
        """Create the schema in a new file or check its version (also done on first use)."""
        await self._run(lambda db: None)

    async def aclose(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and worker.pid == os.getpid():
            await asyncio.get_running_loop().run_in_executor(worker.executor, worker.close)
            worker.executor.shutdown(wait=False)

    # -- reads ---------------------------------------------------------------------

    def _payloads(self, db: Db, ref: str, now: float) -> list[str]:
        rows = db.execute(_LOAD, (ref, self._live_since(now))).fetchall()
        for expected, (position, _) in enumerate(rows):
            if position != expected:
                raise StoreDataError(
                    f"conversation {ref!r} has no message at position {expected}",
                    ref=ref,
                    position=expected,
                    reason="gap",
                )
        return [payload for _, payload in rows]

    async def load(self, scope: Scope) -> list[Message]:
        ref = self.ref(scope)
        return await self._run(lambda db: decode_json(ref, self._payloads(db, ref, self.clock())))

    async def snapshot(self, scope: Scope) -> Snapshot:
        ref = self.ref(scope)

        def read(db: Db) -> Snapshot:
            now = self.clock()
            db.execute("BEGIN")  # one read transaction: revision and rows agree
            try:
                row = db.execute(
                    "SELECT revision, updated_at FROM raygent_conversations WHERE ref = ?", (ref,)
                ).fetchone()
                payloads = self._payloads(db, ref, now)
            finally:
                db.execute("COMMIT")
            live = row is not None and not self._expired(row[1], now)
            return Snapshot(row[0] if live else 0, decode_json(ref, payloads))

        return await self._run(read)

    async def errors(self, scope: Scope) -> list[ErrorRecord]:
        ref = self.ref(scope)
        query = """
            SELECT e.record FROM raygent_errors e JOIN raygent_conversations c ON c.ref = e.ref
            WHERE e.ref = ? AND c.updated_at >= ? ORDER BY e.id
        """

        def read(db: Db) -> list[ErrorRecord]:
            rows = db.execute(query, (ref, self._live_since(self.clock()))).fetchall()
            return [decode_error(ref, record) for (record,) in rows]

        return await self._run(read)

    async def list_conversations(
        self, limit: int = 100, user_id: str | None = None
    ) -> list[ConversationInfo]:
        query = """
            SELECT ref, session_id, user_id, metadata, length, updated_at
            FROM raygent_conversations WHERE updated_at >= ?1 AND (?2 IS NULL OR user_id = ?2)
            ORDER BY updated_at DESC LIMIT ?3
        """

        def read(db: Db) -> list[ConversationInfo]:
            since = self._live_since(self.clock())
            rows = db.execute(query, (since, user_id, limit)).fetchall()
            return [_info(row) for row in rows]

        return await self._run(read)

    async def get_conversation(self, ref: str) -> list[StoredMessage]:
        check_ref(ref)
        query = """
            SELECT m.position, m.run_id, m.turn, m.created_at, m.payload
            FROM raygent_messages m JOIN raygent_conversations c ON c.ref = m.ref
            WHERE m.ref = ? AND c.updated_at >= ? ORDER BY m.position
        """

        def read(db: Db) -> list[StoredMessage]:
            rows = db.execute(query, (ref, self._live_since(self.clock()))).fetchall()
            result = []
            for position, run_id, turn, created_at, payload in rows:
                [message] = decode_json(ref, [payload], first=position)
                result.append(
                    StoredMessage(position, run_id, turn, to_datetime(created_at), message)
                )
            return result

        return await self._run(read)

    # -- writes --------------------------------------------------------------------

    def _current(self, db: Db, ref: str, now: float) -> tuple[int, int]:
        """(revision, length) inside a write transaction; an expired conversation is
        deleted first, so the write starts a fresh one."""
        row = db.execute(
            "SELECT revision, length, updated_at FROM raygent_conversations WHERE ref = ?", (ref,)
        ).fetchone()
        if row is None:
            return 0, 0
        if self._expired(row[2], now):
            _delete(db, ref)
            return 0, 0
        return row[0], row[1]

    @staticmethod
    def _upsert(db: Db, ref: str, scope: Scope, revision: int, length: int, now: float) -> None:
        metadata = json.dumps(dict(scope.metadata), sort_keys=True)
        db.execute(_UPSERT, (ref, scope.session_id, scope.user_id, metadata, revision, length, now))

    def _append_tx(self, db: Db, batch: Batch) -> AppendResult:
        count = len(batch.payloads)
        with immediate(db):
            revision, length = self._current(db, batch.ref, batch.now)
            found = db.execute(
                "SELECT first_position FROM raygent_batches WHERE ref = ? AND batch_id = ?",
                (batch.ref, batch.batch_id),
            ).fetchone()
            if found is not None:
                return AppendResult(found[0], count, duplicate=True)
            if batch.expected_position is not None and batch.expected_position != length:
                raise conflict(batch.ref, batch.expected_position, length)
            db.executemany(
                "INSERT INTO raygent_messages VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (batch.ref, length + i, batch.run_id, batch.turn, batch.now, payload.decode())
                    for i, payload in enumerate(batch.payloads)
                ],
            )
            db.execute(
                "INSERT INTO raygent_batches VALUES (?, ?, ?, ?)",
                (batch.ref, batch.batch_id, length, revision + 1),
            )
            if (revision + 1) % _TRIM_EVERY == 0:
                db.execute(_TRIM_BATCHES, (batch.ref, revision + 1 - MAX_BATCH_IDS))
            self._upsert(db, batch.ref, batch.scope, revision + 1, length + count, batch.now)
        return AppendResult(length, count)

    async def append(
        self,
        scope: Scope,
        run_id: str,
        turn: int,
        messages: Sequence[Message],
        expected_position: int | None = None,
    ) -> AppendResult:
        batch = self._batch(scope, run_id, turn, messages, expected_position)
        return await self._write(lambda db: self._append_tx(db, batch))

    async def record_error(
        self,
        scope: Scope,
        run_id: str,
        error: RaygentError | Mapping[str, Any],
        messages: Sequence[Message] = (),
    ) -> None:
        ref, now = self.ref(scope), self.clock()
        record = encode_error(ref, run_id, error, check_messages(messages), now).decode()

        def write(db: Db) -> None:
            with immediate(db):
                revision, length = self._current(db, ref, now)
                db.execute("INSERT INTO raygent_errors (ref, record) VALUES (?, ?)", (ref, record))
                db.execute(_CAP_ERRORS, (ref, MAX_ERRORS))
                self._upsert(db, ref, scope, revision, length, now)

        await self._run(write)

    async def replace_prefix(
        self,
        scope: Scope,
        revision: int,
        count: int,
        replacement: Sequence[Message],
        run_id: str,
    ) -> Literal["committed", "conflict"]:
        ref, now = self.ref(scope), self.clock()
        payloads = encode_batch(ref, check_messages(replacement), self._encode)
        delta = len(payloads) - count

        def write(db: Db) -> Literal["committed", "conflict"]:
            with immediate(db):
                current, length = self._current(db, ref, now)
                if current != revision:
                    return "conflict"
                if not 0 <= count <= length:
                    raise ValueError(f"count {count} is outside 0..{length}")
                db.execute(
                    "DELETE FROM raygent_messages WHERE ref = ? AND position < ?", (ref, count)
                )
                # Via negative positions: shifting in place could collide on the key.
                db.execute(
                    "UPDATE raygent_messages SET position = -1 - (position + ?) WHERE ref = ?",
                    (delta, ref),
                )
                db.execute(
                    "UPDATE raygent_messages SET position = -1 - position WHERE ref = ?", (ref,)
                )
                db.executemany(
                    "INSERT INTO raygent_messages VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (ref, i, run_id, COMPACTED_TURN, now, p.decode())
                        for i, p in enumerate(payloads)
                    ],
                )
                db.execute(
                    "UPDATE raygent_batches SET first_position = CASE WHEN first_position >= ?1"
                    " THEN first_position + ?2 ELSE 0 END WHERE ref = ?3",
                    (count, delta, ref),
                )
                self._upsert(db, ref, scope, revision + 1, length + delta, now)
            return "committed"

        return await self._run(write)

    async def clear(self, scope: Scope) -> None:
        ref = self.ref(scope)

        def write(db: Db) -> None:
            with immediate(db):
                _delete(db, ref)

        await self._run(write)

    async def prune(self, older_than: float | datetime | None = None) -> int:
        cutoff = self._prune_cutoff(older_than)
        if cutoff is None:
            return await self._prune_cached()

        stale = "SELECT ref FROM raygent_conversations WHERE updated_at < ?1 LIMIT ?2"
        removed = await self._prune_table(stale, _delete, cutoff)
        return removed + await self._prune_runs(cutoff) + await self._prune_cached()

    # -- timings: the primitives of BaseTimingStore -------------------------------

    async def _add_timings(self, key: str, samples: list[TimingSample]) -> None:
        rows = [(key, *sample_row(sample)) for sample in samples]

        def write(db: Db) -> None:
            with immediate(db):
                db.executemany(_TIMINGS_ADD, rows)
                db.execute(_TIMINGS_TRIM, (key, MAX_TIMINGS))

        await self._run(write)

    async def _timings(self, key: str, limit: int) -> list[TimingSample]:
        def read(db: Db) -> list[TimingSample]:
            return [sample_of(row) for row in db.execute(_TIMINGS_GET, (key, limit))]

        return await self._run(read)

    # -- cached values: the primitives of BaseCacheStore ----------------------------
    # Small statements: inline on the caller's thread when the lock is free (a read in
    # WAL mode never waits for one), like an append.

    async def _get_cached(self, namespace: str, key: str, now: float) -> bytes | None:
        def read(db: Db) -> bytes | None:
            row = db.execute(_CACHE_GET, (namespace, key)).fetchone()
            if row is None or (row[1] is not None and row[1] <= now):
                return None
            return bytes(row[0])

        return await self._write(read)

    async def _put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None, expires_at: float | None
    ) -> None:
        def write(db: Db) -> None:
            db.execute(_CACHE_PUT, (namespace, key, value, expires_at))

        await self._write(write)

    async def _prune_cached(self) -> int:
        now = self.clock()

        def write(db: Db) -> int:
            return int(db.execute(_CACHE_PRUNE, (now,)).rowcount)

        return await self._run(write)


def _delete(db: Db, ref: str) -> None:
    for table in _TABLES:
        db.execute(f"DELETE FROM {table} WHERE ref = ?", (ref,))


def _info(row: tuple[Any, ...]) -> ConversationInfo:
    ref, session_id, user_id, metadata, length, updated_at = row
    try:
        parsed = json.loads(metadata)
    except ValueError as exc:
        raise StoreDataError(
            f"conversation {ref!r} has malformed metadata: {exc}",
            ref=ref,
            position=None,
            reason=str(exc),
        ) from None
    return ConversationInfo(ref, session_id, user_id, parsed, length, to_datetime(updated_at))
