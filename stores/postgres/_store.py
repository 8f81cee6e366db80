"""PostgresStore: conversations and durable runs in PostgreSQL, shared by a cluster.

Each write is one round trip, one transaction (an append's uncommon cases two, and
every 32nd a trim of its batch ids; see `_sql`), the conversation's row locked
while the position, idempotency and revision checks run. Payloads are the messages'
JSON in `bytea` columns. The schema is created on first use, in the store's own
PostgreSQL schema, with a version row.

Connections come from a psycopg pool per event loop (module `_pool`): past
`max_connections` an operation waits up to `pool_timeout` for one, then fails with
StoreUnavailableError. The DSN's password is masked in every error and in the repr.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors

from raygent.errors import RaygentError
from raygent.messages import Message
from raygent.redaction import register_secret

from .._base import COMPACTED_TURN, MAX_ERRORS, Clock, check_messages
from .._base import conflict as position_conflict
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
from . import _sql as sql
from ._pool import Pool, Pools, dsn_password, schema_error, translated
from ._runs import PostgresRuns

__all__ = ["PostgresStore"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
Conn = psycopg.AsyncConnection[tuple[Any, ...]]


class PostgresStore(BaseCacheStore, BaseTimingStore, PostgresRuns):
    """Conversations (and durable runs, and cached values in table `cache`) in `schema`
    of one PostgreSQL database.

    `dsn` is a libpq connection string or URL. Pickling drops the pools (each process
    and each event loop opens its own); `aclose()` closes the calling loop's pool.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "raygent",
        key_metadata: Sequence[str] = (),
        ttl: float | None = None,
        clock: Clock = time.time,
        min_connections: int = 1,
        max_connections: int = 20,
        pool_timeout: float = 30.0,
    ) -> None:
        super().__init__(key_metadata=key_metadata, ttl=ttl, clock=clock)
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema must be a lower-case SQL identifier, not {schema!r}")
        if not 0 <= min_connections <= max_connections or max_connections < 1:
            raise ValueError("need 0 <= min_connections <= max_connections and max >= 1")
        if pool_timeout <= 0:
            raise ValueError(f"pool_timeout must be positive seconds, not {pool_timeout}")
        self.dsn = dsn
        self.schema = schema
        self.min_connections = min_connections
        self.max_connections = max_connections
        self.pool_timeout = pool_timeout
        self._setup()

    def _setup(self) -> None:
        self._password = dsn_password(self.dsn)
        if self._password:
            register_secret(self._password, self)  # logs and error reports mask it too
        quoted = '"' + self.schema + '"'
        self._q = {  # every statement of _sql, on this store's schema
            name: value.replace("{s}", quoted)
            for name, value in vars(sql).items()
            if name.isupper() and not name.startswith("_") and isinstance(value, str)
        }
        self._pools = Pools(
            self.dsn,
            min_size=self.min_connections,
            max_size=self.max_connections,
            timeout=self.pool_timeout,
            prepare=self._ensure_schema,
        )

    def __repr__(self) -> str:  # no DSN: it may carry a password
        return f"PostgresStore(schema={self.schema!r}, key_metadata={self.key_metadata!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k in _PICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def _encode(self, message: Message) -> bytes:
        return encode_json(message)

    async def _pool(self) -> Pool:
        with translated(None, self._password):
            return await self._pools.get()

    async def _fetch(self, ref: str | None, query: str, params: Any) -> list[tuple[Any, ...]]:
        with translated(ref, self._password):
            pool = await self._pools.get()
            async with pool.connection() as conn:
                cursor = await conn.execute(self._q[query], params)
                return await cursor.fetchall()

    async def _ensure_schema(self, conn: Conn) -> None:
        """Create the schema on first use, or check its version (under an advisory lock,
        so that processes starting together do not race on CREATE)."""
        async with conn.transaction():
            await conn.execute(sql.LOCK, (self.schema,))
            await conn.execute(self._q["VERSION_TABLE"], prepare=False)
            cursor = await conn.execute(self._q["VERSIONS"])
            versions = [int(row[0]) for row in await cursor.fetchall()]
            if not versions:
                await conn.execute(self._q["TABLES"], prepare=False)
                await conn.execute(self._q["SET_VERSION"], (sql.SCHEMA_VERSION,))
            if versions in ([], [sql.SCHEMA_VERSION]):
                await conn.execute(self._q["CACHE_TABLE"], prepare=False)
                await conn.execute(self._q["TIMINGS_TABLE"], prepare=False)
                return
        if versions != [sql.SCHEMA_VERSION]:
            raise schema_error(self.schema, versions, sql.SCHEMA_VERSION)

    async def ensure(self) -> None:
        """Create the schema or check its version (also done on first use)."""
        await self._pool()

    async def aclose(self) -> None:
        """Close this loop's pool (the store reconnects if used again)."""
        await self._pools.close()

    # -- reads ---------------------------------------------------------------------

    def _since(self) -> float:
        return self._live_since(self.clock())

    async def load(self, scope: Scope) -> list[Message]:
        ref = self.ref(scope)
        rows = await self._fetch(ref, "LOAD", (ref, self._since()))
        return decode_json(ref, _contiguous(ref, rows))

    async def snapshot(self, scope: Scope) -> Snapshot:
        ref = self.ref(scope)
        rows = await self._fetch(ref, "SNAPSHOT", (ref, self._since()))
        if not rows:
            return Snapshot(0, [])
        messages = [(p, payload) for _, p, payload in rows if p is not None]
        return Snapshot(int(rows[0][0]), decode_json(ref, _contiguous(ref, messages)))

    async def errors(self, scope: Scope) -> list[ErrorRecord]:
        ref = self.ref(scope)
        rows = await self._fetch(ref, "ERRORS", (ref, self._since()))
        return [decode_error(ref, bytes(record)) for (record,) in rows]

    async def list_conversations(
        self, limit: int = 100, user_id: str | None = None
    ) -> list[ConversationInfo]:
        params = {"since": self._since(), "user": user_id, "limit": limit}
        rows = await self._fetch(None, "LIST", params)
        return [_info(row) for row in rows]

    async def get_conversation(self, ref: str) -> list[StoredMessage]:
        check_ref(ref)
        rows = await self._fetch(ref, "GET", (ref, self._since()))
        result = []
        for position, run_id, turn, created_at, payload in rows:
            [message] = decode_json(ref, [bytes(payload)], first=position)
            result.append(StoredMessage(position, run_id, turn, to_datetime(created_at), message))
        return result

    # -- writes --------------------------------------------------------------------

    def _scope_args(self, ref: str, scope: Scope, now: float) -> tuple[Any, ...]:
        return (ref, scope.session_id, scope.user_id, _metadata(scope), now, self._live_since(now))

    async def append(
        self,
        scope: Scope,
        run_id: str,
        turn: int,
        messages: Sequence[Message],
        expected_position: int | None = None,
    ) -> AppendResult:
        batch = self._batch(scope, run_id, turn, messages, expected_position)
        ref, count, now = batch.ref, len(batch.payloads), batch.now
        fast = {  # APPEND_FAST's parameters, by name (several appear more than once)
            "ref": ref,  # the session and user are part of it: only the metadata can change
            "meta": _metadata(scope),
            "now": now,
            "since": self._live_since(now),
            "batch": batch.batch_id,
            "expected": expected_position,
            "run": run_id,
            "turn": turn,
            "payloads": batch.payloads,
        }
        with translated(ref, self._password):
            pool = await self._pools.get()
            async with pool.connection() as conn:
                written = await _append_fast(conn, self._q["APPEND_FAST"], fast)
                if written is not None:
                    first, revision = written
                    if revision % sql.TRIM_EVERY == 0:
                        # After the commit: should this fail, the append raises though
                        # written, and its retry is a duplicate (as for a lost reply).
                        await conn.execute(self._q["APPEND_TRIM"], (ref, revision))
                    return AppendResult(first, count)
                params = (*self._scope_args(ref, scope, now), batch.batch_id, expected_position)
                cursor = await conn.execute(
                    self._q["APPEND"], (*params, run_id, turn, batch.payloads)
                )
                rows: list[tuple[Any, ...]] = await cursor.fetchall()
        [(result,)] = rows
        code, position = result & 3, int(result >> 2)
        if code == 2:
            raise position_conflict(ref, expected_position or 0, position)
        return AppendResult(position, count, duplicate=code == 1)

    async def record_error(
        self,
        scope: Scope,
        run_id: str,
        error: RaygentError | Mapping[str, Any],
        messages: Sequence[Message] = (),
    ) -> None:
        ref, now = self.ref(scope), self.clock()
        record = encode_error(ref, run_id, error, check_messages(messages), now)
        await self._fetch(
            ref, "RECORD_ERROR", (*self._scope_args(ref, scope, now), record, MAX_ERRORS)
        )

    async def replace_prefix(
        self,
        scope: Scope,
        revision: int,
        count: int,
        replacement: Sequence[Message],
        run_id: str,
    ) -> Literal["committed", "conflict"]:
        if count < 0:
            raise ValueError("count must not be negative")
        ref, now = self.ref(scope), self.clock()
        payloads = encode_batch(ref, check_messages(replacement), self._encode)
        params = (*self._scope_args(ref, scope, now), revision, count, run_id, COMPACTED_TURN)
        [(result,)] = await self._fetch(ref, "REPLACE_PREFIX", (*params, payloads))
        code, length = result
        if code == -1:
            raise ValueError(f"count {count} is outside 0..{length}")
        return "committed" if code == 1 else "conflict"

    async def clear(self, scope: Scope) -> None:
        ref = self.ref(scope)
        pool = await self._pool()
        with translated(ref, self._password):
            async with pool.connection() as conn:
                await conn.execute(self._q["CLEAR"], {"ref": ref})

    async def prune(self, older_than: float | datetime | None = None) -> int:
        cutoff = self._prune_cutoff(older_than)
        if cutoff is None:
            return await self._prune_cached()
        removed = await self._prune_chunks("PRUNE", cutoff) + await self._prune_runs(cutoff)
        return removed + await self._prune_cached()

    # -- timings: the primitives of BaseTimingStore -------------------------------

    async def _add_timings(self, key: str, samples: list[TimingSample]) -> None:
        rows = [(key, *sample_row(sample)) for sample in samples]
        pool = await self._pool()
        with translated(None, self._password):
            async with pool.connection() as conn, conn.transaction():
                async with conn.cursor() as cursor:
                    await cursor.executemany(self._q["TIMINGS_ADD"], rows)
                await conn.execute(self._q["TIMINGS_TRIM"], {"key": key, "keep": MAX_TIMINGS})

    async def _timings(self, key: str, limit: int) -> list[TimingSample]:
        rows = await self._fetch(None, "TIMINGS_GET", (key, limit))
        return [sample_of(row) for row in rows]

    # -- cached values: the primitives of BaseCacheStore ----------------------------

    async def _get_cached(self, namespace: str, key: str, now: float) -> bytes | None:
        rows = await self._fetch(None, "CACHE_GET", (namespace, key, now))
        return bytes(rows[0][0]) if rows else None

    async def _put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None, expires_at: float | None
    ) -> None:
        pool = await self._pool()
        with translated(None, self._password):
            async with pool.connection() as conn:
                await conn.execute(self._q["CACHE_PUT"], (namespace, key, value, expires_at))

    async def _prune_cached(self) -> int:
        pool = await self._pool()
        with translated(None, self._password):
            async with pool.connection() as conn:
                cursor = await conn.execute(self._q["CACHE_PRUNE"], (self.clock(),))
                return int(cursor.rowcount or 0)


