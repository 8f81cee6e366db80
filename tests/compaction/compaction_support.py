"""Helpers for the compaction tests: a tool with long results, a model that calls it a
given number of times, and summarisers that record what they were given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import raygent
from raygent import AssistantMessage, CompactionResult, Message, ProviderBlock, TextPart
from raygent.compaction import CompactionContext
from raygent.testing import FunctionModel, Reply, call, reply

LONG = "x" * 400  # a tool result long enough to push a conversation over a threshold
SIGNED = {"type": "thinking", "thinking": "plan the lookup", "signature": "EqQBsig=="}


@raygent.tool
def lookup(n: int) -> str:
    """Look something up.

    Args:
        n: which thing.
    """
    return f"result {n}: {LONG}"


def signed_block() -> ProviderBlock:
    return ProviderBlock(provider="anthropic", kind="thinking", data=SIGNED)


def tool_model(
    rounds: int,
    *,
    calls_per_round: int = 1,
    blocks: Callable[[int], Sequence[ProviderBlock]] = lambda _: (),
    answer: str = "done",
) -> FunctionModel:
    """Calls `lookup` for `rounds` trips (`calls_per_round` calls each), then answers.
    `blocks(trip)` gives the provider blocks of each tool-call reply."""
    trips = 0

    def step(messages: list[Message], options: Any) -> Reply | str:
        nonlocal trips
        trip, trips = trips, trips + 1
        if trip < rounds:
            calls = [call("lookup", {"n": trip * 10 + k}) for k in range(calls_per_round)]
            return reply(tool_calls=calls, blocks=blocks(trip))
        return answer

    return FunctionModel(step)


@dataclass
class Recorder:
    """A summariser answering with `text` for the whole slice offered; it records each
    slice and context it was given."""

    text: str = "Earlier: lookups were made."
    slices: list[list[Message]] = field(default_factory=list)
    contexts: list[CompactionContext] = field(default_factory=list)

    def __call__(self, history: list[Message], ctx: CompactionContext) -> CompactionResult:
        self.slices.append(history)
        self.contexts.append(ctx)
        return CompactionResult(
            summary=AssistantMessage(content=self.text),
            replaces_from_index=ctx.from_index,
            replaces_to_index=ctx.to_index,
        )


class AsyncRecorder(Recorder):
    async def __call__(  # type: ignore[override]
        self, history: list[Message], ctx: CompactionContext
    ) -> CompactionResult:
        await asyncio.sleep(0)  # a real suspension point, as a model call would have
        return super().__call__(history, ctx)


def is_summary(message: Message, text: str) -> bool:
    return message.role == "assistant" and message.content == [TextPart(text=text)]
