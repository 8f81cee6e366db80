"""Sessions: a stored conversation an agent runs in, one run after another."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from typing_extensions import Unpack

from .._message_input import MessageLike
from .._sync import run_sync
from ..durable.scope import scope_of
from ..memory import Memory
from ..messages import ContentPart, Message
from ..observers.report import AgentResult
from ..seams.contract import Backend
from ..seams.registry import current_backend
from ._options import RunOptions
from ._stream import AgentStream

__all__ = ["Session", "SessionAgent"]


class SessionAgent(Protocol):
    """What a session needs of its agent (`Agent`): its runs, its memory, its backend."""

    name: str
    memory: Memory | None
    backend: Backend | None

    async def execute(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentResult: ...

    def stream(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentStream: ...


class Session:
    """`agent.session(session_id, user_id=None, metadata=None)`.

    Each run loads the stored history, runs, and saves by the agent's save policy. Runs
    on one session are serialised in arrival order (the second sees what the first
    stored), across tasks here and, on the Ray backend, across processes.
    """

    def __init__(
        self,
        agent: SessionAgent,
        session_id: str,
        *,
        user_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        assert agent.memory is not None
        self.agent = agent
        self.session_id = session_id
        self.user_id = user_id
        self.metadata = dict(metadata or {})
        self.scope = scope_of(session_id, user_id, self.metadata)

    def __repr__(self) -> str:
        return f"Session(agent={self.agent.name!r}, session_id={self.session_id!r})"

    def _options(self, options: RunOptions) -> RunOptions:
        merged: RunOptions = {**options}
        merged["session_id"] = self.session_id
        merged["user_id"] = self.user_id
        merged["metadata"] = self.metadata
        return merged

    async def execute(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentResult:
        """Run in this session (never raises, like `Agent.execute`)."""
        return await self.agent.execute(input, **self._options(options))

    def execute_sync(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentResult:
        """`execute` from synchronous code, inside a running event loop too (like
        `Agent.execute_sync`)."""
        return run_sync(lambda: self.execute(input, **options))

    def stream(
        self,
        input: str | MessageLike | Sequence[ContentPart | MessageLike],
        **options: Unpack[RunOptions],
    ) -> AgentStream:
        """Run in this session, yielding events (like `Agent.stream`)."""
        return self.agent.stream(input, **self._options(options))

    async def history(self) -> list[Message]:
        """The stored conversation."""
        assert self.agent.memory is not None
        return await self.agent.memory.store.load(self.scope)

    async def errors(self) -> list[Any]:
        """Failures recorded for this session (never part of the history)."""
        assert self.agent.memory is not None
        return list(await self.agent.memory.store.errors(self.scope))

    async def clear(self) -> None:
        """Delete the stored conversation and its errors (and any cached copy of it).

        It takes its turn like a run: a run on the session in progress finishes first
        (its saves are not refused halfway), and runs that arrive later start afresh."""
        memory = self.agent.memory
        assert memory is not None
        backend = self.agent.backend or current_backend()
        lease = await backend.sessions.acquire(memory, self.scope, f"clear-{uuid.uuid4().hex}")
        try:
            await memory.store.clear(self.scope)
            forget = getattr(backend.sessions, "forget", None)
            if forget is not None:
                # Session hosts cache conversations; a clear around them drops the copy.
                await forget(memory, self.scope)
        finally:
            await lease.release()