_PICKLED = frozenset(  # what a copy needs to reconnect; pools and the password are rebuilt
    {
        "dsn",
        "schema",
        "key_metadata",
        "ttl",
        "clock",
        "min_connections",
        "max_connections",
        "pool_timeout",
    }
)


async def _append_fast(conn: Conn, query: str, params: dict[str, Any]) -> tuple[int, int] | None:
    """(first position, revision) of the batch APPEND_FAST wrote, or None: a case it
    leaves to the append function (absent, expired, duplicate, position conflict)."""
    try:
        cursor = await conn.execute(query, params)
        row = await cursor.fetchone()
    except pg_errors.UniqueViolation as exc:
        if exc.diag.constraint_name != "batches_pkey":
            raise  # a row at a position the conversation does not cover: a fork
        return None  # a batch already committed (or committed while this one waited)
    return None if row is None else (int(row[0]), int(row[1]))


def _metadata(scope: Scope) -> str:
    return json.dumps(dict(scope.metadata), sort_keys=True) if scope.metadata else "{}"


def _contiguous(ref: str, rows: Sequence[tuple[Any, ...]]) -> list[bytes]:
    for expected, (position, _) in enumerate(rows):
        if position != expected:
            raise StoreDataError(
                f"conversation {ref!r} has no message at position {expected}",
                ref=ref,
                position=expected,
                reason="gap",
            )
    return [bytes(payload) for _, payload in rows]


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
    return ConversationInfo(ref, session_id, user_id, parsed, int(length), to_datetime(updated_at))
