"""The streaming tool guard: tool-call JSON written as text becomes a real call."""

from __future__ import annotations

import json

import pytest
from agent_support import add, assert_wellformed, drain, outcome, search

import raygent
from raygent import AssistantMessage, ToolMessage
from raygent.agents import StreamingToolGuard
from raygent.errors import InvalidOptionsError
from raygent.testing import ScriptedModel, Step, call, reply

AS_JSON = json.dumps({"name": "add", "arguments": {"a": 2, "b": 5}})
TAGGED = 'Sure.<tool_call>{"name": "search", "arguments": {"query": "rust"}}</tool_call>'


def _guarded(script: list[Step], **kwargs: object) -> tuple[raygent.Agent, ScriptedModel]:
    model = ScriptedModel(script)
    bot = raygent.agent(
        model=model,
        tools=[add, search],
        streaming_tool_guard=True,
        **kwargs,  # type: ignore[arg-type]
    )
    return bot, model


@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_tool_call_json_in_the_text_becomes_a_real_call(mode: str) -> None:
    bot, model = _guarded([AS_JSON, "The sum is 7."])
    if mode == "execute":
        result = await bot.execute("2+5?")
        events: list[raygent.observers.events.Event] = []
    else:
        events, result = await drain(bot.stream("2+5?"))
    assert result.ok and result.text == "The sum is 7."
    [record] = result.report.tool_calls
    assert (record.name, record.input, record.output) == ("add", {"a": 2, "b": 5}, "7")
    assert record.call_id.startswith("call_guard_")
    assert result.report.trips[0].finish_reason == "tool_calls"
    assert result.report.trips[0].output == ""
    sent, _ = model.requests[1]
    assert_wellformed(sent)
    assistant = next(m for m in sent if isinstance(m, AssistantMessage))
    assert assistant.text == "" and assistant.tool_calls[0].name == "add"
    # The JSON was held back, never streamed as text.
    streamed = [e.text for e in events if e.type == "agent.trip.streaming"]
    assert AS_JSON not in "".join(streamed)
    if mode == "stream":
        assert "".join(streamed) == "The sum is 7."


async def test_tagged_calls_keep_the_surrounding_text() -> None:
    bot, model = _guarded([TAGGED, "Found it."])
    result = await bot.execute("find rust")
    assert result.ok
    assert result.report.trips[0].output == "Sure."
    sent, _ = model.requests[1]
    assert sent[-2].text == "Sure."  # the assistant turn keeps the prose, not the JSON
    assert result.report.tool_calls[0].input == {"query": "rust"}


async def test_a_call_already_made_for_real_is_not_made_twice() -> None:
    both = reply(AS_JSON, [call("add", {"a": 2, "b": 5})])
    bot, model = _guarded([both, "7"])
    result = await bot.execute("2+5?")
    assert [c.call_id for c in result.report.tool_calls] == ["call_1"]
    sent, _ = model.requests[1]
    assert len([m for m in sent if isinstance(m, ToolMessage)]) == 1


async def test_json_that_is_not_a_call_stays_text_and_streams_in_the_end() -> None:
    text = '{"name": "not_a_tool", "arguments": {}}'
    bot, _ = _guarded([text])
    events, result = await drain(bot.stream("x"))
    assert result.ok and result.text == text and result.report.tool_calls == []
    assert "".join(e.text for e in events if e.type == "agent.trip.streaming") == text


async def test_plain_text_is_not_held_back() -> None:
    bot, _ = _guarded(["Hello, this is prose."])
    events, result = await drain(bot.stream("x"))
    assert result.text == "Hello, this is prose."
    deltas = [e.text for e in events if e.type == "agent.trip.streaming"]
    assert "".join(deltas) == "Hello, this is prose."
    assert len(deltas) > 1  # streamed as it came, not held to the end


async def test_the_buffer_is_bounded() -> None:
    padded = json.dumps({"name": "add", "arguments": {"a": 2, "b": 5}, "pad": "x" * 200})
    model = ScriptedModel([padded])
    bot = raygent.agent(model=model, tools=[add], streaming_tool_guard=64)
    events, result = await drain(bot.stream("x"))
    # Past the buffer the text is streamed on and left as text.
    assert result.ok and result.text == padded and result.report.tool_calls == []
    deltas = [e.text for e in events if e.type == "agent.trip.streaming"]
    assert "".join(deltas) == padded and len(deltas) > 1


