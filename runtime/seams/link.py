"""`Link`: the base of every link of a run's request path (see `request_path`), and of the
access layer under them; where a composite model (a fallback) is split, once.

A request to a `CompositeModel` reaching a link (the outermost one: nothing above it
splits) becomes one request per model, in order, each sent down the whole chain from
that link as a single model's: cached under its own key, reserved at its own prices,
admitted under its own endpoint's bound. Its route says which model it is and, for a
model with another after it, to fail fast (a 429 goes back at once: the fallback is what
it should lead to). The failed models' attempts are listed on the reply that came, and
counted in its usage as requests billed at nothing (`contract.with_failed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from ..errors import ProviderError, ProviderResponseError, redact
from ..models.contract import (
    CompositeModel,
    Done,
    Model,
    ModelResponse,
    StreamChunk,
    as_composite,
    with_failed,
)
from .contract import ModelAccess
from .request import ModelRequest, Route

__all__ = ["DIRECT", "Access", "Link", "closing_stream", "split", "split_stream"]

T = TypeVar("T")


class Access:
    """A `ModelAccess` that splits a composite model here (see the module docstring) and
    hands each single model's request to `send` / `send_stream`."""

    __slots__ = ()

    def complete(self, request: ModelRequest) -> Coroutine[Any, Any, ModelResponse]:
        # (A plain method handing on the coroutine: no extra await per link.)
        composite = as_composite(request.model)
        if composite is not None:
            return split(composite, request, self)
        return self.send(request)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        composite = as_composite(request.model)
        if composite is not None:
            return split_stream(composite, request, self)
        return self.send_stream(request)

    async def send(self, request: ModelRequest) -> ModelResponse:
        """One model's request."""
        raise NotImplementedError

    def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """One model's streamed request."""
        raise NotImplementedError


class Link(Access):
    """A link of the request path: does one thing to a request of one model, then passes
    it on to `inner`. A subclass writes `send` and `send_stream` (the default: pass the
    request on as it is)."""

    __slots__ = ("inner",)

    def __init__(self, inner: ModelAccess) -> None:
        self.inner = inner

    async def send(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.complete(request)

    def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        return self.inner.stream(request)


class _Direct(Access):
    """The model itself, with nothing around it (a fallback used on its own)."""

    __slots__ = ()

    async def send(self, request: ModelRequest) -> ModelResponse:
        return await request.model.complete(
            request.messages, request.options, signal=request.signal
        )

    def send_stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        return request.model.stream(request.messages, request.options, signal=request.signal)


DIRECT = _Direct()


def _route(position: int, last: int, outer: Route) -> Route:
    return Route(outer.batch, position, position < last or outer.fail_fast)


async def split(
    composite: CompositeModel, request: ModelRequest, access: ModelAccess
) -> ModelResponse:
    """`request` to each of `composite`'s models in turn, through `access`, until one
    answers or fails with an error it does not fail over on."""
    models = composite.parts()
    last = len(models) - 1
    failed: list[dict[str, Any]] = []
    outer = request.route
    for position, model in enumerate(models):
        try:
            response = await access.complete(request.to(model, _route(position, last, outer)))
        except Exception as error:
            if position == last or not composite.fails_over(error):
                raise
            failed.append(failure(model, error))
            continue
        return with_failed(response, failed)
    raise AssertionError("unreachable: the last model answers or raises")


async def split_stream(
    composite: CompositeModel, request: ModelRequest, access: ModelAccess
) -> AsyncIterator[StreamChunk]:
    """`split`, streamed: a model fails over only before its first chunk (past it, the
    reply is under way)."""
    models = composite.parts()
    last = len(models) - 1
    failed: list[dict[str, Any]] = []
    outer = request.route
    for position, model in enumerate(models):
        chunks = access.stream(request.to(model, _route(position, last, outer)))
        async with closing_stream(chunks):
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                raise ProviderResponseError(
                    f"{model.name}: the stream ended before any reply", provider=model.provider
                ) from None
            except Exception as error:
                if position == last or not composite.fails_over(error):
                    raise
                failed.append(failure(model, error))
                continue
            yield _stamped(first, failed)
            async for chunk in chunks:
                yield _stamped(chunk, failed)
        return


def failure(model: Model, error: BaseException) -> dict[str, Any]:
    """A failed model's entry on a reply's `attempts`."""
    info = error.to_dict() if isinstance(error, ProviderError) else {"message": redact(repr(error))}
    return {"model": model.name, "provider": model.provider, "error": info}


def _stamped(chunk: StreamChunk, failed: list[dict[str, Any]]) -> StreamChunk:
    if failed and isinstance(chunk, Done):
        return Done(with_failed(chunk.response, failed))
    return chunk


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
