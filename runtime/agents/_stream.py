"""`agent.stream(...)`: a run's events as an async iterator, and its result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from ..attachments import AttachmentLike, AttachmentPolicy
from ..messages import Message
from ..observers.events import Event
from ..observers.report import AgentResult
from ._options import RunOptions
from ._start import start_run
from ._state import RunState

__all__ = ["AgentStream", "Prepares"]


class Prepares(Protocol):
    """What a stream needs of its agent: a run prepared, and the call's attachments."""

    def _prepare(
        self,
        input: Any,
        options: RunOptions,
        *,
        streaming: bool,
        sink: Callable[[Event], None] | None,
    ) -> tuple[RunState, list[Message]]: ...

    def _attachments(
        self, options: RunOptions
    ) -> tuple[Sequence[AttachmentLike] | None, AttachmentPolicy]: ...


class AgentStream:
    """Async iterator of a run's events; `await .result` gives the AgentResult."""

    def __init__(
        self,
        agent: Prepares,
        input: Any,
        options: RunOptions,
        resume: Callable[[RunState], Awaitable[AgentResult]] | None = None,
    ) -> None:
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        state, user_input = agent._prepare(
            input, options, streaming=True, sink=self._queue.put_nowait
        )
        self._state = state
        attachments = agent._attachments(options)
        self._ended = False

        def running() -> Awaitable[AgentResult]:
            # Made when the task first runs: one cancelled before that leaves no coroutine.
            if resume is None:
                return start_run(state, user_input, *attachments)
            return resume(state)

        self._task = asyncio.ensure_future(self._run(running))
        # The end of the events, however the task ends (even cancelled before it ran).
        self._task.add_done_callback(lambda _: self._queue.put_nowait(None))

    async def _run(self, running: Callable[[], Awaitable[AgentResult]]) -> AgentResult:
        try:
            return await running()
        except asyncio.CancelledError:
            # The loop recorded the cancellation: the stream's result is the cancelled run.
            if self._state.result is None:
                raise
            return self._state.result

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        try:
            while not self._ended:
                event = await self._queue.get()
                if event is None:
                    self._ended = True  # a later pass ends at once instead of waiting
                    break
                yield event
        finally:
            if not self._task.done():
                # The consumer stopped listening: the run is cancelled, not left behind.
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)

    @property
    def result(self) -> asyncio.Future[AgentResult]:
        return self._task

    def abort(self, reason: str | None = None) -> None:
        """Cancel the run (same as its abort signal)."""
        self._state.abort.abort(reason)
