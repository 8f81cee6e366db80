"""Compaction in agent runs: when it fires, what it may replace, what goes back verbatim."""

from __future__ import annotations

from typing import Any

from compaction_support import (
    AsyncRecorder,
    Recorder,
    is_summary,
    lookup,
    signed_block,
    tool_model,
)
from pydantic import BaseModel

import raygent
from raygent import AssistantMessage, ProviderBlock, SystemMessage, ToolMessage, UserMessage
from raygent.testing import ScriptedModel


def before_compaction(model: Any, decision: Any, offered: list[Any]) -> list[Any]:
    """The conversation as it was before `decision` replaced `offered` by one summary."""
    request, _ = model.requests[decision.trip_index]
    start = decision.replaces_from_index
    return [*request[:start], *offered, *request[start + 1 :]]


def compacting(model: Any, summarize: Any, **options: Any) -> raygent.Agent:
    after = options.pop("after_tokens", 300)
    keep = options.pop("keep", 2)
    return raygent.agent(
        model=model,
        tools=[lookup],
        system_prompt="You look things up.",
        compaction=raygent.Compaction(after_tokens=after, keep=keep, summarize=summarize),
        max_trips=12,
        **options,
    )


async def test_below_the_threshold_nothing_is_counted_as_a_decision() -> None:
    model, summarizer = tool_model(3), Recorder()
    result = await compacting(model, summarizer, after_tokens=100_000).execute("look")
    assert result.ok and result.report.compactions == []
    assert summarizer.slices == []
    assert [len(messages) for messages, _ in model.requests] == [2, 4, 6, 8]


async def test_crossing_the_threshold_replaces_older_turns_with_the_summary() -> None:
    model, summarizer = tool_model(4), Recorder()
    result = await compacting(model, summarizer).execute("look things up")
    assert result.ok, result.error
    first = result.report.compactions[0]
    assert first.status == "applied" and first.counting == "estimate"
    assert first.input_tokens is not None and first.input_tokens > 300
    # The trip it ran before got the summary in place of the older turns.
    request, _ = model.requests[first.trip_index]
    assert request[0] == SystemMessage(content="You look things up.")
    assert request[1] == UserMessage(content="look things up")  # the input stays
    assert first.replaces_from_index == 2
    assert is_summary(request[2], summarizer.text)
    offered = summarizer.slices[0]
    assert [m.role for m in offered][:2] == ["assistant", "tool"]
    ctx = summarizer.contexts[0]
    assert ctx.trip_index == first.trip_index and ctx.input_tokens == first.input_tokens
    assert ctx.counting == "estimate" and not ctx.signal.aborted
    # What the summary replaced went to the summariser; everything after is verbatim.
    before = before_compaction(model, first, offered)
    assert request[3:] == before[first.replaces_to_index :]
    assert len(before) - first.replaces_to_index >= 2  # keep=2


async def test_tool_definitions_and_the_response_schema_count_too() -> None:
    class Answer(BaseModel):
        verdict: str
        reasons: list[str]

    async def decisions(after: int, tools: bool, output: Any) -> list[Any]:
        spec = raygent.Compaction(after_tokens=after, summarize=Recorder())
        agent = raygent.agent(
            model=ScriptedModel(['{"verdict": "ok", "reasons": []}']),
            tools=[lookup] if tools else [],
            output=output,
            system_prompt="You look things up.",
            compaction=spec,
        )
        result = await agent.execute("hi")
        assert result.ok, result.error
        return result.report.compactions

    # The messages alone stay under 50 tokens; the tool definition takes them over.
    assert await decisions(50, tools=False, output=None) == []
    [with_tool] = await decisions(50, tools=True, output=None)
    # With the tool under 120; the response schema takes them over.
    assert await decisions(120, tools=True, output=None) == []
    [with_schema] = await decisions(120, tools=True, output=Answer)
    assert with_schema.input_tokens > with_tool.input_tokens > 50
    # Nothing but the system prompt and the input: nothing may be replaced.
    assert with_schema.status == "skipped" and with_schema.reason == "no-safe-range"


async def test_keep_widens_to_whole_tool_groups() -> None:
    # Two calls a round: a group is an assistant turn and its two results.
    model, summarizer = tool_model(4, calls_per_round=2), Recorder()
    result = await compacting(model, summarizer, keep=4).execute("look")
    assert result.ok, result.error
    *skipped, applied = [d for d in result.report.compactions if d.trip_index <= 3]
    # Before trip 3 the last 4 messages reach into the first group: kept whole, so
    # nothing is left to replace.
    assert skipped and {d.reason for d in skipped} == {"no-safe-range"}
    assert applied.status == "applied" and applied.trip_index == 3
    before = before_compaction(model, applied, summarizer.slices[0])
    end = applied.replaces_to_index
    assert end is not None and len(before) - end == 6  # keep=4 widened to two groups
    assert isinstance(before[end], AssistantMessage) and before[end].tool_calls
    assert [m.role for m in summarizer.slices[0]] == ["assistant", "tool", "tool"]


