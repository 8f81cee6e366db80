"""What the cache stores of a reply, and how a hit plays it back.

An entry is the reply (`ModelResponse`, less the facts of the trip that paid for it:
its attempts) and, when it came as a stream, the stream's chunks in order, so that a
`stream()` served from the cache emits the same events as the stream it recorded. A
reply that came whole is played back as its text in one chunk, one chunk per tool
call, its usage, then Done.

Only finished answers are stored: finish reason "stop" or "tool_calls" and no refusal.
Errors, refusals, cut-off replies ("length", "pause_turn", "context_exceeded") never
are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..models.contract import (
    Done,
    ModelResponse,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from ..usage import Cost

__all__ = ["Entry", "storable", "with_fields"]

Recorded = Annotated[
    TextDelta | ReasoningDelta | ToolCallDelta | UsageChunk, Field(discriminator="type")
]
_STORABLE: frozenset[str] = frozenset({"stop", "tool_calls"})


def storable(response: ModelResponse) -> bool:
    """Whether a reply may be stored: a finished answer, not a refusal."""
    return response.finish_reason in _STORABLE and response.refusal is None


class Entry(BaseModel):
    """One stored reply (and the stream that brought it, if it was streamed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    v: Literal[1] = 1
    response: ModelResponse  # as a hit gives it (see `of`)
    chunks: list[Recorded] | None = None

    @classmethod
    def of(cls, response: ModelResponse, chunks: list[StreamChunk] | None = None) -> Entry:
        """The entry of a paid reply, kept as a hit gives it (so a hit decodes it and is
        done): the tokens it cost, no request and no cost, and what it cost then as
        `saved`; not the attempts of the trip that paid."""
        paid = response.usage
        others = paid.other_models
        if others is not None:  # an advisor's tokens: free on a hit too
            others = {name: with_fields(u, cost=Cost()) for name, u in others.items()}
        usage = with_fields(paid, requests=0, cost=Cost(), other_models=others)
        hit = with_fields(
            response, usage=usage, attempts=[], via=None, cache="hit", saved=response.usage.cost
        )
        recorded = None if chunks is None else [c for c in chunks if not isinstance(c, Done)]
        return cls(response=hit, chunks=recorded)

    def encode(self) -> bytes:
        return _ADAPTER.dump_json(self)

    @staticmethod
    def decode(data: bytes) -> Entry:
        return _ADAPTER.validate_json(data)

    def hit(self) -> ModelResponse:
        """The reply as a hit: the usage it cost when paid (its tokens, no request sent)
        at no cost, and what it cost then as `saved`."""
        return self.response

    def replay(self) -> Iterator[StreamChunk]:
        """The hit as a stream: the recorded chunks (or the reply cut into chunks), the
        usage as the hit counts it, then Done."""
        response = self.hit()
        for chunk in self.chunks if self.chunks is not None else _chunks_of(response):
            yield UsageChunk(response.usage) if isinstance(chunk, UsageChunk) else chunk
        if self.chunks is None:
            yield UsageChunk(response.usage)
        yield Done(response)


M = TypeVar("M", bound=BaseModel)


def with_fields(model: M, **changes: Any) -> M:
    """A copy of a validated (frozen) model with fields set to values of their types: what
    `model_copy(update=...)` does, at a third of its cost (a hit makes two per trip)."""
    fields = {**model.__dict__, **changes}
    return type(model).model_construct(model.model_fields_set | changes.keys(), **fields)


def _chunks_of(response: ModelResponse) -> Iterator[StreamChunk]:
    """A reply that came whole, as a stream: its text, then each tool call (provider
    blocks, reasoning included, are in the reply that Done carries)."""
    text = response.text
    if text:
        yield TextDelta(text)
    for index, call in enumerate(response.tool_calls):
        arguments = call.arguments_text or _arguments_text(call.arguments)
        yield ToolCallDelta(index, call.call_id, call.name, arguments)


def _arguments_text(arguments: dict[str, Any] | None) -> str:
    return "" if arguments is None else json.dumps(arguments)


_ADAPTER: TypeAdapter[Entry] = TypeAdapter(Entry)
