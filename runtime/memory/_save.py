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
import os
import threading
import weakref
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .abort import AbortSignal, abortable
from .errors import RaygentError
from .messages import Message

if TYPE_CHECKING:
    from stores.protocol import CompactingStore, Scope, Snapshot, Store
    from stores.redis import RedisStore
    from stores.sqlite import SQLiteStore
else:
    from raygent.stores import CompactingStore, RedisStore, Scope, Snapshot, SQLiteStore, Store

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

    def __init__(
        self, memory: Memory, scope: Scope, persistence: SessionPersistence, run_id: str
    ) -> None:
        self.memory = memory
        self.scope = scope
        self.run_id = run_id
        self._persistence = persistence
        self._lease: SessionLease | None = None
        self._buffer: list[Message] = []
        self._turn = 0

    async def open(self, signal: AbortSignal | None = None) -> list[Message]:
        """Wait for this session's earlier runs (an abort of `signal` ends the wait with
        AbortedError); return the stored history."""
        acquiring = self._persistence.acquire(self.memory, self.scope, self.run_id)
        try:
            self._lease = await abortable(acquiring, signal)
        finally:
            acquiring.close()  # not awaited at all when the signal had fired already
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
        try:
            if self._lease is not None:
                await self._lease.record_error(error, new_messages)
            else:
                # The run never held the session (it could not start, or was aborted or
                # cancelled while it queued): its failure is still recorded.
                await self.memory.store.record_error(self.scope, self.run_id, error, new_messages)
        except Exception as exc:
            log.warning("record_error failed for session %s: %r", self.scope.session_id, exc)

    @property
    def lease(self) -> SessionLease | None:
        """The session held (None before `open` and after `close`)."""
        return self._lease

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
    """The embedded default: an SQLite file `raygent.db` in the working directory (the
    one of now: a later chdir does not move the sessions)."""
    return Memory(store=SQLiteStore(os.path.abspath("raygent.db")))


def scope_of(session_id: str, user_id: str | None, metadata: Any) -> Scope:
    return Scope(session_id, user_id, dict(metadata or {}))


class _SessionLock:
    """A FIFO lock on one conversation, for tasks of any event loop in this process.

    asyncio.Lock belongs to one loop: a run waiting on it from another thread's loop
    (`execute_sync` in two threads) is never woken. Here a release hands the lock to the
    first waiter and wakes it on its own loop.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False  # while held, waiters are handed the lock in arrival order
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._held:
                self._held = True
                return
            waiter = (loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter[1]
        except BaseException:
            with self._mutex:
                if waiter in self._waiters:  # still queued: just leave the queue
                    self._waiters.remove(waiter)
                    raise
            self.release()  # handed the lock while being cancelled: pass it on
            raise

    def release(self) -> None:
        with self._mutex:
            while self._waiters:
                loop, future = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_wake, future)
                except RuntimeError:  # the waiter's loop is closed: its run is gone
                    continue
                return
            self._held = False


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class LocalSessions:
    """Session persistence in this process: one lock per conversation (FIFO, so runs on
    a session go in arrival order, from any thread); the store's position check fences
    other writers (other processes, other `LocalSessions`)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: weakref.WeakValueDictionary[tuple[Hashable, str], _SessionLock] = (
            weakref.WeakValueDictionary()
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Locks serialise runs within one process; the store fences across processes.
        return (type(self), ())

    def _lock(self, key: tuple[Hashable, str]) -> _SessionLock:
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = _SessionLock()
            return lock

    async def acquire(self, memory: Memory, scope: Scope, run_id: str) -> SessionLease:
        lock = self._lock((_holder(memory.store), memory.store.ref(scope)))
        await lock.acquire()
        try:
            history = await memory.store.load(scope)
        except BaseException:
            lock.release()
            raise
        return _LocalLease(memory.store, scope, run_id, history, lock)


def _holder(store: Store) -> Hashable:
    """Where a store's data lives: two store objects on one SQLite file or one Redis
    prefix (two agents' default `raygent.db`, say) share this process's session locks."""
    if isinstance(store, SQLiteStore) and store.path != ":memory:":
        return ("sqlite", os.path.realpath(store.path))
    if isinstance(store, RedisStore):
        return ("redis", store.url, store.prefix)
    return ("object", id(store))


class _LocalLease:
    def __init__(
        self, store: Store, scope: Scope, run_id: str, history: list[Message], lock: _SessionLock
    ) -> None:
        self.store, self.scope, self.run_id = store, scope, run_id
        self.history = history
        self._position = len(history)
        self._lock: _SessionLock | None = lock
        # Compaction rewrites the stored history under this lease (raygent.compaction).
        self.compacts = isinstance(store, CompactingStore)

    async def append(self, turn: int, messages: Sequence[Message]) -> None:
        result = await self.store.append(
            self.scope, self.run_id, turn, messages, expected_position=self._position
        )
        self._position = result.first_position + result.count

    async def record_error(self, error: RaygentError, messages: Sequence[Message]) -> None:
        await self.store.record_error(self.scope, self.run_id, error, messages)

    async def snapshot(self) -> Snapshot:
        assert isinstance(self.store, CompactingStore)
        return await self.store.snapshot(self.scope)

    async def replace_prefix(
        self, revision: int, count: int, replacement: Sequence[Message]
    ) -> bool:
        """Replace the stored prefix if `revision` still holds; the position fence moves
        by what the replacement changed, so this run's next append still lines up."""
        assert isinstance(self.store, CompactingStore)
        outcome = await self.store.replace_prefix(
            self.scope, revision, count, replacement, self.run_id
        )
        if outcome == "committed":
            self._position += len(replacement) - count
        return outcome == "committed"

    async def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()
