"""A run's lease on a session served by a host: writes go straight to the store.

The host grants the lease (the run's turn on the conversation, FIFO across drivers) and
the history it starts from: one call. The run then writes each batch of its save policy
to the store itself, fenced by the position it knows (`expected_position`, kept by the
core's `PositionFence`, as for a local lease): a writer that went around the lease, or
a run whose turn was taken after its host restarted, finds the position moved and
fails typed; the history never forks. At the end the run hands the lease back with
what it appended, so the host's cached history stays warm: one call. Long runs renew
the lease meanwhile (every third of `lease_timeout`).

The lease is valid by this process's clock until `lease_timeout` after the call that
last renewed it was sent (so before the host would expire it); a write after that is
refused here with `LeaseExpiredError`, without touching the store. A grant may have
waited at the host for the runs ahead of it, so its own time is not known here: it
counts two thirds of `lease_timeout` from when it arrived, until the first renewal.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Sequence
from typing import Any

from ray.exceptions import RayActorError, RayTaskError

from raygent.backend import Message, PositionFence, RaygentError
from raygent.stores import CompactingStore, Scope, Snapshot, Store

from .._ray import spawn
from .wire import LeaseExpiredError, SessionHostError, checked, encode_messages

__all__ = ["HostLease", "unavailable"]


class HostLease:
    """`SessionLease` (and the compaction calls) for a conversation served by a host."""

    def __init__(
        self,
        handle: Any,
        host: str,
        lease_id: str,
        history: list[Message],
        store: Store,
        scope: Scope,
        run_id: str,
        lock: asyncio.Lock,
        timeout: float,
        received: float,
    ) -> None:
        self.history = history
        self.lease_id = lease_id
        self._handle, self._host = handle, host
        self._store, self._scope, self._run_id = store, scope, run_id
        self._fence = PositionFence(store, scope, run_id, len(history))
        self._lock: asyncio.Lock | None = lock
        self._timeout = timeout
        self._deadline = received + timeout * 2 / 3
        self._appended: list[Message] = []
        self._changed = False  # the host's copy can no longer be extended: it forgets it
        self._keeper: asyncio.Task[None] | None = None
        self.compacts = isinstance(store, CompactingStore)

    def keep_alive(self) -> None:
        """Renew the lease while the run works. It stops at release, or when the lease
        is dropped unreleased (then the host lease expires)."""
        self._keeper = spawn(_renew(self._handle, self.lease_id, self._timeout, weakref.ref(self)))

    def renewed(self, sent: float) -> None:
        self._deadline = max(self._deadline, sent + self._timeout)

    def _check(self) -> None:
        if time.monotonic() >= self._deadline:
            raise LeaseExpiredError(
                "this run's session lease expired (not renewed within its lease_timeout); "
                "another run may have gone ahead, so its later writes are refused",
                lease_id=self.lease_id,
                host=self._host,
            )

    async def append(self, turn: int, messages: Sequence[Message]) -> None:
        batch = checked(messages)
        self._check()
        position = self._fence.position
        try:
            result = await self._fence.append(turn, batch)
        except BaseException:
            self._changed = True  # a conflict, or an outcome unknown: the host reloads
            raise
        if result.duplicate or result.first_position != position:
            self._changed = True
        if not result.duplicate:  # stored before (a resumed run's replay): not new here
            self._appended.extend(batch)

    async def record_error(self, error: RaygentError, messages: Sequence[Message]) -> None:
        # No fence: an error record is kept apart from history, whoever holds the turn.
        await self._store.record_error(self._scope, self._run_id, error, messages)

    async def snapshot(self) -> Snapshot:
        return await self._fence.compacting().snapshot(self._scope)

    async def replace_prefix(
        self, revision: int, count: int, replacement: Sequence[Message]
    ) -> bool:
        """Replace the stored prefix if `revision` still holds (False: a conflict); the
        fence moves by what the replacement changed, so the next append lines up."""
        self._check()
        self._changed = True  # the host's cached history is not what is stored now
        return await self._fence.replace_prefix(revision, count, checked(replacement))

    async def release(self) -> None:
        """Hand the lease back with what this run appended (the host extends its copy);
        the next run on the conversation goes ahead."""
        if self._lock is None:
            return
        lock, self._lock = self._lock, None
        if self._keeper is not None:
            self._keeper.cancel()
        appended = None if self._changed else encode_messages(self._appended)
        try:
            await self._handle.release.remote(self.lease_id, appended, self._fence.position)
        except (RayActorError, RayTaskError):
            pass  # the lease died with its host; what was written is stored
        finally:
            lock.release()


async def _renew(handle: Any, lease_id: str, every: float, lease: weakref.ref[HostLease]) -> None:
    while True:
        await asyncio.sleep(every / 3)
        if lease() is None:
            return
        sent = time.monotonic()
        try:
            refused = await handle.renew.remote(lease_id)
        except Exception:
            return  # the host is gone or restarting: the lease lapses by its deadline
        held = lease()
        if refused is not None or held is None:
            return
        held.renewed(sent)


def unavailable(name: str, exc: BaseException, **details: Any) -> SessionHostError:
    return SessionHostError(
        f"session host {name} is unavailable ({type(exc).__name__})", host=name, **details
    )
