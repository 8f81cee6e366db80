"""`Link`: the base of every link of a run's request path (see `request_path`)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

from ..abort import AbortSignal
from ..messages import Message
from ..models.contract import Model, ModelOptions, ModelResponse, StreamChunk
from .contract import ModelAccess
from .local import routed

__all__ = ["Link"]

L = TypeVar("L", bound="Link")


class Link:
    """A `ModelAccess` that does one thing to a request of one model, then passes it on
    to `inner`. A fallback model is split here, once, by the outermost link: each of its
    models' attempts comes back through the whole chain as a single model. A subclass
    writes `send` and `send_stream` (the default: pass the request on as it is)."""

    __slots__ = ("inner",)

    def __init__(self, inner: ModelAccess) -> None:
        self.inner = inner

    async def complete(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        if getattr(model, "through", None) is not None:  # a fallback: routed once, here
            return await routed(model, self).complete(messages, options, signal=signal)
        return await self.send(model, messages, options, signal)

    def stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        if getattr(model, "through", None) is not None:
            return routed(model, self).stream(messages, options, signal=signal)
        return self.send_stream(model, messages, options, signal)

    async def send(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> ModelResponse:
        """One model's request."""
        return await self.inner.complete(model, messages, options, signal)

    def send_stream(
        self,
        model: Model,
        messages: Sequence[Message],
        options: ModelOptions,
        signal: AbortSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        """One model's streamed request."""
        return self.inner.stream(model, messages, options, signal)

    def failing_fast(self: L) -> L:
        """This link over its inner access's fail-fast form (Ray's gateway access, with
        no 429 retries: for a fallback's models that have another after them)."""
        fast = getattr(self.inner, "failing_fast", None)
        if fast is None:
            return self
        clone = copy.copy(self)
        clone.inner = fast()
        return clone
