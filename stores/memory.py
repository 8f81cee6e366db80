"""InMemoryStore: conversations and durable runs in dicts, for tests and one process.

Messages are kept encoded (JSON bytes) so that this store behaves like the durable
ones: a message that cannot be stored fails here too, and callers never share mutable
state with the store. Its durable runs implement the primitives of BaseRunStore (see
_runs), as every store does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from raygent.errors import RaygentError
from raygent.messages import Message

from ._base import (
    COMPACTED_TURN,
    MAX_BATCH_IDS,
    MAX_ERRORS,
    Clock,
    check_messages,
    conflict,
    shifted,
)
from ._cache import MAX_MEMORY_CACHED, BaseCacheStore
from ._codec import (
    check_ref,
    decode_error,
    decode_json,
    encode_batch,
    encode_error,
    encode_json,
    to_datetime,
)
from ._runs import FIRST_EPOCH, BaseRunStore, RunState, held, run_conflict, takes_entry
from ._timings import MAX_TIMINGS, BaseTimingStore
from .protocol import (
    AppendResult,
    ConversationInfo,
    ErrorRecord,
    RunRecord,
    Scope,
    Snapshot,
    StoredMessage,
    TimingSample,
)

__all__ = ["InMemoryStore"]


class _Row(NamedTuple):
    run_id: str
    turn: int
    created_at: float
    payload: bytes


@dataclass
class _Conversation:
    scope: Scope
    updated_at: float
    revision: int = 0
    rows: list[_Row] = field(default_factory=list)
    batches: dict[bytes, int] = field(default_factory=dict)  # insertion-ordered
    errors: list[bytes] = field(default_factory=list)


@dataclass
class _Run:
    epoch: int
    header: bytes
    updated_at: float
    entries: list[bytes] = field(default_factory=list)
    outcome: bytes | None = None

    @property
    def state(self) -> RunState:
        return RunState(self.epoch, len(self.entries), self.outcome is not None)


class InMemoryStore(BaseCacheStore, BaseTimingStore, BaseRunStore):
    """A dict of conversations by key, one of durable runs by key, and one of cached
    values (at most MAX_MEMORY_CACHED: past that, the oldest written goes).

    One threading lock guards the dict: no operation awaits while holding it (there is
    no I/O), so it never blocks the loop for long, and unlike an asyncio.Lock it also
    holds when several event loops in threads share the store. Pickling copies the data.
    """

    def __init__(
        self,
        *,
        key_metadata: Sequence[str] = (),
        ttl: float | None = None,
        clock: Clock = time.time,
    ) -> None:
        super().__init__(key_metadata=key_metadata, ttl=ttl, clock=clock)
        self._conversations: dict[str, _Conversation] = {}
        self._runs: dict[str, _Run] = {}  # apart from conversations: ids may coincide
        # (namespace, key) -> (value, expires_at); insertion-ordered: oldest write first.
        self._cached: dict[tuple[str, str], tuple[bytes, float | None]] = {}
        self._timed: dict[str, list[TimingSample]] = {}  # by key, oldest first
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = self.__dict__.copy()
            state["_conversations"] = {k: _copy(c) for k, c in self._conversations.items()}
            state["_runs"] = {k: _copy_run(r) for k, r in self._runs.items()}
            state["_cached"] = dict(self._cached)
            state["_timed"] = {k: list(v) for k, v in self._timed.items()}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_cached", {})
        state.setdefault("_timed", {})
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _encode(self, message: Message) -> bytes:
        return encode_json(message)

    def _live(self, ref: str, now: float) -> _Conversation | None:
        conversation = self._conversations.get(ref)
        if conversation is not None and self._expired(conversation.updated_at, now):
            del self._conversations[ref]  # expired: gone for readers and writers alike
            return None
        return conversation

    def _writable(self, ref: str, scope: Scope, now: float) -> _Conversation:
        conversation = self._live(ref, now)
        if conversation is None:
            conversation = self._conversations[ref] = _Conversation(scope, now)
        return conversation

    async def load(self, scope: Scope) -> list[Message]:
        ref = self.ref(scope)
        with self._lock:
            conversation = self._live(ref, self.clock())
            payloads = [r.payload for r in conversation.rows] if conversation else []
        return decode_json(ref, payloads)

    async def append(
        self,
        scope: Scope,
        run_id: str,
        turn: int,
        messages: Sequence[Message],
        expected_position: int | None = None,
    ) -> AppendResult:
        batch = self._batch(scope, run_id, turn, messages, expected_position)
        count = len(batch.payloads)
        with self._lock:
            existing = self._live(batch.ref, batch.now)
            if existing is not None and batch.batch_id in existing.batches:
                return AppendResult(existing.batches[batch.batch_id], count, duplicate=True)
            length = len(existing.rows) if existing else 0
            if batch.expected_position is not None and batch.expected_position != length:
                raise conflict(batch.ref, batch.expected_position, length)
            conversation = self._writable(batch.ref, scope, batch.now)
            conversation.rows.extend(
                _Row(run_id, turn, batch.now, payload) for payload in batch.payloads
            )
            conversation.batches[batch.batch_id] = length
            if len(conversation.batches) > MAX_BATCH_IDS:
                del conversation.batches[next(iter(conversation.batches))]
            self._touch(conversation, scope, batch.now, bump=True)
        return AppendResult(length, count)

    @staticmethod
    def _touch(conversation: _Conversation, scope: Scope, now: float, *, bump: bool) -> None:
        conversation.scope = scope  # the latest non-key metadata is what listing shows
        conversation.updated_at = now
        if bump:
            conversation.revision += 1

    async def record_error(
        self,
        scope: Scope,
        run_id: str,
        error: RaygentError | Mapping[str, Any],
        messages: Sequence[Message] = (),
    ) -> None:
        ref, now = self.ref(scope), self.clock()
        record = encode_error(ref, run_id, error, check_messages(messages), now)
        with self._lock:
            conversation = self._writable(ref, scope, now)
            conversation.errors.append(record)
            del conversation.errors[:-MAX_ERRORS]
            self._touch(conversation, scope, now, bump=False)

    async def errors(self, scope: Scope) -> list[ErrorRecord]:
        ref = self.ref(scope)
        with self._lock:
            conversation = self._live(ref, self.clock())
            records = list(conversation.errors) if conversation else []
        return [decode_error(ref, raw) for raw in records]

    async def clear(self, scope: Scope) -> None:
        with self._lock:
            self._conversations.pop(self.ref(scope), None)

    async def list_conversations(
        self, limit: int = 100, user_id: str | None = None
    ) -> list[ConversationInfo]:
        since = self._live_since(self.clock())
        with self._lock:
            found = [
                ConversationInfo(
                    ref=ref,
                    session_id=c.scope.session_id,
                    user_id=c.scope.user_id,
                    metadata=dict(c.scope.metadata),
                    message_count=len(c.rows),
                    updated_at=to_datetime(c.updated_at),
                )
                for ref, c in self._conversations.items()
                if c.updated_at >= since and (user_id is None or c.scope.user_id == user_id)
            ]
        found.sort(key=lambda info: info.updated_at, reverse=True)
        return found[:limit]

    async def get_conversation(self, ref: str) -> list[StoredMessage]:
        check_ref(ref)
        with self._lock:
            conversation = self._live(ref, self.clock())
            rows = list(conversation.rows) if conversation else []
        messages = decode_json(ref, [r.payload for r in rows])
        return [
            StoredMessage(position, r.run_id, r.turn, to_datetime(r.created_at), message)
            for position, (r, message) in enumerate(zip(rows, messages, strict=True))
        ]

    async def snapshot(self, scope: Scope) -> Snapshot:
        ref = self.ref(scope)
        with self._lock:
            conversation = self._live(ref, self.clock())
            revision = conversation.revision if conversation else 0
            payloads = [r.payload for r in conversation.rows] if conversation else []
        return Snapshot(revision, decode_json(ref, payloads))

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
        with self._lock:
            conversation = self._live(ref, now)
            if (conversation.revision if conversation else 0) != revision:
                return "conflict"
            length = len(conversation.rows) if conversation else 0
            if not 0 <= count <= length:
                raise ValueError(f"count {count} is outside 0..{length}")
            conversation = self._writable(ref, scope, now)
            rows = [_Row(run_id, COMPACTED_TURN, now, p) for p in payloads]
            conversation.rows[:count] = rows
            delta = len(rows) - count
            conversation.batches = {
                k: shifted(first, count, delta) for k, first in conversation.batches.items()
            }
            self._touch(conversation, scope, now, bump=True)
        return "committed"

    async def prune(self, older_than: float | datetime | None = None) -> int:
        cutoff = self._prune_cutoff(older_than)
        if cutoff is None:
            return self._prune_cached(self.clock())
        with self._lock:
            old = [ref for ref, c in self._conversations.items() if c.updated_at < cutoff]
            for ref in old:
                del self._conversations[ref]
        return len(old) + await self._prune_runs(cutoff) + self._prune_cached(self.clock())

    # -- timings: the primitives of BaseTimingStore -------------------------------

    async def _add_timings(self, key: str, samples: list[TimingSample]) -> None:
        with self._lock:
            kept = self._timed.setdefault(key, [])
            kept.extend(samples)
            del kept[:-MAX_TIMINGS]

    async def _timings(self, key: str, limit: int) -> list[TimingSample]:
        with self._lock:
            return self._timed.get(key, [])[::-1][:limit]

    # -- cached values: the primitives of BaseCacheStore ----------------------------

    async def _get_cached(self, namespace: str, key: str, now: float) -> bytes | None:
        with self._lock:
            found = self._cached.get((namespace, key))
            if found is None:
                return None
            value, expires_at = found
            if expires_at is not None and expires_at <= now:
                del self._cached[(namespace, key)]
                return None
            return value

    async def _put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None, expires_at: float | None
    ) -> None:
        with self._lock:
            self._cached.pop((namespace, key), None)  # a rewrite counts as the newest
            self._cached[(namespace, key)] = (value, expires_at)
            if len(self._cached) > MAX_MEMORY_CACHED:
                del self._cached[next(iter(self._cached))]

    def _prune_cached(self, now: float) -> int:
        with self._lock:
            old = [k for k, (_, at) in self._cached.items() if at is not None and at <= now]
            for key in old:
                del self._cached[key]
        return len(old)

    # -- durable runs: the primitives of BaseRunStore -------------------------------

    def _live_run(self, ref: str, now: float) -> _Run | None:
        run = self._runs.get(ref)
        if run is not None and self._expired(run.updated_at, now):
            del self._runs[ref]
            return None
        return run

    def _held_run(self, ref: str, epoch: int, now: float) -> _Run:
        """The run if `epoch` holds it (under the lock), else the conflict."""
        run = self._live_run(ref, now)
        held(ref, None if run is None else run.state, epoch)
        return self._runs[ref]  # there: held() raised otherwise

    async def _start_run(self, ref: str, header: bytes, now: float) -> None:
        with self._lock:
            run = self._live_run(ref, now)
            if run is not None:
                raise run_conflict(ref, "exists", None, run.epoch)
            self._runs[ref] = _Run(FIRST_EPOCH, header, now)

    async def _append_run(self, ref: str, epoch: int, seq: int, entry: bytes, now: float) -> None:
        with self._lock:
            run = self._held_run(ref, epoch, now)
            stored = run.entries[seq] if seq < len(run.entries) else None
            if takes_entry(ref, run.state, epoch, seq, entry, stored):
                run.entries.append(entry)
                run.updated_at = now

    async def _claim_run(self, ref: str, epoch: int, now: float) -> int:
        with self._lock:
            run = self._held_run(ref, epoch, now)
            run.epoch += 1
            run.updated_at = now
            return run.epoch

    async def _load_run(self, ref: str) -> RunRecord | None:
        with self._lock:
            run = self._live_run(ref, self.clock())
            if run is None:
                return None
            return RunRecord(
                ref=ref,
                epoch=run.epoch,
                header=run.header,
                entries=list(run.entries),
                outcome=run.outcome,
                updated_at=to_datetime(run.updated_at),
            )

    async def _finish_run(
        self, ref: str, epoch: int, outcome: bytes, drop_entries: bool, now: float
    ) -> None:
        with self._lock:
            run = self._held_run(ref, epoch, now)
            run.outcome = outcome
            if drop_entries:
                run.entries = []
            run.updated_at = now

    async def _delete_run(self, ref: str) -> None:
        with self._lock:
            self._runs.pop(ref, None)

    async def _prune_runs(self, cutoff: float) -> int:
        with self._lock:
            old = [ref for ref, r in self._runs.items() if r.updated_at < cutoff]
            for ref in old:
                del self._runs[ref]
        return len(old)

    async def ensure(self) -> None:
        """Nothing to create."""

    async def aclose(self) -> None:
        """Nothing to close; the data stays."""


def _copy(conversation: _Conversation) -> _Conversation:
    return _Conversation(
        scope=conversation.scope,
        updated_at=conversation.updated_at,
        revision=conversation.revision,
        rows=list(conversation.rows),
        batches=dict(conversation.batches),
        errors=list(conversation.errors),
    )


def _copy_run(run: _Run) -> _Run:
    return _Run(run.epoch, run.header, run.updated_at, list(run.entries), run.outcome)
