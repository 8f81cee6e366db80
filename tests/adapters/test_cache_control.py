"""`cache_control={"breakpoints": n, "ttl": ...}`: a count of prompt-cache breakpoints the
Anthropic adapter places (where: `CacheControl`'s docstring), beside explicit positions;
the OpenAI adapter ignores it (OpenAI caches by itself); a bad count or ttl is a typed
error before any request. Checked on the requests the simulator recorded, and against the
official `anthropic` SDK request type."""

from __future__ import annotations

from typing import Any

import pytest
from _sdk_types import assert_conforms
from adapter_support import make_model
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

import raygent
from raygent import (
    AssistantMessage,
    Message,
    ModelOptions,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from raygent.errors import InvalidOptionsError
from raygent.models import CacheControl
from raygent.sim import Match, Reply, Rule, ToolCallReply, serve

LONG_SYSTEM = "You follow the house rules. " * 400  # ~2.7k tokens: worth caching
HOUR = {"type": "ephemeral", "ttl": "1h"}
TOOLS = (ToolSpec(name="lookup", description="Look a thing up."), ToolSpec(name="clock"))


@raygent.tool
def lookup(q: str) -> str:
    """Look a thing up."""
    return f"found {q}"


def conversation() -> list[Message]:
    """System, a tool round and a follow-up: five Anthropic turns, user first."""
    return [
        SystemMessage(content="Use the tools."),
        UserMessage(content="Look up x and the time."),
        AssistantMessage(
            content="Checking.",
            tool_calls=[
                ToolCall.parse("toolu_1", "lookup", '{"q": "x"}'),
                ToolCall.parse("toolu_2", "clock", ""),
            ],
        ),
        ToolMessage(call_id="toolu_1", content="found x"),
        ToolMessage(call_id="toolu_2", content="12:00"),
        AssistantMessage(content="x is found; it is noon."),
        UserMessage(content="Thanks."),
    ]


def marks(body: dict[str, Any]) -> dict[str, Any]:
    """Where cache_control landed, as readable paths, with its marker."""
    found: dict[str, Any] = {}
    for i, tool in enumerate(body.get("tools", ())):
        if "cache_control" in tool:
            found[f"tools[{i}]"] = tool["cache_control"]
    for i, block in enumerate(body.get("system", ())):
        if "cache_control" in block:
            found[f"system[{i}]"] = block["cache_control"]
    for i, turn in enumerate(body["messages"]):
        for j, block in enumerate(turn["content"]):
            if "cache_control" in block:
                found[f"messages[{i}][{j}]"] = block["cache_control"]
    return found


@pytest.mark.parametrize(
    ("count", "where"),
    [
        (1, ["messages[4][0]"]),  # the end of the whole prompt
        (2, ["system[0]", "messages[4][0]"]),  # + the stable prefix
        (3, ["system[0]", "messages[2][1]", "messages[4][0]"]),  # + the earlier user turn
        (4, ["tools[1]", "system[0]", "messages[2][1]", "messages[4][0]"]),  # + the tools
    ],
)
async def test_a_count_of_breakpoints_is_placed_by_the_adapter(
    count: int, where: list[str]
) -> None:
    options = ModelOptions(tools=TOOLS, cache_control=CacheControl(breakpoints=count, ttl="1h"))
    async with serve() as sim:
        await make_model("anthropic", sim).complete(conversation(), options)
        body = sim.requests[-1].body
    assert marks(body) == dict.fromkeys(where, HOUR)
    assert_conforms(body, MessageCreateParamsNonStreaming)


async def test_a_count_marks_only_places_that_exist() -> None:
    """No system prompt, no tools, one turn: four asked, one placed; `ttl` defaults to 5m."""
    options = ModelOptions(cache_control=CacheControl(breakpoints=4))
    async with serve() as sim:
        await make_model("anthropic", sim).complete([UserMessage(content="Hi")], options)
        body = sim.requests[-1].body
    assert marks(body) == {"messages[0][0]": {"type": "ephemeral"}}
    assert_conforms(body, MessageCreateParamsNonStreaming)


async def test_one_breakpoint_for_an_hour_per_call_as_in_the_reference() -> None:
    """`execute(..., model_options={"cache_control": {"breakpoints": 1, "ttl": "1h"}})`:
    every trip marks the end of its prompt; the second trip reads what the first wrote."""
    script = [
        Rule(
            match=Match(after_tool_result=False),
            reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})]),
        ),
        Rule(reply=Reply(text="x is found")),
    ]
    async with serve(script) as sim:
        bot = raygent.agent(
            model=make_model("anthropic", sim), system_prompt=LONG_SYSTEM, tools=[lookup]
        )
        result = await bot.execute(
            "Look up x.", model_options={"cache_control": {"breakpoints": 1, "ttl": "1h"}}
        )
        bodies = [r.body for r in sim.requests]
    assert result.report.status == "completed" and result.text == "x is found"
    assert [marks(b) for b in bodies] == [
        {"messages[0][0]": HOUR},
        {"messages[2][0]": HOUR},  # the tool result ends the second prompt
    ]
    first, second = (trip.usage for trip in result.report.trips)
    assert first.cache_write_1h_tokens > 0 and first.cached_tokens == 0
    assert second.cached_tokens >= first.cache_write_tokens
    # The next run is back on the agent's settings: no cache_control at all.
    async with serve([Rule(reply=Reply(text="ok"))]) as sim:
        bot = raygent.agent(model=make_model("anthropic", sim), system_prompt=LONG_SYSTEM)
        await bot.execute("Again.")
        assert "cache_control" not in str(sim.requests[-1].body)


async def test_the_openai_adapter_ignores_a_count() -> None:
    options = ModelOptions(tools=TOOLS, cache_control=CacheControl(breakpoints=3, ttl="1h"))
    async with serve() as sim:
        reply = await make_model("openai", sim).complete(conversation(), options)
        body = sim.requests[-1].body
    assert reply.text and "cache_control" not in str(body)


@pytest.mark.parametrize(
    ("cache_control", "named"),
    [
        ({"breakpoints": 0}, "cache_control.breakpoints"),
        ({"breakpoints": 5, "ttl": "1h"}, "cache_control.breakpoints"),
        ({"breakpoints": True}, "cache_control.breakpoints"),
        ({"breakpoints": "1"}, "cache_control.breakpoints"),
        ({"breakpoints": 1, "ttl": "2h"}, "cache_control.ttl"),
    ],
    ids=["zero", "five", "bool", "string", "ttl"],
)
async def test_a_bad_count_or_ttl_is_a_typed_error_before_any_request(
    cache_control: dict[str, Any], named: str
) -> None:
    async with serve() as sim:
        bot = raygent.agent(model=make_model("anthropic", sim))
        result = await bot.execute("Hi", model_options={"cache_control": cache_control})
        assert sim.stats().requests == 0
    assert isinstance(result.error, InvalidOptionsError)
    assert result.report.status == "failed" and named in result.error.message
