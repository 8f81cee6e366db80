"""The seams implemented in this process: `LOCAL`, the backend of `RAYGENT_BACKEND=local`
and of everything a Ray worker runs inside itself."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..abort import AbortSignal
from ..errors import RateLimitError
from ..messages import Message
from ..models.contract import Done, Model, ModelOptions, ModelResponse, StreamChunk
from ._endpoint_bound import EndpointBound
from .contract import Backend, ModelAccess
from .rated import HeldRate, LocalRates, Ticket

if TYPE_CHECKING:
    from ..tools import Tool, ToolContext

T = TypeVar("T")

__all__ = ["LOCAL", "LocalModelAccess", "LocalToolExecution", "closing_stream", "routed"]


class LocalModelAccess:
    """Holds each endpoint's `max_concurrency` and each model key's rate within this
    process: a request is sent while fewer than its model's bound are in flight to the
    endpoint (see `_endpoint_bound`), once its rate lets it (see `rated`).

    Models that declare no endpoint (test doubles) are not bounded.
    """

    def __init__(self) -> None:
        self._bounds: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[Any, EndpointBound]
        ] = weakref.WeakKeyDictionary()
        self._rates = LocalRates()

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
        held = self._rates.held(model)
        if held is not None and not held.pacer.idle:
            async with self._paced(held, bounded, model, messages, options, signal) as ticket:
                response = await model.complete(messages, options, signal=signal)
                ticket.answered(response)
                return response
        if held is not None:
            held.went()
        if bounded is not None:
            await bounded[0].acquire(bounded[1])
        try:
            response = await model.complete(messages, options, signal=signal)
        except RateLimitError as exc:
            if held is not None:  # the key's first 429: it is paced from now on
                held.throttled(exc, bounded[0].in_flight if bounded else 1)
            raise
        finally:
            if bounded is not None:
                bounded[0].release()
        if held is not None and response.rate is not None:
            held.learn(response)
        return response

    async def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        model = routed(model, self)
        bounded = self._bound(model)
        held = self._rates.held(model)
        # aclosing: when this stream is closed early, the model's stream is closed now.
        async with contextlib.AsyncExitStack() as stack:
            ticket: Ticket | None = None
            if held is not None and not held.pacer.idle:
                paced = self._paced(held, bounded, model, messages, options, signal)
                ticket = await stack.enter_async_context(paced)
            elif bounded is not None:
                bound, limit = bounded
                await bound.acquire(limit)
                stack.callback(bound.release)
            if ticket is None and held is not None:
                held.went()
            chunks = model.stream(messages, options, signal=signal)
            await stack.enter_async_context(closing_stream(chunks))
            try:
                async for chunk in chunks:
                    if isinstance(chunk, Done):
                        if ticket is not None:
                            ticket.answered(chunk.response)
                        elif held is not None and chunk.response.rate is not None:
                            held.learn(chunk.response)
                    yield chunk
            except RateLimitError as exc:
                if ticket is None and held is not None:
                    held.throttled(exc, bounded[0].in_flight if bounded else 1)
                raise

    @contextlib.asynccontextmanager
    async def _paced(
        self,
        held: HeldRate,
        bounded: tuple[EndpointBound, int] | None,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[Ticket]:
        """A request of a paced key: its turn (a probe first), a slot of the endpoint's
        bound (at most the learnt concurrency), then its rate; settled on leaving."""
        probe = await held.probe_turn(signal)
        try:
            if bounded is not None:
                bound, limit = bounded
                await bound.acquire(held.pacer.concurrency(limit))
            try:
                async with held.ticket(model, messages, options, signal) as ticket:
                    yield ticket
            finally:
                if bounded is not None:
                    bounded[0].release()
        finally:
            if probe:
                held.probed()


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
