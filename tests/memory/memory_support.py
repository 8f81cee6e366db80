"""Helpers for the memory tests: stores of each kind, message shapes, tools that hang,
model steps that wait, a store whose record_error fails, and the writer of the
two-process test (importable, so that a spawned process can run it)."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

import raygent
from raygent import AgentResult, AgentStream, ModelOptions, OpenAIModel
from raygent.messages import AssistantMessage, Message, ToolMessage
from raygent.observers.events import Event
from raygent.stores import InMemoryStore, RedisStore, SQLiteStore, Store, StoredMessage
from raygent.testing import FunctionModel

KINDS = ("memory", "sqlite", "redis")
POLICIES = ("message", "turn", "run")
KEY = "sk-test-key-000000"

Shape = tuple[Any, ...]


# -- stores ----------------------------------------------------------------------


def build_store(
    kind: str, tmp_path: Path, redis_url: str | None, prefix: str, **options: Any
) -> Any:
    """A store of `kind`; sqlite and redis ones built with the same arguments share their
    data (one file, one prefix), so two of them are two clients of one store."""
    if kind == "memory":
        return InMemoryStore(**options)
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "memory.db", **options)
    assert redis_url is not None
    return RedisStore(redis_url, prefix=prefix, **options)


def delete_prefix(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


class RecordErrorFails:
    """A store whose record_error raises (everything else goes to the real store)."""

    def __init__(self, store: Store, exc: Exception | None = None) -> None:
        self.store = store
        self.exc = exc or RuntimeError("the error log is down")
        self.attempts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def record_error(self, *args: Any, **kwargs: Any) -> None:
        self.attempts += 1
        raise self.exc


class AppendFails:
    """A store whose append raises `exc` (everything else goes to the real store)."""

    def __init__(self, store: Store, exc: Exception) -> None:
        self.store = store
        self.exc = exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        raise self.exc


# -- message shapes --------------------------------------------------------------


def shape(message: Message) -> Shape:
    """What a test compares: role and text; tool call ids; a tool result's call id."""
    if isinstance(message, ToolMessage):
        return ("tool", message.call_id, message.text, message.is_error)
    if isinstance(message, AssistantMessage):
        return ("assistant", message.text, tuple(c.call_id for c in message.tool_calls))
    return (message.role, message.text)


def shapes(messages: Sequence[Message]) -> list[Shape]:
    return [shape(m) for m in messages]


def user(text: str) -> Shape:
    return ("user", text)


def assistant(text: str = "", *call_ids: str) -> Shape:
    return ("assistant", text, call_ids)


def result(call_id: str, text: str, is_error: bool = False) -> Shape:
    return ("tool", call_id, text, is_error)


def batches(stored: Sequence[StoredMessage]) -> list[tuple[str, int, list[Shape]]]:
    """The appends a conversation was written in: (run_id, turn, message shapes)."""
    found: list[tuple[str, int, list[Shape]]] = []
    for key, items in itertools.groupby(stored, key=lambda s: (s.run_id, s.turn)):
        found.append((key[0], key[1], [shape(s.message) for s in items]))
    return found


def assert_linear(stored: Sequence[StoredMessage]) -> dict[str, list[StoredMessage]]:
    """Positions are 0..n-1; each run's messages are one contiguous stretch, written in
    increasing turns; returns the stored messages by run."""
    assert [s.position for s in stored] == list(range(len(stored)))
    runs: dict[str, list[StoredMessage]] = defaultdict(list)
    for item in stored:
        runs[item.run_id].append(item)
    for run_id, items in runs.items():
        positions = [i.position for i in items]
        assert positions == list(range(positions[0], positions[0] + len(items))), run_id
        turns = [i.turn for i in items]
        assert turns == sorted(turns), run_id
    return runs


def assert_wellformed(messages: Sequence[Message]) -> None:
    """Every tool call is answered by one tool message before the next assistant turn."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert not pending, f"tool calls never answered: {sorted(pending)}"
            pending = {c.call_id for c in message.tool_calls}
        elif isinstance(message, ToolMessage):
            assert message.call_id in pending, f"tool result answers nothing: {message.call_id}"
            pending.discard(message.call_id)


# -- tools and model steps ---------------------------------------------------------


@raygent.tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@raygent.tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


class Held:
    """A model step that says when the request arrived, then waits for `release`."""

    def __init__(self, answer: Any = "released") -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.answer = answer

    async def __call__(self, messages: list[Message], options: ModelOptions) -> Any:
        self.arrived.set()
        await self.release.wait()
        return self.answer


class Recorder:
    """An event handler that keeps every event it sees."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    @property
    def run_id(self) -> str:
        return str(self.events[0].run_id)


async def drain(stream: AgentStream) -> tuple[list[Event], AgentResult]:
    events = [event async for event in stream]
    return events, await stream.result


def sim_model(base_url: str) -> OpenAIModel:
    return OpenAIModel("sim-gpt", base_url=base_url, api_key=KEY)


# -- the writer of the two-process test --------------------------------------------


def echo_step(messages: list[Message], options: ModelOptions) -> Any:
    """First trip: call `lookup` with the input; after the result: answer with it."""
    from raygent.testing import call, reply

    last = messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"answer {last.text}")
    return reply(tool_calls=[call("lookup", {"q": last.text}, call_id=f"c-{last.text}")])


@dataclass(frozen=True)
class Variant:
    """One shared session the spawned writers run on: a store and a save policy."""

    kind: str  # sqlite | redis
    location: str  # the SQLite file, or the Redis URL
    prefix: str
    policy: str

    def store(self) -> Store:
        if self.kind == "sqlite":
            return SQLiteStore(self.location)
        return RedisStore(self.location, prefix=self.prefix)


Outcome = tuple[str, str, str, "str | None"]  # input, run id, status, error code


def process_runs(
    variants: list[Variant], writer: int, runs: int, barrier: Any, results: Any
) -> None:
    """In a spawned process: for each variant, wait for the other writer, then run
    `runs` runs on its session "s1"; put (writer, [outcomes per variant])."""

    async def main(variant: Variant) -> list[Outcome]:
        store = variant.store()
        memory = raygent.Memory(store, save_policy=variant.policy)  # type: ignore[arg-type]
        bot = raygent.agent(model=FunctionModel(echo_step), tools=[lookup], memory=memory)
        session = bot.session("s1")
        done: list[Outcome] = []
        try:
            for index in range(runs):
                text = f"p{writer}r{index}"
                outcome = await session.execute(text)
                code = None if outcome.error is None else outcome.error.code
                done.append((text, outcome.report.run_id, outcome.report.status, code))
        finally:
            await store.aclose()
        return done

    found = []
    for variant in variants:
        barrier.wait(timeout=60)  # both writers start each variant together
        found.append(asyncio.run(main(variant)))
    results.put((writer, found))


def expected_run(text: str) -> list[Shape]:
    """The messages of one completed run of `echo_step` on input `text`."""
    return [
        user(text),
        assistant("", f"c-{text}"),
        result(f"c-{text}", f"found {text}"),
        assistant(f"answer found {text}"),
    ]