async def test_the_open_tool_round_and_its_signed_thinking_go_back_verbatim() -> None:
    model = tool_model(4, blocks=lambda trip: [signed_block()])
    summarizer = Recorder()
    result = await compacting(model, summarizer, keep=0).execute("look")
    assert result.ok, result.error
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert len(applied) >= 2 and len(applied) == len(summarizer.slices)
    for decision, offered in zip(applied, summarizer.slices, strict=True):
        request, _ = model.requests[decision.trip_index]
        before = before_compaction(model, decision, offered)
        # keep=0: only the open round (the last call and its result) bounds the slice,
        # and it goes back as it came, signed thinking first.
        assert decision.replaces_to_index == len(before) - 2
        open_turn = request[-2]
        assert isinstance(open_turn, AssistantMessage) and open_turn.tool_calls
        assert open_turn.content[0] == signed_block()
        assert request[-2:] == before[-2:]
        assert isinstance(request[-1], ToolMessage)
        assert open_turn.tool_calls[0].call_id == request[-1].call_id
        assert open_turn not in offered


async def test_kept_signed_turns_get_the_summary_as_user_context() -> None:
    model = tool_model(5, blocks=lambda trip: [signed_block()])
    summarizer = Recorder()
    result = await compacting(model, summarizer, keep=2).execute("look")
    assert result.ok, result.error
    first = result.report.compactions[0]
    assert first.framing == "user" and first.retained
    request, _ = model.requests[first.trip_index]
    summary = request[first.replaces_from_index or 0]
    assert isinstance(summary, UserMessage) and summarizer.text in summary.text
    for index in first.retained:
        assert isinstance(request[index], AssistantMessage)
        assert request[index].content[0] == signed_block()
    # A later decision may replace that summary with what followed it: a summary framed
    # as user context is not the latest user message.
    later = [d for d in result.report.compactions if d.status == "applied"][1]
    assert later.replaces_from_index == first.replaces_from_index
    assert summarizer.slices[1][0] == summary
    final, _ = model.requests[-1]
    assert sum(1 for m in final if summarizer.text in m.text) == 1


async def test_unsigned_reasoning_keeps_the_assistant_framing() -> None:
    unsigned = ProviderBlock(provider="test", kind="thinking", data={"thinking": "hm"})
    model = tool_model(4, blocks=lambda trip: [unsigned])
    result = await compacting(model, Recorder()).execute("look")
    first = result.report.compactions[0]
    assert first.framing == "assistant" and first.retained == []


async def test_custom_count_tokens_sync_and_async() -> None:
    seen: list[tuple[int, int]] = []

    def count(messages: list[Any], options: raygent.ModelOptions) -> int:
        seen.append((len(messages), len(options.tools)))
        return 10_000 if len(messages) >= 6 else 5

    async def count_async(messages: list[Any], options: raygent.ModelOptions) -> int:
        return count(messages, options)

    for counter in (count, count_async):
        seen.clear()
        model = tool_model(3)
        compaction = raygent.Compaction(
            after_tokens=1000, keep=2, summarize=Recorder(), count_tokens=counter
        )
        agent = raygent.agent(model=model, tools=[lookup], compaction=compaction)
        result = await agent.execute("look")
        assert result.ok, result.error
        assert seen[:3] == [(1, 1), (3, 1), (5, 1)]  # before every trip, with the tools
        [decision] = [d for d in result.report.compactions if d.status == "applied"]
        assert decision.counting == "custom" and decision.input_tokens == 10_000
        assert decision.trip_index == 3


async def test_a_streamed_run_compacts_too() -> None:
    model, summarizer = tool_model(4), AsyncRecorder()
    stream = compacting(model, summarizer).stream("look")
    started = [e.trip_index async for e in stream if e.type == "agent.trip.started"]
    result = await stream.result
    assert result.ok and started == [0, 1, 2, 3, 4]
    first = result.report.compactions[0]
    assert first.status == "applied"
    assert is_summary(model.requests[first.trip_index][0][2], summarizer.text)


async def test_a_repair_trip_compacts_too() -> None:
    class Answer(BaseModel):
        value: int

    history = [
        UserMessage(content="earlier question " + "q" * 300),
        AssistantMessage(content="earlier answer " + "a" * 300),
        UserMessage(content="another question " + "q" * 300),
        AssistantMessage(content="another answer " + "a" * 300),
    ]
    model = ScriptedModel(["not json", '{"value": 3}'])
    summarizer = Recorder()
    agent = compacting(model, summarizer, after_tokens=250, keep=0, output=Answer)
    result = await agent.execute("now", history=history, repair=raygent.Repair(max_attempts=1))
    assert result.ok and result.data == Answer(value=3)
    assert [d.trip_index for d in result.report.compactions if d.status == "applied"] == [0]
    assert summarizer.slices[0] == history  # the older turns, before the input
    repair_request, _ = model.requests[1]
    assert is_summary(repair_request[1], summarizer.text)
    assert repair_request[2] == UserMessage(content="now")
    assert result.report.trips[1].purpose == "repair"


async def test_an_earlier_summary_is_summarised_again_with_what_came_after() -> None:
    model, summarizer = tool_model(8), Recorder()
    result = await compacting(model, summarizer).execute("look")
    applied = [d for d in result.report.compactions if d.status == "applied"]
    assert len(applied) >= 2
    assert is_summary(summarizer.slices[1][0], summarizer.text)
    final, _ = model.requests[-1]
    summaries = [m for m in final if is_summary(m, summarizer.text)]
    assert len(summaries) == 1
