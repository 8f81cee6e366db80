"""Session persistence: one run's hold on a session (`SessionLease`), the seam that
hands it out (`SessionPersistence`), and its in-process implementation
(`LocalSessions`: a FIFO lock per conversation). The Ray backend's session hosts
(raygent.actors) implement the same seam.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from raygent.stores import CompactingStore, Scope, Snapshot, SQLiteStore, Store

from ..errors import RaygentError
from ..messages import Message
from ._fence import PositionFence

if TYPE_CHECKING:
    from ._memory import Memory

__all__ = ["LocalSessions", "SessionLease", "SessionPersistence"]


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
    # RedisStore is imported on first use (raygent.stores): a process that never made
    # one holds none.
    redis = sys.modules.get("raygent.stores.redis")
    if redis is not None and isinstance(store, redis.RedisStore):
        return ("redis", store.url, store.prefix)
    return ("object", id(store))


class _LocalLease:
    def __init__(
        self, store: Store, scope: Scope, run_id: str, history: list[Message], lock: _SessionLock
    ) -> None:
        self.store, self.scope, self.run_id = store, scope, run_id
        self.history = history
        self._fence = PositionFence(store, scope, run_id, len(history))
        self._lock: _SessionLock | None = lock
        # Compaction rewrites the stored history under this lease (raygent.compaction).
        self.compacts = isinstance(store, CompactingStore)

    async def append(self, turn: int, messages: Sequence[Message]) -> None:
        await self._fence.append(turn, messages)

    async def record_error(self, error: RaygentError, messages: Sequence[Message]) -> None:
        await self.store.record_error(self.scope, self.run_id, error, messages)

    async def snapshot(self) -> Snapshot:
        return await self._fence.compacting().snapshot(self.scope)

    async def replace_prefix(
        self, revision: int, count: int, replacement: Sequence[Message]
    ) -> bool:
        """Replace the stored prefix if `revision` still holds; the position fence moves
        by what the replacement changed, so this run's next append still lines up."""
        return await self._fence.replace_prefix(revision, count, replacement)

    async def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()
