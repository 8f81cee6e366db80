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

import contextlib
import os
from collections.abc import Mapping, Sequence

from raygent.stores import Scope, SQLiteStore

from ..abort import AbortSignal, abortable
from ..errors import RaygentError
from ..messages import Message
from ..redaction import logger as redacting_logger
from ._memory import Memory, SavePolicy
from ._sessions import SessionLease, SessionPersistence
from .hold import SessionHold

__all__ = ["Memory", "RunSaver", "SavePolicy"]

log = redacting_logger("raygent.memory")


class RunSaver:
    """Applies the save policy of one run to its lease."""

    def __init__(
        self,
        memory: Memory,
        scope: Scope,
        persistence: SessionPersistence,
        run_id: str,
        *,
        first_turn: int = 0,
    ) -> None:
        self.memory = memory
        self.scope = scope
        self.run_id = run_id
        self._persistence = persistence
        self._lease: SessionLease | None = None
        self._buffer: list[Message] = []
        # A run's appends are numbered (the store's idempotency key is run and turn); a
        # retry of a run numbers its own after its earlier attempts' (`first_turn`).
        self._turn = first_turn
        self.hold = SessionHold(memory.store, scope, run_id)

    async def open(self, signal: AbortSignal | None = None) -> list[Message]:
        """Wait for this session's earlier runs, and for a durable run that holds the
        session (an abort of `signal` ends the wait with AbortedError); return the
        stored history."""
        while True:
            acquiring = self._persistence.acquire(self.memory, self.scope, self.run_id)
            try:
                self._lease = await abortable(acquiring, signal)
            finally:
                acquiring.close()  # not awaited at all when the signal had fired already
            if await self.hold.holder() is None:
                return list(self._lease.history)
            # A durable run that has not ended holds the session: let it through first.
            await self.close()
            await self.hold.wait(signal)

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

    def remark(self, marked: Mapping[int, Message]) -> None:
        """Messages handed over but not saved yet, changed in the run since (compaction
        marks kept turns): `marked` maps the id of each old one to its new one."""
        self._buffer[:] = [marked.get(id(m), m) for m in self._buffer]

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
    def position(self) -> tuple[int, int]:
        """(the next turn number, how many handed-over messages wait in the buffer)."""
        return self._turn, len(self._buffer)

    def restore(self, turn: int, buffer: Sequence[Message]) -> None:
        """Stand where a durable run's saver stood (`position` and its buffer)."""
        self._turn = turn
        self._buffer = list(buffer)

    @property
    def turns(self) -> int:
        """The next append's number: every append tried so far has a lower one."""
        return self._turn

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
            # Numbered before it is tried: one that failed may still have committed.
            turn, self._turn = self._turn, self._turn + 1
            await self._lease.append(turn, messages)


def default_memory() -> Memory:
    """The embedded default: an SQLite file `raygent.db` in the working directory (the
    one of now: a later chdir does not move the sessions)."""
    return Memory(store=SQLiteStore(os.path.abspath("raygent.db")))
