"""Helpers for the compaction tests: a tool with long results, a model that calls it a
given number of times, summarisers that record what they were given, and the agents and
stores of the compaction-with-memory scenarios (on either backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import raygent
from raygent import AssistantMessage, CompactionResult, Message, ProviderBlock, TextPart
from raygent.compaction import CompactionContext
from raygent.seams.contract import Backend
from raygent.stores import SQLiteStore, Store
from raygent.testing import FunctionModel, Reply, call, reply

USER_FRAME = "Summary of earlier conversation:\n"  # how a summary goes in as user context
LONG = "x" * 400  # a tool result long enough to push a conversation over a threshold
SIGNED = {"type": "thinking", "thinking": "plan the lookup", "signature": "EqQBsig=="}
SYSTEM = "You look things up."


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
    """A summary with `text`: marked as one, as an assistant turn or as user context."""
    if message.compaction != "summary":
        return False
    if message.role == "user":
        return message.content == [TextPart(text=USER_FRAME + text)]
    return message.role == "assistant" and message.content == [TextPart(text=text)]


def agent_on(
    store: Store, policy: str, model: Any, summarizer: Any, backend: Backend | None = None
) -> raygent.Agent:
    compaction = raygent.Compaction(after_tokens=400, keep=2, summarize=summarizer)
    return raygent.agent(
        model=model,
        tools=[lookup],
        system_prompt=SYSTEM,
        memory=raygent.Memory(store=store, save_policy=policy),  # type: ignore[arg-type]
        compaction=compaction,
        capture_messages=True,
        max_trips=12,
        backend=backend,
    )


async def earlier_runs(store: Store, session: str, backend: Backend | None = None) -> None:
    """Two runs of tool rounds, stored without compaction."""
    plain = raygent.agent(
        model=tool_model(2), tools=[lookup], memory=raygent.Memory(store), backend=backend
    )
    for text in ("first", "second"):
        plain.model = tool_model(2)
        assert (await plain.session(session).execute(text)).ok


class Interfering(SQLiteStore):
    """An SQLite store where another client writes the conversation just before this
    one's first `replace_prefix` (on a Ray session host, in the host's copy)."""

    def __init__(self, path: Path, interfere: Callable[[SQLiteStore, Any, int], Any]) -> None:
        super().__init__(path)
        self.other = SQLiteStore(path)
        self.interfere = interfere
        self.replaces: list[str] = []

    async def replace_prefix(self, scope: Any, revision: int, *args: Any, **kw: Any) -> Any:
        if not self.replaces:
            await self.interfere(self.other, scope, revision)
        outcome = await super().replace_prefix(scope, revision, *args, **kw)
        self.replaces.append(outcome)
        return outcome
