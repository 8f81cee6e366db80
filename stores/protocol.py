"""The store contract: scopes, result values, store errors and the `Store` protocol.

Every store (in-memory, SQLite, Redis, PostgreSQL) implements `Store`, `CompactingStore`,
`RunStore`, `CacheStore` and `TimingStore`, and the conformance suite in tests/stores runs the
same tests against each of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from raygent.errors import RaygentError
from raygent.messages import Message

__all__ = [
    "AppendResult",
    "CacheStore",
    "CompactingStore",
    "ConversationInfo",
    "ErrorRecord",
    "PositionConflictError",
    "RunConflictError",
    "RunRecord",
    "RunStore",
    "Scope",
    "Snapshot",
    "Store",
    "StoreDataError",
    "StoreError",
    "StoreUnavailableError",
    "StoredMessage",
    "TimingSample",
    "TimingStore",
]


@dataclass(frozen=True)
class Scope:
    """Whose conversation: a session, optionally a user, and free-form metadata.

    Only the metadata keys a store is constructed with (`key_metadata=("tenant",)`) are
    part of the storage key; two scopes that differ in one of them never see each
    other's data. Other metadata is stored for listing but does not select a
    conversation.
    """

    session_id: str
    user_id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str) or not self.session_id:
            raise ValueError("session_id must be a non-empty string")
        if self.user_id is not None and not isinstance(self.user_id, str):
            raise ValueError("user_id must be a string or None")
        metadata = dict(self.metadata)
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError("scope metadata maps strings to strings")
        # A private copy: the caller's dict changing later must not move the key.
        object.__setattr__(self, "metadata", metadata)

    def __hash__(self) -> int:
        return hash((self.session_id, self.user_id, tuple(sorted(self.metadata.items()))))


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a batch landed. `duplicate`: a retry of a committed batch; nothing written."""

    first_position: int
    count: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """A failure recorded beside (never inside) a conversation's history."""

    run_id: str
    error: dict[str, Any]
    messages: list[Message]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One conversation as listed for inspection; `ref` opens it with get_conversation."""

    ref: str
    session_id: str
    user_id: str | None
    metadata: dict[str, str]
    message_count: int
    updated_at: datetime

    @property
    def scope(self) -> Scope:
        return Scope(self.session_id, self.user_id, self.metadata)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message with where and when it was written. Compacted messages carry turn -1."""

    position: int
    run_id: str
    turn: int
    created_at: datetime
    message: Message


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A conversation at one revision (every append and replace bumps the revision)."""

    revision: int
    messages: list[Message]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A durable run as stored: its header, its entries in order, who holds it, how it ended.

    The payloads are opaque bytes to the store (the agent loop encodes them). `epoch` is
    the fencing token: every `claim_run` bumps it, and a writer holding an older epoch can
    no longer write. `outcome` is set by `finish_run` (None while the run is open).
    """

    ref: str
    epoch: int
    header: bytes
    entries: list[bytes]
    outcome: bytes | None
    updated_at: datetime


class StoreError(RaygentError):
    """Base of the errors a store raises."""

    code = "STORE"
    category = "store"


class PositionConflictError(StoreError):
    """The conversation is not as long as the writer believed; nothing was written.

    details: ref, expected, actual. Reload (or take `actual`) and retry: this is the
    fencing that keeps two writers from forking one history.
    """

    code = "STORE_POSITION_CONFLICT"
    default_retryable = True

    @property
    def expected(self) -> int:
        return int(self.details["expected"])

    @property
    def actual(self) -> int:
        return int(self.details["actual"])


class RunConflictError(StoreError):
    """A durable run's write or claim lost: another writer holds the run (its epoch moved
    on), the entry's sequence number is not the next one, or the run already exists.
    Nothing was written.

    details: ref, reason ("epoch", "sequence", "exists", "missing", "finished"), expected,
    actual.
    """

    code = "STORE_RUN_CONFLICT"


class StoreDataError(StoreError):
    """Stored data does not decode or validate, or a message cannot be encoded.

    details: ref, position (None when not about one message), reason.
    """

    code = "STORE_DATA"


class StoreUnavailableError(StoreError):
    """The backing service could not be reached or stayed locked; a retry may succeed."""

    code = "STORE_UNAVAILABLE"
    default_retryable = True


@runtime_checkable
class Store(Protocol):
    """Where conversations live. Every method is safe to call concurrently."""

    def ref(self, scope: Scope) -> str:
        """The storage key of `scope` (what ConversationInfo.ref holds)."""
        ...

    async def load(self, scope: Scope) -> list[Message]:
        """The conversation in position order; recorded errors are never part of it."""
        ...

    async def append(
        self,
        scope: Scope,
        run_id: str,
        turn: int,
        messages: Sequence[Message],
        expected_position: int | None = None,
    ) -> AppendResult:
        """Append one batch atomically at contiguous positions.

        Raises PositionConflictError (writing nothing) when `expected_position` is given
        and differs from the conversation's length. A retry of a committed batch (same
        run_id, turn and messages) writes nothing and returns the original positions,
        so `turn` is the writer's sequence number: give each append of a run its own.
        The last 256 batches of a conversation are remembered (SQLite trims every 32
        writes, so it may remember a few more).
        """
        ...

    async def record_error(
        self,
        scope: Scope,
        run_id: str,
        error: RaygentError | Mapping[str, Any],
        messages: Sequence[Message] = (),
    ) -> None:
        """Keep a failure and the messages it concerned, apart from history."""
        ...

    async def errors(self, scope: Scope) -> list[ErrorRecord]:
        """Recorded errors, oldest first."""
        ...

    async def clear(self, scope: Scope) -> None:
        """Remove the conversation, its errors and its idempotency records."""
        ...

    async def list_conversations(
        self, limit: int = 100, user_id: str | None = None
    ) -> list[ConversationInfo]:
        """Conversations, most recently written first."""
        ...

    async def get_conversation(self, ref: str) -> list[StoredMessage]:
        """A conversation's messages with their positions, runs, turns and times."""
        ...

    async def prune(self, older_than: float | datetime | None = None) -> int:
        """Remove conversations last written before `older_than` (epoch seconds or an
        aware datetime; None: the ones the store's ttl has expired). Returns how many."""
        ...

    async def ensure(self) -> None:
        """Create or check the schema (a no-op where there is none)."""
        ...

    async def aclose(self) -> None:
        """Close connections; the store reconnects if used again."""
        ...


