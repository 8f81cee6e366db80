"""Shared helpers for the agent-loop tests: tools, event recorders, conversation checks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pydantic import BaseModel

from raygent import (
    AbortSignal,
    AgentResult,
    AgentStream,
    AnthropicModel,
    BedrockModel,
    Capabilities,
    ModelOptions,
    ModelResponse,
    OpenAIModel,
    OpenAIResponsesModel,
    tool,
)
from raygent.messages import AssistantMessage, Message, ToolMessage
from raygent.models._http import HTTPModel
from raygent.models.contract import StreamChunk
from raygent.observers.events import Event
from raygent.sim import SimStats, Simulator
from raygent.sim._bedrock_auth import TEST_CREDENTIALS

BEDROCK_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"

KEY = "sk-test-key-000000"


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
async def search(query: str, limit: int = 3) -> str:
    """Search the web."""
    return f"results for {query} (top {limit})"


@tool
def calc(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return {"1+2": "3", "2*3": "6"}.get(expression, "?")


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


class City(BaseModel):
    name: str
    population: int


class Recorder:
    """An event handler that keeps every event it sees."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


async def drain(stream: AgentStream) -> tuple[list[Event], AgentResult]:
    """Every event of a stream, then its result."""
    events = [event async for event in stream]
    return events, await stream.result


def assert_wellformed(messages: Sequence[Message]) -> None:
    """Every tool call the conversation holds is answered by exactly one tool message
    (by call_id), before the next assistant turn; no tool message answers nothing."""
    pending: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert not pending, f"tool calls never answered: {sorted(pending)}"
            pending = {c.call_id for c in message.tool_calls}
        elif isinstance(message, ToolMessage):
            assert message.call_id in pending, f"tool result answers nothing: {message.call_id}"
            pending.discard(message.call_id)
    assert not pending, f"tool calls never answered: {sorted(pending)}"


def outcome(result: AgentResult) -> dict[str, Any]:
    """What must be identical between two runs of the same script (ids and times aside)."""
    report = result.report
    return {
        "status": report.status,
        "text": result.text,
        "data": result.data,
        "blocks": result.blocks,
        "usage": result.usage,
        "error": None if result.error is None else (type(result.error), result.error.message),
        "trips": [
            (t.index, t.purpose, t.finish_reason, t.output, t.usage, t.truncated_tool_calls)
            for t in report.trips
        ],
        "tool_calls": [
            (c.call_id, c.name, c.input, c.output, c.error, c.trip_index) for c in report.tool_calls
        ],
        "system_prompt": report.system_prompt,
    }


def make_model(provider: str, sim: Simulator, **kwargs: Any) -> HTTPModel:
    if provider == "bedrock":
        return bedrock_model(sim, **kwargs)
    kwargs.setdefault("api_key", KEY)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "openai_responses":
        return OpenAIResponsesModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)


def bedrock_model(sim: Simulator, **kwargs: Any) -> BedrockModel:
    """A Bedrock model (a cross-region inference profile's id) on the simulator, its
    requests signed with the simulator's test credentials (it verifies them)."""
    kwargs.pop("api_key", None)
    kwargs.setdefault("access_key", TEST_CREDENTIALS.access_key)
    kwargs.setdefault("secret_key", TEST_CREDENTIALS.secret_key)
    return BedrockModel(BEDROCK_MODEL, base_url=sim.url, region="us-east-1", **kwargs)


async def wait_for(
    sim: Simulator, predicate: Callable[[SimStats], bool], timeout: float = 10.0
) -> SimStats:
    """Wait (bounded) until the simulator's stats satisfy `predicate`."""
    return await sim.wait_until(predicate, timeout)


class StreamOnlyModel:
    """A test model that only streams: subclasses write `stream` (and name themselves)."""

    name = "stream-only"
    provider = "test"
    capabilities = Capabilities()

    async def complete(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> ModelResponse:
        raise NotImplementedError

    def stream(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        raise NotImplementedError
