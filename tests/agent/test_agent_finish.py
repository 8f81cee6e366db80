"""Finish reasons: pause_turn, refusal, length, context_exceeded; continuation; blocks."""

from __future__ import annotations

from pathlib import Path

from agent_support import City, add, assert_wellformed, drain
from backend_support import Marks

import raygent
from raygent import AssistantMessage, ProviderBlock, Repair, ToolMessage, UserMessage
from raygent.errors import (
    AgentIncompleteError,
    ContextLengthExceededError,
    MaxTripsError,
    RefusalError,
    ServerError,
)
from raygent.models.contract import ModelResponse
from raygent.testing import ScriptedModel, call, reply
from raygent.usage import Usage

THINKING = ProviderBlock(
    provider="test", kind="thinking", data={"type": "thinking", "thinking": "hmm", "sig": "s1"}
)


async def test_pause_turn_is_resumed_and_the_text_joined() -> None:
    model = ScriptedModel(
        [reply("Part one. ", finish="pause_turn"), reply("Part two. ", finish="pause_turn"), "End."]
    )
    result = await raygent.agent(model=model).execute("go")
    assert result.ok and result.text == "Part one. Part two. End."
    assert [t.purpose for t in result.report.trips] == ["answer", "resume", "resume"]
    # The paused turn goes back as it was, for the model to carry on.
    resumed, _ = model.requests[1]
    assert isinstance(resumed[-1], AssistantMessage) and resumed[-1].text == "Part one. "
    assert result.usage.requests == 3


async def test_pause_turn_resumes_only_within_max_trips() -> None:
    model = ScriptedModel([reply("a", finish="pause_turn")] * 3)
    result = await raygent.agent(model=model, max_trips=2).execute("go")
    assert isinstance(result.error, MaxTripsError)
    assert result.text == "aa"  # the partial text, once each


async def test_a_refusal_fails_the_run_with_a_typed_error() -> None:
    refused = ModelResponse(
        content=[],
        finish_reason="refusal",
        usage=Usage(requests=1),
        provider="test",
        refusal="I can't help with that.",
    )
    result = await raygent.agent(model=ScriptedModel([refused])).execute("bad")
    assert result.report.status == "failed"
    assert isinstance(result.error, RefusalError)
    assert "I can't help with that." in result.error.message
    assert result.report.trips[0].finish_reason == "refusal"


async def test_length_ends_incomplete_with_the_partial_text() -> None:
    model = ScriptedModel([reply("The story beg", finish="length")])
    result = await raygent.agent(model=model).execute("story")
    assert result.report.status == "incomplete"
    error = result.error
    assert isinstance(error, AgentIncompleteError)
    assert error.details == {"reason": "output_limit", "trip_index": 0, "continuations": 0}
    assert result.text == "The story beg"
    assert error.to_dict()["code"] == "AGENT_INCOMPLETE"


async def test_context_exceeded_ends_incomplete_and_is_never_continued() -> None:
    model = ScriptedModel([reply("par", finish="context_exceeded"), "never"])
    bot = raygent.agent(model=model, continue_on_output_limit=3)
    result = await bot.execute("long")
    assert result.report.status == "incomplete"
    assert isinstance(result.error, AgentIncompleteError)
    assert result.error.details["reason"] == "context_window"
    assert result.text == "par"
    assert len(model.requests) == 1


async def test_a_context_length_error_from_the_provider_ends_incomplete() -> None:
    model = ScriptedModel(
        [
            reply("first", finish="length"),
            ContextLengthExceededError("too long", provider="test", status=400),
        ]
    )
    result = await raygent.agent(model=model, continue_on_output_limit=2).execute("long")
    assert result.report.status == "incomplete"
    assert isinstance(result.error, AgentIncompleteError)
    assert result.error.details["reason"] == "context_window"
    assert result.error.details["continuations"] == 1
    assert result.error.details["trip_index"] == 1
    assert result.text == "first"


