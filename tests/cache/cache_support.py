"""What the cache tests share: a weather script for the simulator (two trips: a tool
call, then the answer), its tool, models on the simulator, and how to compare runs."""

from __future__ import annotations

import dataclasses
from typing import Any

import raygent
from raygent import (
    AgentResult,
    AnthropicModel,
    OpenAIModel,
    OpenAIResponsesModel,
    Pricing,
    Usage,
)
from raygent.models._http import HTTPModel
from raygent.observers.events import Event
from raygent.sim import Match, Reply, Rule, Simulator, ToolCallReply

KEY = "sk-cache-test-0000"
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
PROVIDERS = ["openai", "openai_responses", "anthropic"]


@raygent.tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


WEATHER = [
    Rule(
        match=Match(last_user="weather", after_tool_result=False),
        reply=Reply(
            text="Let me check.",
            tool_calls=[
                ToolCallReply("get_weather", {"city": "Paris"}),
                ToolCallReply("get_weather", {"city": "Oslo"}),
            ],
        ),
    ),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="Sunny in Paris and Oslo.")),
    Rule(match=Match(last_user="refuse"), reply=Reply(refusal="I cannot help with that.")),
    Rule(match=Match(last_user="cut"), reply=Reply(text="Half an answ", finish="length")),
]


def make_model(provider: str, sim: Simulator, **kwargs: Any) -> HTTPModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("pricing", PRICING)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    if provider == "openai_responses":
        return OpenAIResponsesModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)


def trips(result: AgentResult) -> list[str | None]:
    return [t.cache for t in result.report.trips]


def answer(result: AgentResult) -> dict[str, Any]:
    """What a hit gives exactly as the request did (ids, times and cost aside)."""
    report = result.report
    return {
        "status": report.status,
        "text": result.text,
        "data": result.data,
        "tokens": (result.usage.input_tokens, result.usage.output_tokens),
        "trips": [(t.index, t.finish_reason, t.output, t.tool_calls) for t in report.trips],
        "tool_calls": [(c.call_id, c.name, c.input, c.output) for c in report.tool_calls],
    }


def event_shape(event: Event) -> tuple[Any, ...]:
    """An event less what differs between a paid trip and its hit: ids, times (a paid
    trip may have waited for a rate limit; a hit never does), the run's result, and of a
    usage its cost and request count (its tokens are the same)."""
    shape: list[tuple[str, Any]] = []
    for f in dataclasses.fields(event):
        if f.name in ("run_id", "root_run_id", "parent_run_id", "at", "duration", "rate_wait"):
            continue
        if f.name == "result":
            continue
        value = getattr(event, f.name)
        if isinstance(value, Usage):
            value = (value.input_tokens, value.output_tokens)
        shape.append((f.name, value))
    return (event.type, *shape)
