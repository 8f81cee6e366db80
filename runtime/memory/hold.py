"""A durable run's hold on its session.

A durable run on a session takes a hold when it starts and keeps it until it ends: while
it waits for approval, or after its process died, the session keeps its place for it,
and other runs on the session wait (across processes: the hold is a record in the
session's store). Its resume, in any process, goes on under the same hold; abandoning
it, or its end, releases the hold.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from raygent.stores import RunConflictError, RunStore, Scope

from ..abort import AbortSignal, abortable
from ..redaction import logger as redacting_logger

if TYPE_CHECKING:
    from raygent.stores.protocol import Store

__all__ = ["SessionHold"]

log = redacting_logger("raygent.memory")

HOLD_SUFFIX = "#hold"  # never part of a run id raygent makes
FIRST_WAIT, LONGEST_WAIT = 0.05, 1.0


class SessionHold:
    """The hold on one session, as seen by the run `run_id`."""

    def __init__(self, store: Store, scope: Scope, run_id: str) -> None:
        self.store: RunStore | None = store if isinstance(store, RunStore) else None
        self.scope = Scope(scope.session_id + HOLD_SUFFIX, scope.user_id, scope.metadata)
        self.run_id = run_id
        self._mine = run_id.encode()
        self._taken = False  # this process wrote the hold (its release needs no read)

    async def holder(self) -> str | None:
        """The run that holds the session, if another run does."""
        if self.store is None:
            return None
        record = await self.store.load_run(self.scope)
        if record is None or record.outcome is not None or record.header == self._mine:
            return None
        return record.header.decode()

    async def wait(self, signal: AbortSignal | None) -> None:
        """Until no other run holds the session (an abort of `signal` ends the wait)."""
        delay, holder = FIRST_WAIT, await self.holder()
        if holder is not None:
            log.info(
                "run %s waits: session %s is held by durable run %s",
                self.run_id,
                self.scope.session_id.removesuffix(HOLD_SUFFIX),
                holder,
            )
        while holder is not None:
            # No store can say when a record goes away: ask again, less and less often.
            await abortable(asyncio.sleep(delay), signal)
            delay = min(delay * 2, LONGEST_WAIT)
            holder = await self.holder()

    async def take(self) -> None:
        """Hold the session for this run (again, for its resume)."""
        if self.store is None:
            return
        try:
            await self.store.start_run(self.scope, self._mine)
        except RunConflictError:
            if await self.holder() is not None:
                raise
        self._taken = True

    async def release(self) -> None:
        if self.store is None:
            return
        if not self._taken:
            record = await self.store.load_run(self.scope)
            if record is None or record.header != self._mine:
                return
        await self.store.delete_run(self.scope)
        self._taken = False
