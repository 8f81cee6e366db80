"""Memory: where a session's conversation is kept, and when a run saves to it.

`Memory(store=..., save_policy=...)` on an agent. The save policy decides which of a
run's messages reach the store, and when:

- `message`: the accepted input before the model loop; each assistant tool-call message
  together with its tool results once the tools have run; the final answer.
- `turn`: a whole model-and-tool turn (the prompt with the first) in one append; a half
  turn is never stored; earlier turns survive a later failure.
- `run`: everything in one append after the run succeeds; nothing on failure or cancel.

Every failure, cancellation included, is recorded with `record_error` apart from the
history. Saving never rolls back tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .errors import RaygentError
from .messages import Message

if TYPE_CHECKING:
    from stores.protocol import Scope, Store
    from stores.sqlite import SQLiteStore
else:
    from raygent.stores import Scope, SQLiteStore, Store

__all__ = [
    "LocalSessions",
    "Memory",
    "RunSaver",
    "SavePolicy",
    "SessionLease",
    "SessionPersistence",
]

log = logging.getLogger("raygent.memory")

SavePolicy = Literal["message", "turn", "run"]


@dataclass(frozen=True)
class Memory:
    """A store and a save policy (default `message`)."""

    store: Store
    save_policy: SavePolicy = "message"

    def __post_init__(self) -> None:
        if self.save_policy not in ("message", "turn", "run"):
            raise ValueError(f"save_policy must be message, turn or run, not {self.save_policy!r}")


class SessionLease(Protocol):
    """One run's hold on a session: the history it starts from, and its writes.

    Runs on one session hold the lease one after another, in arrival order.
    """

    @property
    def history(self) -> list[Message]: ...

    async def append(self, turn: int, messages: Sequence[Message]) -> None: ...

    async def record_error(self, error: RaygentError, messages: Sequence[Message]) -> None: ...

    async def release(self) -> None: ...


class SessionPersistence(Protocol):
    """The seam: local (a lock per session in this process) or Ray (session hosts)."""

    async def acquire(self, memory: Memory, scope: Scope, run_id: str) -> SessionLease: ...


class RunSaver:
    """Applies the save policy of one run to its lease."""

    def __init__(self, memory: Memory, scope: Scope, persistence: SessionPersistence) -> None:
        self.memory = memory
        self.scope = scope
        self._persistence = persistence
        self._lease: SessionLease | None = None
        self._buffer: list[Message] = []
        self._turn = 0

    async def open(self, run_id: str) -> list[Message]:
        """Wait for this session's earlier runs; return the stored history."""
        self._lease = await self._persistence.acquire(self.memory, self.scope, run_id)
        return list(self._lease.history)

    async def accepted(self, messages: Sequence[Message]) -> None:
        """The run's input, before the first model trip."""
        if self.memory.save_policy == "message":
            await self._append(messages)
        else:
            self._buffer.extend(messages)

    async def turn_done(self, messages: Sequence[Message]) -> None:
        """Messages of a completed step: a tool turn, a repair, a continuation, the answer."""
        if not messages:
            return
        if self.memory.save_policy == "run":
            self._buffer.extend(messages)
            return
        batch = [*self._buffer, *messages]
        self._buffer.clear()
        await self._append(batch)

    async def succeeded(self) -> None:
        if self._buffer:
            batch, self._buffer = self._buffer, []
            await self._append(batch)

    async def failed(self, error: RaygentError, new_messages: Sequence[Message]) -> None:
        """Record the failure; a failing record never replaces the run's own error."""
        self._buffer.clear()
        if self._lease is None:
            return
        try:
            await self._lease.record_error(error, new_messages)
        except Exception as exc:
            log.warning("record_error failed for session %s: %r", self.scope.session_id, exc)

    async def close(self) -> None:
        if self._lease is not None:
            lease, self._lease = self._lease, None
            with contextlib.suppress(Exception):
                await lease.release()

    async def _append(self, messages: Sequence[Message]) -> None:
        assert self._lease is not None, "open() first"
        if messages:
            await self._lease.append(self._turn, messages)
            self._turn += 1


def default_memory() -> Memory:
    """The embedded default: an SQLite file `raygent.db` in the working directory."""
    return Memory(store=SQLiteStore("raygent.db"))


def scope_of(session_id: str, user_id: str | None, metadata: Any) -> Scope:
    return Scope(session_id, user_id, dict(metadata or {}))


class LocalSessions:
    """Session persistence in this process: one lock per conversation (FIFO, so runs on
    a session go in arrival order); the store's position check fences other writers."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def acquire(self, memory: Memory, scope: Scope, run_id: str) -> SessionLease:
        key = (id(memory.store), memory.store.ref(scope))
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        await lock.acquire()
        try:
            history = await memory.store.load(scope)
        except BaseException:
            lock.release()
            raise
        return _LocalLease(memory.store, scope, run_id, history, lock)


class _LocalLease:
    def __init__(
        self, store: Store, scope: Scope, run_id: str, history: list[Message], lock: asyncio.Lock
    ) -> None:
        self.store, self.scope, self.run_id = store, scope, run_id
        self.history = history
        self._position = len(history)
        self._lock: asyncio.Lock | None = lock

    async def append(self, turn: int, messages: Sequence[Message]) -> None:
        result = await self.store.append(
            self.scope, self.run_id, turn, messages, expected_position=self._position
        )
        self._position = result.first_position + result.count

    async def record_error(self, error: RaygentError, messages: Sequence[Message]) -> None:
        await self.store.record_error(self.scope, self.run_id, error, messages)

    async def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()