async def test_continuation_joins_segments_and_parses_the_whole_for_data() -> None:
    model = ScriptedModel(
        [
            reply('{"name": "Os', finish="length"),
            reply('lo", "popula', finish="length"),
            'tion": 700000}',
        ]
    )
    bot = raygent.agent(model=model, output=City, continue_on_output_limit=2)
    result = await bot.execute("Oslo?")
    assert result.ok
    assert result.text == '{"name": "Oslo", "population": 700000}'
    assert result.data == City(name="Oslo", population=700000)
    trips = result.report.trips
    assert [t.purpose for t in trips] == ["answer", "continuation", "continuation"]
    assert [t.finish_reason for t in trips] == ["length", "length", "stop"]
    # The partial text stays in the conversation, then a continue turn.
    second, _ = model.requests[1]
    assert isinstance(second[-2], AssistantMessage) and second[-2].text == '{"name": "Os'
    assert isinstance(second[-1], UserMessage) and "Continue" in second[-1].text
    third, _ = model.requests[2]
    assert [m.role for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert result.usage.requests == 3


async def test_continuations_are_bounded_and_then_the_run_is_incomplete() -> None:
    model = ScriptedModel([reply("a", finish="length"), reply("b", finish="length")])
    result = await raygent.agent(model=model).execute("go", continue_on_output_limit=1)
    assert result.report.status == "incomplete"
    assert isinstance(result.error, AgentIncompleteError)
    assert result.error.details == {"reason": "output_limit", "trip_index": 1, "continuations": 1}
    assert result.text == "ab"


async def test_continuations_count_against_max_trips_and_text_is_not_repeated() -> None:
    model = ScriptedModel([reply("a", finish="length"), reply("b", finish="length")])
    bot = raygent.agent(model=model, max_trips=2, continue_on_output_limit=5)
    result = await bot.execute("go")
    # The trips ran out while continuing: the answer is cut off, not a failed run.
    assert result.report.status == "incomplete"
    assert isinstance(result.error, AgentIncompleteError)
    assert result.error.details == {"reason": "output_limit", "trip_index": 1, "continuations": 1}
    assert len(model.requests) == 2
    assert result.text == "ab"


async def test_a_cut_off_reply_on_the_last_trip_runs_none_of_its_calls(tmp_path: Path) -> None:
    marks = Marks(tmp_path)

    @raygent.tool
    def note(n: int) -> str:
        """Note a number."""
        marks.add("ran", str(n))
        return "noted"

    cut = reply("Noting.", [call("note", {"n": 1}), call("note", raw='{"n": ')], finish="length")
    model = ScriptedModel([cut])
    bot = raygent.agent(model=model, tools=[note], max_trips=1, continue_on_output_limit=1)
    events, result = await drain(bot.stream("go"))
    # No trip is left to read a tool result: nothing runs, the run is cut off.
    assert isinstance(result.error, AgentIncompleteError)
    assert result.error.details == {"reason": "output_limit", "trip_index": 0, "continuations": 0}
    assert result.text == "Noting." and result.report.tool_calls == []
    assert marks.read("ran") == []
    assert events[-1].type == "agent.error"


async def test_a_failed_trip_after_a_continuation_keeps_the_partial_text_once() -> None:
    model = ScriptedModel([reply("half", finish="length"), ServerError("down", provider="t")])
    result = await raygent.agent(model=model, continue_on_output_limit=1).execute("go")
    assert isinstance(result.error, ServerError)
    assert result.text == "half"
    failed = result.report.trips[1]
    assert failed.finish_reason is None and failed.timing.ended_at is not None


async def test_a_repair_after_a_continuation_validates_the_repaired_reply_alone() -> None:
    model = ScriptedModel(
        [
            reply('{"name": "Oslo", ', finish="length"),
            '"population": "lots"}',
            '{"name": "Oslo", "population": 700000}',
        ]
    )
    bot = raygent.agent(model=model, output=City, continue_on_output_limit=1)
    result = await bot.execute("Oslo?", repair=Repair(max_attempts=1))
    assert result.ok, result.error
    assert result.data == City(name="Oslo", population=700000)
    assert result.text == '{"name": "Oslo", "population": 700000}'


async def test_a_cut_off_tool_call_is_never_executed() -> None:
    ran: list[dict[str, int]] = []

    @raygent.tool
    def record(n: int) -> str:
        """Record a number."""
        ran.append({"n": n})
        return "ok"

    model = ScriptedModel([reply("Calling", [call("record", raw='{"n": 1')], finish="length")])
    result = await raygent.agent(model=model, tools=[record]).execute("go")
    assert result.report.status == "incomplete"
    assert ran == []
    assert result.report.trips[0].truncated_tool_calls == ["call_1"]
    assert result.report.tool_calls == []
    assert result.text == "Calling"


async def test_with_continuation_a_cut_off_call_is_dropped_and_the_model_told(
    tmp_path: Path,
) -> None:
    marks = Marks(tmp_path)  # the tool may run in another process (Ray)

    @raygent.tool
    def record(n: int) -> str:
        """Record a number."""
        marks.add("ran", str(n))
        return f"recorded {n}"

    model = ScriptedModel(
        [
            reply(
                "Calling ",
                [call("record", {"n": 1}), call("record", raw='{"n": 2')],
                finish="length",
            ),
            "then done.",
        ]
    )
    bot = raygent.agent(model=model, tools=[record], continue_on_output_limit=1)
    result = await bot.execute("go")
    assert result.ok, result.error
    assert result.text == "Calling then done."
    assert result.report.trips[0].truncated_tool_calls == ["call_2"]
    # The complete call ran; the cut-off one never did.
    assert marks.read("ran") == ["1"]
    assert [c.call_id for c in result.report.tool_calls] == ["call_1"]
    sent, _ = model.requests[1]
    assert_wellformed(sent)
    assistant = next(m for m in sent if isinstance(m, AssistantMessage))
    assert [c.call_id for c in assistant.tool_calls] == ["call_1"]
    assert [m.text for m in sent if isinstance(m, ToolMessage)] == ["recorded 1"]
    assert isinstance(sent[-1], UserMessage)
    assert "'record' was cut off and did not run" in sent[-1].text


async def test_a_cut_off_call_alone_is_dropped_and_the_conversation_stays_valid() -> None:
    model = ScriptedModel(
        [reply(tool_calls=[call("add", raw='{"a": 1, "b"')], finish="length"), "gave up"]
    )
    bot = raygent.agent(model=model, tools=[add], continue_on_output_limit=1)
    result = await bot.execute("go")
    assert result.ok and result.text == "gave up"
    sent, _ = model.requests[1]
    assert_wellformed(sent)
    assert "'add' was cut off" in sent[-1].text


async def test_blocks_are_replayed_verbatim_and_returned_for_single_trip_runs() -> None:
    single = await raygent.agent(model=ScriptedModel([reply("hi", blocks=[THINKING])])).execute("x")
    assert single.blocks == [THINKING]
    model = ScriptedModel(
        [reply(tool_calls=[call("add", {"a": 1, "b": 1})], blocks=[THINKING]), "2"]
    )
    multi = await raygent.agent(model=model, tools=[add]).execute("x")
    assert multi.ok and multi.blocks is None
    sent, _ = model.requests[1]
    assistant = next(m for m in sent if isinstance(m, AssistantMessage))
    assert assistant.content[0] == THINKING
    assert assistant.tool_calls[0].name == "add"


async def test_blocks_survive_a_continuation() -> None:
    model = ScriptedModel([reply("a", blocks=[THINKING], finish="length"), "b"])
    result = await raygent.agent(model=model, continue_on_output_limit=1).execute("x")
    assert result.ok and result.text == "ab" and result.blocks is None
    sent, _ = model.requests[1]
    assert sent[1].content[0] == THINKING


async def test_a_last_call_cut_before_any_argument_is_cut_off_too(tmp_path: Path) -> None:
    marks = Marks(tmp_path)

    @raygent.tool
    def ping(host: str = "localhost") -> str:
        """Ping."""
        marks.add("ran", host)
        return "pong"

    model = ScriptedModel(
        [
            reply(tool_calls=[call("ping", {"host": "a"}), call("ping", raw="")], finish="length"),
            "done",
        ]
    )
    bot = raygent.agent(model=model, tools=[ping], continue_on_output_limit=1)
    result = await bot.execute("go")
    assert result.ok
    assert marks.read("ran") == ["a"]
    assert result.report.trips[0].truncated_tool_calls == ["call_2"]
