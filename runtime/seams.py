"""The seams between the agent loop and where work runs.

The loop never talks to Ray. It asks a `Backend` for model access and tool execution
(and, with the memory issue, session persistence). `LOCAL` runs everything in this
process; the Ray backend (raygent.actors) implements the same protocols with model
gateways and tool executors, and the same scenario tests run on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from ._endpoint_bound import EndpointBound
from .abort import AbortSignal
from .memory._sessions import LocalSessions, SessionPersistence
from .messages import Message
from .models.contract import Model, ModelOptions, ModelResponse, StreamChunk

if TYPE_CHECKING:
    from ._batch.engine import Deliver, Feed
    from ._batch.retry import Retry
    from .agents._agent import RunOptions
    from .tools import Tool, ToolContext

T = TypeVar("T")

__all__ = [
    "LOCAL",
    "Backend",
    "BatchExecution",
    "BatchPool",
    "LocalModelAccess",
    "LocalToolExecution",
    "ModelAccess",
    "PoolPlan",
    "closing_stream",
]


class ModelAccess(Protocol):
    """Sends requests to a model inside the provider's concurrency bound."""

    async def complete(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse: ...

    def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]: ...


class ToolExecution(Protocol):
    """Runs one tool call (the loop runs the calls of a trip concurrently)."""

    async def invoke(
        self, tool: Tool[..., Any], arguments: dict[str, Any] | None, ctx: ToolContext
    ) -> Any: ...


class LocalModelAccess:
    """Holds each endpoint's `max_concurrency` within this process: a request is sent
    while fewer than its model's bound are in flight to the endpoint (see
    `_endpoint_bound`).

    Models that declare no endpoint (test doubles) are not bounded.
    """

    def __init__(self) -> None:
        self._bounds: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[Any, EndpointBound]
        ] = weakref.WeakKeyDictionary()

    def __reduce__(self) -> tuple[Any, ...]:
        # Bounds are per process (and per event loop): a copy elsewhere starts afresh.
        return (type(self), ())

    def _bound(self, model: Model) -> tuple[EndpointBound, int] | None:
        limit = getattr(model, "max_concurrency", None)
        endpoint = getattr(model, "endpoint", None)
        if not limit or endpoint is None:
            return None
        per_loop = self._bounds.setdefault(asyncio.get_running_loop(), {})
        bound = per_loop.get(endpoint)
        if bound is None:
            bound = per_loop[endpoint] = EndpointBound()
        return bound, limit

    async def complete(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        model = _routed(model, self)
        bounded = self._bound(model)
        if bounded is None:
            return await model.complete(messages, options, signal=signal)
        bound, limit = bounded
        await bound.acquire(limit)
        try:
            return await model.complete(messages, options, signal=signal)
        finally:
            bound.release()

    async def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        model = _routed(model, self)
        bounded = self._bound(model)
        # aclosing: when this stream is closed early, the model's stream is closed now.
        async with contextlib.AsyncExitStack() as stack:
            if bounded is not None:
                bound, limit = bounded
                await bound.acquire(limit)
                stack.callback(bound.release)
            chunks = model.stream(messages, options, signal=signal)
            await stack.enter_async_context(closing_stream(chunks))
            async for chunk in chunks:
                yield chunk


@contextlib.asynccontextmanager
async def closing_stream(chunks: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close `chunks` (an async generator, typically) on leaving, however we leave: a
    run that stops mid-stream closes the stream, and its HTTP request, at once, not
    whenever the garbage collector finalises the generator."""
    try:
        yield chunks
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


def _routed(model: Model, access: ModelAccess) -> Model:
    """A model made of models (a fallback) sends each of its requests through `access`,
    so each inner model's bounds hold; any other model is used as it is."""
    through = getattr(model, "through", None)
    return cast("Model", through(access)) if callable(through) else model


class LocalToolExecution:
    """Runs tools in this process (sync tools in a worker thread)."""

    async def invoke(
        self, tool: Tool[..., Any], arguments: dict[str, Any] | None, ctx: ToolContext
    ) -> Any:
        return await tool.invoke(arguments, ctx)


class BatchPool(Protocol):
    """Keeps a batch's attempts in flight and hands each item over as it ends:
    `_batch.engine.InFlight` in this process, or a Ray backend's runner actors."""

    feed_error: BaseException | None
    deliver_error: BaseException | None
    failure: str | None  # why the pool stopped on its own, when it did

    @property
    def signal(self) -> AbortSignal: ...

    @property
    def retries(self) -> int: ...

    @property
    def retrying(self) -> int: ...

    def abort(self, reason: str | None = None) -> None: ...

    async def run(self, feed: Feed) -> None: ...


class BatchExecution(Protocol):
    """Where a batch's attempts run (the backend's `batches`; None runs them here)."""

    def check(self, executable: Any) -> None:
        """Raise TypeError, before anything runs, if `executable` cannot run there."""

    def pool(self, executable: Any, plan: PoolPlan) -> BatchPool: ...

    async def start(self, concurrency: int, runners: int | None = None) -> None:
        """Start now what a batch of this `concurrency` will run on (runner actors), so
        that the next batch begins at once."""


@dataclass(frozen=True)
class PoolPlan:
    """What a batch pool is asked to do (the options of `raygent.batch` that concern
    running, not reading or recording)."""

    run_options: RunOptions | None
    concurrency: int
    retry: Retry
    deliver: Deliver
    signal: AbortSignal | None
    grace: float
    runners: int | None


@dataclass(frozen=True)
class Backend:
    name: str
    models: ModelAccess
    tools: ToolExecution
    sessions: SessionPersistence = field(default_factory=LocalSessions)
    batches: BatchExecution | None = None

    def __reduce__(self) -> str | tuple[Any, ...]:
        # LOCAL travels by name: an agent built on it and shipped to a Ray worker runs
        # on that process's own in-process backend.
        if self is LOCAL:
            return "LOCAL"
        return (Backend, (self.name, self.models, self.tools, self.sessions, self.batches))


LOCAL = Backend("local", LocalModelAccess(), LocalToolExecution())