async def test_without_the_guard_the_json_stays_text() -> None:
    model = ScriptedModel([AS_JSON])
    result = await raygent.agent(model=model, tools=[add]).execute("2+5?")
    assert result.text == AS_JSON and result.report.tool_calls == []


async def test_the_guard_gives_the_same_result_streamed_or_not() -> None:
    def make() -> raygent.Agent:
        return _guarded([TAGGED, AS_JSON, "done"])[0]

    executed = await make().execute("go")
    _, streamed = await drain(make().stream("go"))
    assert outcome(streamed) == outcome(executed)
    assert len(executed.report.tool_calls) == 2


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (TAGGED, "Sure."),
        (
            'Let me look.\n<tool_call>{"name": "search", "arguments": {"query": "go"}}'
            "</tool_call>\nBack soon.",
            "Let me look.\n\nBack soon.",
        ),
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', ""),
        (
            "Prose with a <tool_ word that is not a tag.",
            "Prose with a <tool_ word that is not a tag.",
        ),
    ],
)
async def test_a_tagged_call_after_prose_is_not_streamed_as_text(text: str, shown: str) -> None:
    bot, _ = _guarded([text, "after"])
    events, result = await drain(bot.stream("go"))
    trip0 = [e.text for e in events if e.type == "agent.trip.streaming" and e.trip_index == 0]
    assert "".join(trip0) == shown == result.report.trips[0].output
    everything = "".join(e.text for e in events if e.type == "agent.trip.streaming")
    assert everything == "".join(t.output for t in result.report.trips)


@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_an_empty_config_turns_the_guard_on_with_its_defaults(mode: str) -> None:
    bot = raygent.agent(model=ScriptedModel([AS_JSON, "7"]), tools=[add], streaming_tool_guard={})
    result = await bot.execute("2+5?") if mode == "execute" else (await drain(bot.stream("x")))[1]
    assert result.ok and result.text == "7"
    assert [c.name for c in result.report.tool_calls] == ["add"]


async def test_a_config_sets_the_buffer_size() -> None:
    padded = json.dumps({"name": "add", "arguments": {"a": 2, "b": 5}, "pad": "x" * 200})
    guard: StreamingToolGuard = {"max_buffer": 64}
    bot = raygent.agent(model=ScriptedModel([padded]), tools=[add], streaming_tool_guard=guard)
    _, result = await drain(bot.stream("x"))
    assert result.ok and result.text == padded and result.report.tool_calls == []


@pytest.mark.parametrize("mode", ["execute", "stream"])
async def test_a_call_s_guard_overrides_the_agent_s(mode: str) -> None:
    async def run(bot: raygent.Agent, **options: object) -> raygent.AgentResult:
        if mode == "execute":
            return await bot.execute("2+5?", **options)  # type: ignore[arg-type]
        return (await drain(bot.stream("2+5?", **options)))[1]  # type: ignore[arg-type]

    def plain() -> raygent.Agent:
        return raygent.agent(model=ScriptedModel([AS_JSON, "7"]), tools=[add])

    def guarded() -> raygent.Agent:
        return _guarded([AS_JSON, "7"])[0]

    turned_on = await run(plain(), streaming_tool_guard=True)
    configured = await run(plain(), streaming_tool_guard={})
    turned_off = await run(guarded(), streaming_tool_guard=False)
    inherited = await run(guarded(), streaming_tool_guard=None)
    assert [c.name for c in turned_on.report.tool_calls] == ["add"] and turned_on.text == "7"
    assert [c.name for c in configured.report.tool_calls] == ["add"]
    assert turned_off.ok and turned_off.text == AS_JSON and turned_off.report.tool_calls == []
    assert [c.name for c in inherited.report.tool_calls] == ["add"]


@pytest.mark.parametrize("bad", ["yes", 0, -5, 2.5, {"size": 10}, {"max_buffer": "big"}, [64]])
async def test_a_bad_guard_value_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidOptionsError, match="streaming_tool_guard"):
        raygent.agent(model=ScriptedModel([]), streaming_tool_guard=bad)  # type: ignore[arg-type]
    model = ScriptedModel(["never sent"])
    result = await raygent.agent(model=model).execute("go", streaming_tool_guard=bad)  # type: ignore[typeddict-item]
    assert isinstance(result.error, InvalidOptionsError) and result.report.status == "failed"
    assert "streaming_tool_guard" in result.error.message
    assert model.requests == []