@runtime_checkable
class CompactingStore(Store, Protocol):
    """A store that can replace a conversation's prefix (for compaction)."""

    async def snapshot(self, scope: Scope) -> Snapshot:
        """The messages and the revision they belong to, read together."""
        ...

    async def replace_prefix(
        self,
        scope: Scope,
        revision: int,
        count: int,
        replacement: Sequence[Message],
        run_id: str,
    ) -> Literal["committed", "conflict"]:
        """Replace the first `count` messages if the revision is still `revision`."""
        ...


@runtime_checkable
class RunStore(Protocol):
    """Where durable runs keep their state, beside the conversations and under the same
    keys: `scope.session_id` is the run id, and the store's `key_metadata` isolates
    tenants as it does for conversations. The store's ttl and `prune()` cover runs too
    (a run's age is that of its last write). Every method is atomic."""

    async def start_run(self, scope: Scope, header: bytes) -> int:
        """Create the run with its header and no entries; returns its first epoch (1).
        Raises RunConflictError(reason="exists") when the run is already stored."""
        ...

    async def append_run(self, scope: Scope, epoch: int, seq: int, entry: bytes) -> None:
        """Append `entry` as entry number `seq` (0-based).

        Raises RunConflictError, writing nothing, when `epoch` is not the run's current
        epoch ("epoch"), the run is missing ("missing") or finished, or `seq` is not the
        number of entries stored ("sequence") -- except that re-sending the entry already
        stored at `seq` (same bytes) is a no-op, so a writer may retry an append.
        """
        ...

    async def claim_run(self, scope: Scope, epoch: int) -> int:
        """Take the run over: if its epoch is still `epoch`, set it to epoch + 1 and return
        that. Of two claims with the same epoch exactly one wins; the other raises
        RunConflictError("epoch"). A missing run raises RunConflictError("missing")."""
        ...

    async def load_run(self, scope: Scope) -> RunRecord | None:
        """The run's header, entries, epoch and outcome, read together; None if absent
        (or expired)."""
        ...

    async def finish_run(
        self, scope: Scope, epoch: int, outcome: bytes, *, drop_entries: bool = False
    ) -> None:
        """Record how the run ended (fenced by `epoch` like append_run; finishing again
        replaces the outcome). `drop_entries=True` deletes the entries and keeps only the
        header and outcome (what a repeated resume needs to answer)."""
        ...

    async def delete_run(self, scope: Scope) -> None:
        """Remove the run entirely (a no-op when absent)."""
        ...


@runtime_checkable
class CacheStore(Protocol):
    """Cached values: opaque bytes under (namespace, key), each with its own time to live
    (what `raygent.ResponseCache` keeps model replies in). Apart from conversations and
    runs; a store's own `ttl` does not apply to them. A value past its ttl is never
    returned (Redis drops it on its own clock; the others compare with the store's clock
    and `prune()` removes it)."""

    async def get_cached(self, namespace: str, key: str) -> bytes | None:
        """The value stored under (namespace, key); None when absent or expired."""
        ...

    async def put_cached(
        self, namespace: str, key: str, value: bytes, ttl: float | None = None
    ) -> None:
        """Store `value` (replacing any), expiring `ttl` seconds from now (None: never)."""
        ...


@dataclass(frozen=True, slots=True)
class TimingSample:
    """How long one way of sending a model request took, once: what a job routed by its
    deadline learns from (`raygent.batch(..., deadline=)`).

    `way`: "batch" (a provider batch: `seconds` from its submission to its end), or an
    online tier, "flex", "standard" or "priority" (one request's latency). `ok`: False
    for a batch that did not end in time (stalled, expired, or cancelled for being late:
    it took *at least* `seconds`) or a request refused for capacity. `at`: when it was
    seen (epoch seconds)."""

    way: str
    seconds: float
    ok: bool = True
    at: float = 0.0


@runtime_checkable
class TimingStore(Protocol):
    """Recent timings of the ways a model is reached (provider batch, flex, standard,
    priority), by a key naming the endpoint and model; every process and driver that
    shares the store learns from the same history. The newest `MAX_TIMINGS` (1,000)
    samples of a key are kept; a store's `ttl` and `prune()` do not touch them."""

    async def add_timings(self, key: str, samples: Sequence[TimingSample]) -> None:
        """Add `samples` (in the order seen) to `key`'s history."""
        ...

    async def timings(self, key: str, limit: int = 1000) -> list[TimingSample]:
        """`key`'s newest `limit` samples, newest first (empty: no history)."""
        ...
