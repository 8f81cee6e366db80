"""RedisStore: conversations in Redis, shared by every process of a cluster.

Each write is one Lua script (EVALSHA, loaded again on NOSCRIPT), so the position check,
the idempotency check and the write are atomic on the server. Messages are msgpack
envelopes in a list; every write refreshes the TTL of all keys of the conversation.

Connections come from a blocking pool per event loop: past `max_connections` an
operation waits (up to `pool_timeout`) for one to come free instead of failing, and each
loop's pool is closed by `aclose()` in that loop, or when the loop shuts down (asyncio.run,
`execute_sync`) if the store was not closed in it.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from raygent.errors import RaygentError
from raygent.messages import Message

from .._base import COMPACTED_TURN, MAX_BATCH_IDS, MAX_ERRORS, Clock, check_messages
from .._base import conflict as position_conflict
from .._cache import BaseCacheStore
from .._closer import closer
from .._codec import (
    check_ref,
    decode_envelopes,
    decode_error,
    encode_batch,
    encode_error,
    encode_msgpack,
    envelope_header,
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
from . import _scripts as scripts
from ._errors import translated as _translated
from ._reads import CoalescedReads
from ._runs import RedisRuns, RunScripts

__all__ = ["RedisStore"]

_PAGE = 200  # index entries read per round trip when listing or pruning


@dataclass
class _Connection:
    client: aioredis.Redis
    append: AsyncScript
    record_error: AsyncScript
    replace_prefix: AsyncScript
    prune: AsyncScript
    runs: RunScripts
    closer: AsyncGenerator[None, None]  # closes the client when finalised (see _closer)
    reads: CoalescedReads  # cached values


class RedisStore(BaseCacheStore, BaseTimingStore, RedisRuns):
    """Conversations (and durable runs, see _runs; cached values, one string key each
    under `{prefix}:cache:`, expired by Redis) under `prefix` in one Redis database.

    A redis.asyncio client is bound to the event loop that created it, so the store
    keeps one client per loop, opened on first use; pickling drops them. Each client
    has a blocking pool of at most `max_connections`: more operations at once wait up to
    `pool_timeout` seconds (None: no limit) for a connection, then fail with
    `StoreUnavailableError`. `aclose()` closes the calling loop's client; a loop that
    shuts down (asyncio.run) closes its own. The keys of
    one conversation share a hash tag; the store-wide index key does not, so a script
    touches two slots and Redis Cluster is not supported.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "raygent",
        key_metadata: Sequence[str] = (),
        ttl: float | None = None,
        clock: Clock = time.time,
        max_connections: int = 100,
        pool_timeout: float | None = 30.0,
    ) -> None:
        super().__init__(key_metadata=key_metadata, ttl=ttl, clock=clock)
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError("prefix must be non-empty and free of braces (hash tags)")
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, not {max_connections}")
        if pool_timeout is not None and pool_timeout <= 0:
            raise ValueError(f"pool_timeout must be positive seconds or None, not {pool_timeout}")
        self.url = url
        self.prefix = prefix
        self.max_connections = max_connections
        self.pool_timeout = pool_timeout
        self._connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Connection] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:  # no URL: it may carry a password
        return f"RedisStore(prefix={self.prefix!r}, key_metadata={self.key_metadata!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_connections"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._connections = weakref.WeakKeyDictionary()

    def _encode(self, message: Message) -> bytes:
        return encode_msgpack(message)

    def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = self._connections.get(loop)
        if connection is None:
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url, max_connections=self.max_connections, timeout=self.pool_timeout
            )
            client = aioredis.Redis.from_pool(pool)  # the client owns (and closes) the pool
            connections = self._connections

            def forget() -> None:
                # The entry holds the loop alive (its streams, the closer's finaliser):
                # once closed, it goes, and the loop with it.
                if connections.get(loop) is connection:
                    del connections[loop]

            connection = connections[loop] = _Connection(
                client,
                AsyncScript(client, scripts.APPEND),
                AsyncScript(client, scripts.RECORD_ERROR),
                AsyncScript(client, scripts.REPLACE_PREFIX),
                AsyncScript(client, scripts.PRUNE),
                RunScripts.of(client),
                closer(client.aclose, forget),  # its pool too (from_pool)
                CoalescedReads(client),
            )
        return connection

    @property
    def index_key(self) -> str:
        """The sorted set of conversation refs by last write time."""
        return f"{self.prefix}:conversations"

    def keys(self, ref: str) -> list[str]:
        """The keys of one conversation: messages, batch ids, meta, errors; then the index."""
        base = f"{self.prefix}:{{{ref}}}"
        return [f"{base}:m", f"{base}:b", f"{base}:h", f"{base}:e", self.index_key]

    def _run_connection(self) -> tuple[aioredis.Redis, RunScripts]:
        connection = self._connection()
        return connection.client, connection.runs

    @staticmethod
    def _scope_json(scope: Scope) -> str:
        return json.dumps(
            {"session_id": scope.session_id, "user_id": scope.user_id, "metadata": scope.metadata}
        )

    async def ensure(self) -> None:
        """Nothing to create; checks that Redis answers."""
        with _translated(None):
            await self._connection().client.ping()

    async def aclose(self) -> None:
        """Close this loop's client and its pool (the store reconnects if used again);
        the clients of other loops are closed in them (their `aclose()`, or the loop's
        shutdown)."""
        connection = self._connections.pop(asyncio.get_running_loop(), None)
        if connection is not None:  # gone first: an operation meanwhile opens a new one
            await connection.closer.aclose()

    # -- reads ---------------------------------------------------------------------

    async def _elements(self, ref: str) -> list[bytes]:
        with _translated(ref):
            elements = await self._connection().client.lrange(self.keys(ref)[0], 0, -1)
        return cast(list[bytes], elements)

    async def load(self, scope: Scope) -> list[Message]:
        ref = self.ref(scope)
        return [e.message for e in decode_envelopes(ref, await self._elements(ref))]

    async def get_conversation(self, ref: str) -> list[StoredMessage]:
        envelopes = decode_envelopes(ref, await self._elements(check_ref(ref)))
        return [
            StoredMessage(position, e.run_id, e.turn, to_datetime(e.created_at), e.message)
            for position, e in enumerate(envelopes)
        ]

    async def snapshot(self, scope: Scope) -> Snapshot:
        ref = self.ref(scope)
        messages, _, meta, _, _ = self.keys(ref)
        with _translated(ref):
            async with self._connection().client.pipeline(transaction=True) as pipe:
                pipe.lrange(messages, 0, -1)
                pipe.hget(meta, "rev")
                elements, revision = await pipe.execute()
        try:
            current = int(revision or 0)
        except ValueError:
            raise StoreDataError(
                f"conversation {ref!r} has a malformed revision {revision!r}",
                ref=ref,
                position=None,
                reason="revision",
            ) from None
        return Snapshot(current, [e.message for e in decode_envelopes(ref, elements)])

    async def errors(self, scope: Scope) -> list[ErrorRecord]:
        ref = self.ref(scope)
        with _translated(ref):
            records = await self._connection().client.lrange(self.keys(ref)[3], 0, -1)
        return [decode_error(ref, raw) for raw in records]

    async def list_conversations(
        self, limit: int = 100, user_id: str | None = None
    ) -> list[ConversationInfo]:
        client = self._connection().client
        found: list[ConversationInfo] = []
        start = 0
        with _translated(None):
            while len(found) < limit:
                page = cast(
                    list[bytes], await client.zrevrange(self.index_key, start, start + _PAGE - 1)
                )
                if not page:
                    break
                start += len(page)
                async with client.pipeline(transaction=False) as pipe:
                    for member in page:
                        messages, _, meta, _, _ = self.keys(member.decode())
                        pipe.hmget(meta, "scope", "at")
                        pipe.llen(messages)
                    replies = await pipe.execute()
                for member, (scope, at), length in zip(
                    page, replies[::2], replies[1::2], strict=True
                ):
                    if scope is None:  # expired by TTL; prune() drops the index entry
                        continue
                    info = _info(member.decode(), scope, at, length)
                    if user_id is None or info.user_id == user_id:
                        found.append(info)
        return found[:limit]

    # -- writes --------------------------------------------------------------------

    async def append(
        self,
        scope: Scope,
        run_id: str,
        turn: int,
        messages: Sequence[Message],
        expected_position: int | None = None,
    ) -> AppendResult:
        batch = self._batch(scope, run_id, turn, messages, expected_position)
        header = envelope_header(run_id, turn, batch.now)
        expected = "" if expected_position is None else str(expected_position)
        args: list[Any] = [batch.batch_id, expected, repr(batch.now), self._ttl_ms(), MAX_BATCH_IDS]
        args += [batch.ref, self._scope_json(scope), *(header + p for p in batch.payloads)]
        with _translated(batch.ref):
            code, position = await self._connection().append(self.keys(batch.ref), args)
        if code == 2:
            raise position_conflict(batch.ref, expected_position or 0, int(position))
        return AppendResult(int(position), len(batch.payloads), duplicate=code == 1)

    async def record_error(
        self,
        scope: Scope,
        run_id: str,
        error: RaygentError | Mapping[str, Any],
        messages: Sequence[Message] = (),
    ) -> None:
        ref, now = self.ref(scope), self.clock()
        record = encode_error(ref, run_id, error, check_messages(messages), now)
        args: list[Any] = [
            repr(now),
            self._ttl_ms(),
            MAX_ERRORS,
            ref,
            self._scope_json(scope),
            record,
        ]
        with _translated(ref):
            await self._connection().record_error(self.keys(ref), args)

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
        header = envelope_header(run_id, COMPACTED_TURN, now)
        args: list[Any] = [revision, count, repr(now), self._ttl_ms(), ref, self._scope_json(scope)]
        args += [header + p for p in reversed(payloads)]  # LPUSH reverses them back
        with _translated(ref):
            result = await self._connection().replace_prefix(self.keys(ref), args)
        if isinstance(result, list):
            raise ValueError(f"count {count} is outside 0..{result[1]}")
        return "committed" if result == 1 else "conflict"

    async def clear(self, scope: Scope) -> None:
        ref = self.ref(scope)
        *conversation_keys, index = self.keys(ref)
        with _translated(ref):
            async with self._connection().client.pipeline(transaction=True) as pipe:
                pipe.delete(*conversation_keys)
                pipe.zrem(index, ref)
                await pipe.execute()

    async def prune(self, older_than: float | datetime | None = None) -> int:
        cutoff = self._prune_cutoff(older_than)
        if cutoff is None:
            return 0
        connection = self._connection()
        removed = 0
        with _translated(None):
            while True:
                page = cast(
                    list[bytes],
                    await connection.client.zrangebyscore(
                        self.index_key, "-inf", f"({cutoff!r}", start=0, num=_PAGE
                    ),
                )
                if not page:
                    return removed + await self._prune_runs(cutoff)
                async with connection.client.pipeline(transaction=False) as pipe:
                    for member in page:
                        ref = member.decode()
                        await connection.prune(self.keys(ref), [ref, repr(cutoff)], client=pipe)
                    removed += sum(await pipe.execute())

    # -- timings: the primitives of BaseTimingStore -------------------------------
    # One list per key, newest first (LPUSH), trimmed in the same round trip.

    def timings_key(self, key: str) -> str:
        return f"{self.prefix}:timings:{key}"

    async def _add_timings(self, key: str, samples: list[TimingSample]) -> None:
        name = self.timings_key(key)
        encoded = [json.dumps(sample_row(sample)) for sample in samples]
        with _translated(None):
            async with self._connection().client.pipeline(transaction=True) as pipe:
                pipe.lpush(name, *encoded)
                pipe.ltrim(name, 0, MAX_TIMINGS - 1)
                await pipe.execute()

    async def _timings(self, key: str, limit: int) -> list[TimingSample]:
        with _translated(None):
            rows = await self._connection().client.lrange(self.timings_key(key), 0, limit - 1)
        return [sample_of(json.loads(row)) for row in rows]

    # -- cached values: the primitives of BaseCacheStore ----------------------------

    def cache_key(self, namespace: str, key: str) -> str:
        """The string key of a cached value (Redis expires it: PX on the write)."""
        return f"{self.prefix}:cache:{len(namespace)}:{namespace}:{key}"  # unambiguous

    async def _get_cached(self, namespace: str, key: str, now: float) -> bytes | None:
        with _translated(None):
            return await self._connection().reads.get(self.cache_key(namespace, key))

    async def _put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None, expires_at: float | None
    ) -> None:
        px = None if ttl is None else max(1, round(ttl * 1000))
        with _translated(None):
            await self._connection().client.set(self.cache_key(namespace, key), value, px=px)


def _info(ref: str, scope: bytes, at: bytes | None, length: int) -> ConversationInfo:
    try:
        raw = json.loads(scope)
        return ConversationInfo(
            ref=ref,
            session_id=raw["session_id"],
            user_id=raw["user_id"],
            metadata=dict(raw["metadata"]),
            message_count=int(length),
            updated_at=to_datetime(float(at or 0)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreDataError(
            f"conversation {ref!r} has malformed meta: {exc}",
            ref=ref,
            position=None,
            reason=str(exc),
        ) from None
