"""The seams implemented in this process: `LOCAL`, the backend of `RAYGENT_BACKEND=local`
and of everything a Ray worker runs inside itself."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..abort import AbortSignal
from ..messages import Message
from ..models.contract import Model, ModelOptions, ModelResponse, StreamChunk
from ._endpoint_bound import EndpointBound
from .contract import Backend, ModelAccess

if TYPE_CHECKING:
    from ..tools import Tool, ToolContext

T = TypeVar("T")

__all__ = ["LOCAL", "LocalModelAccess", "LocalToolExecution", "closing_stream", "routed"]


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
        model = routed(model, self)
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
        model = routed(model, self)
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


def routed(model: Model, access: ModelAccess) -> Model:
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


class _LocalBackend(Backend):
    def __reduce__(self) -> str:
        # LOCAL travels by name: an agent built on it and shipped to a Ray worker runs
        # on that process's own in-process backend.
        return "LOCAL"


LOCAL: Backend = _LocalBackend("local", LocalModelAccess(), LocalToolExecution())
