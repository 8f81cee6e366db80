"""Tools in a run: concurrency, order, errors sent back to the model, nesting, schemas."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import Recorder, add, assert_wellformed, calc, explode, search
from backend_support import Marks

import raygent
from raygent import Pricing, ToolContext, ToolMessage
from raygent.errors import MaxTripsError
from raygent.messages import Message
from raygent.models.contract import ModelOptions
from raygent.testing import FunctionModel, ScriptedModel, call, reply

PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)


def _tool_messages(messages: list[Message]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_tools_run_and_their_results_go_back_to_the_model() -> None:
    model = ScriptedModel(
        [
            reply("Let me add.", [call("add", {"a": 2, "b": 3}), call("search", {"query": "x"})]),
            "5, and found x.",
        ]
    )
    result = await raygent.agent(model=model, tools=[add, search]).execute("go")
    assert result.ok and result.text == "5, and found x."
    sent, options = model.requests[1]
    assert_wellformed(sent)
    results = _tool_messages(sent)
    assert [(m.call_id, m.name, m.text) for m in results] == [
        ("call_1", "add", "5"),
        ("call_2", "search", "results for x (top 3)"),
    ]
    # The description comes from the docstring; the arguments' schema from the hints.
    spec = {t.name: t for t in options.tools}["add"]
    assert spec.description == "Add two integers."
    assert spec.parameters["properties"]["a"]["description"] == "The first number."
    assert spec.parameters["required"] == ["a", "b"]
    calls = result.report.tool_calls
    assert [(c.call_id, c.name, c.input, c.output, c.trip_index) for c in calls] == [
        ("call_1", "add", {"a": 2, "b": 3}, "5", 0),
        ("call_2", "search", {"query": "x"}, "results for x (top 3)", 0),
    ]
    assert all(c.timing.duration is not None and c.error is None for c in calls)
    assert result.report.trips[0].tool_calls == ["call_1", "call_2"]
    assert result.report.trips[1].purpose == "tools"


async def test_the_calls_of_one_trip_run_concurrently_and_answer_in_the_model_s_order(
    tmp_path: Path,
) -> None:
    marks = Marks(tmp_path)  # the tools may run in other processes (Ray)

    @raygent.tool
    async def step(key: str) -> str:
        """One step."""
        marks.add("started", key)
        await marks.wait("started", 3)  # times out unless all three run at once
        # c finishes first, then b, then a.
        after = {"a": "b", "b": "c"}.get(key)
        if after is not None:
            await marks.wait(f"finished-{after}")
        marks.add("finish-order", key)
        marks.add(f"finished-{key}")
        return f"done {key}"

    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("step", {"key": "a"}, call_id="id-a"),
                    call("step", {"key": "b"}, call_id="id-b"),
                    call("step", {"key": "c"}, call_id="id-c"),
                ]
            ),
            "all done",
        ]
    )
    result = await asyncio.wait_for(
        raygent.agent(model=model, tools=[step]).execute("go"), timeout=30
    )
    assert result.ok, result.error
    assert marks.read("finish-order") == ["c", "b", "a"]
    sent, _ = model.requests[1]
    assert [(m.call_id, m.text) for m in _tool_messages(sent)] == [
        ("id-a", "done a"),
        ("id-b", "done b"),
        ("id-c", "done c"),
    ]
    assert [c.call_id for c in result.report.tool_calls] == ["id-a", "id-b", "id-c"]


@pytest.mark.local_only("the tool reaches back into this process's event loop")
async def test_sync_tools_run_off_the_event_loop() -> None:
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()

    @raygent.tool
    def blocking() -> str:
        """Waits for the loop to be free."""
        # If this ran on the loop, the loop could never set the event.
        asyncio.run_coroutine_threadsafe(_set(gate), loop).result(timeout=10)
        return "unblocked"

    model = ScriptedModel([reply(tool_calls=[call("blocking")]), "ok"])
    result = await raygent.agent(model=model, tools=[blocking]).execute("go")
    assert result.ok and result.report.tool_calls[0].output == "unblocked"


async def _set(event: asyncio.Event) -> None:
    event.set()


async def test_tool_errors_go_to_the_model_and_the_run_goes_on() -> None:
    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("add", {"a": "not a number", "b": 1}),
                    call("nope", {}),
                    call("explode", {"reason": "test"}),
                    call("add", raw='{"a": 1, "b":'),
                    call("calc", {"expression": "1+2"}),
                ]
            ),
            "recovered",
        ]
    )
    recorder = Recorder()
    bot = raygent.agent(model=model, tools=[add, calc, explode])
    result = await bot.execute("go", on={"*": recorder})
    assert result.ok and result.text == "recovered"
    sent, _ = model.requests[1]
    assert_wellformed(sent)
    bad_arg, unknown, raised, malformed, fine = _tool_messages(sent)
    assert bad_arg.is_error and "invalid arguments for tool 'add'" in bad_arg.text
    assert "a:" in bad_arg.text
    assert unknown.is_error and "unknown tool 'nope'" in unknown.text
    assert "add, calc, explode" in unknown.text
    assert raised.is_error and "RuntimeError" in raised.text and "boom: test" in raised.text
    assert malformed.is_error and "not a valid JSON object" in malformed.text
    assert not fine.is_error and fine.text == "3"
    failed = recorder.of("agent.tool.failed")
    # They finish in any order (they run concurrently); each names its call.
    assert {e.call_id: e.error["code"] for e in failed} == {
        "call_1": "TOOL_INVALID_ARGUMENTS",
        "call_2": "TOOL_EXECUTION",
        "call_3": "TOOL_EXECUTION",
        "call_4": "TOOL_INVALID_ARGUMENTS",
    }
    assert [e.call_id for e in recorder.of("agent.tool.called")] == ["call_5"]
    errors = [c.error for c in result.report.tool_calls]
    assert [e is not None for e in errors] == [True, True, True, True, False]


async def test_more_trips_than_max_trips_fail_with_a_typed_error() -> None:
    def forever(messages: list[Message], options: ModelOptions) -> Any:
        return reply(tool_calls=[call("add", {"a": 1, "b": 1})])

    model = FunctionModel(forever)
    result = await raygent.agent(model=model, tools=[add], max_trips=3).execute("loop")
    assert result.report.status == "failed"
    assert isinstance(result.error, MaxTripsError)
    assert result.error.details["max_trips"] == 3
    assert result.error.to_dict()["code"] == "AGENT_MAX_TRIPS"
    assert len(model.requests) == 3 and len(result.report.trips) == 3
    assert len(result.report.tool_calls) == 3


async def test_compact_schemas_drop_descriptions_but_validate_the_same() -> None:
    model = ScriptedModel(
        [reply(tool_calls=[call("search", {"query": 5})]), "a", "b"],
    )
    bot = raygent.agent(model=model, tools=[search], tool_schemas="compact")
    result = await bot.execute("go")
    assert result.ok
    _, options = model.requests[0]
    [spec] = options.tools
    assert spec.description == ""
    assert spec.parameters == {
        "additionalProperties": False,
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
        "type": "object",
    }
    assert result.report.tool_calls[0].error is not None  # 5 is not a string
    # Per call, the full schemas come back.
    await bot.execute("go", tool_schemas="full")
    _, options = model.requests[2]
    assert options.tools[0].description == "Search the web."
    assert options.tools[0].parameters["properties"]["limit"]["default"] == 3


async def test_a_tool_sees_its_context() -> None:
    @raygent.tool
    async def whoami(ctx: ToolContext) -> dict[str, Any]:
        """Report the context (its return value, wherever the tool runs)."""
        seen = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
        seen.pop("signal")
        return {**seen, "signal": ctx.signal is not None and not ctx.signal.aborted}

    model = ScriptedModel([reply(tool_calls=[call("whoami", call_id="c-9")]), "ok"])
    bot = raygent.agent(model=model, tools=[whoami])
    result = await bot.execute("go", session_id="s-1", deps={"db": 1})
    ctx = json.loads(result.report.tool_calls[0].output)  # type: ignore[arg-type]
    assert ctx == {
        "run_id": result.report.run_id,
        "root_run_id": result.report.root_run_id,
        "session_id": "s-1",
        "call_id": "c-9",
        "tool_name": "whoami",
        "trip_index": 0,
        "deps": {"db": 1},
        "signal": True,  # a live signal, not yet aborted
    }


async def test_an_agent_in_tools_runs_as_a_nested_run() -> None:
    child_model = ScriptedModel(
        [reply(tool_calls=[call("add", {"a": 20, "b": 22})]), "The sum is 42."],
        name="child-m",
        pricing=PRICING,
    )
    child = raygent.agent("adder", model=child_model, tools=[add])
    parent_model = ScriptedModel(
        [reply(tool_calls=[call("adder", {"input": "add 20 and 22"})]), "It is 42."],
        name="parent-m",
        pricing=PRICING,
    )
    parent = raygent.agent("boss", model=parent_model, tools=[child])
    result = await parent.execute("what is 20+22?", session_id="sess-n")
    assert result.ok and result.text == "It is 42."
    # The child got the model's input and the model got the child's answer.
    child_sent, _ = child_model.requests[0]
    assert child_sent[-1].text == "add 20 and 22"
    parent_sent, parent_options = parent_model.requests[1]
    assert _tool_messages(parent_sent)[0].text == "The sum is 42."
    assert parent_options.tools[0].name == "adder"
    assert parent_options.tools[0].parameters["required"] == ["input"]
    # Its report hangs under the call, with the parent's ids and session.
    report = result.report
    child_report = report.tool_calls[0].child
    assert child_report is not None
    assert child_report.name == "adder" and child_report.status == "completed"
    assert child_report.parent_run_id == report.run_id
    assert child_report.root_run_id == report.root_run_id == report.run_id
    assert child_report.run_id != report.run_id
    assert child_report.session_id == "sess-n"
    assert [t.session_id for t in child_report.trips] == ["sess-n", "sess-n"]
    assert child_report.tool_calls[0].session_id == "sess-n"
    # Its usage is added to the parent's.
    parent_trips = sum((t.usage for t in report.trips), raygent.Usage())
    child_usage = sum((t.usage for t in child_report.trips), raygent.Usage())
    expected = parent_trips + child_usage
    assert result.usage.model_dump(exclude={"cost"}) == expected.model_dump(exclude={"cost"})
    assert result.usage.cost is not None and expected.cost is not None
    assert result.usage.cost.total == pytest.approx(expected.cost.total)
    assert result.usage.requests == 4


async def test_a_failing_nested_agent_is_a_tool_error_for_the_parent() -> None:
    child = raygent.agent("helper", model=ScriptedModel([RuntimeError("child broke")]))
    parent_model = ScriptedModel(
        [reply(tool_calls=[call("helper", {"input": "help"})]), "I could not get help."]
    )
    result = await raygent.agent(model=parent_model, tools=[child]).execute("go")
    assert result.ok
    record = result.report.tool_calls[0]
    assert record.error is not None and record.error["code"] == "TOOL_EXECUTION"
    assert record.child is not None and record.child.status == "failed"
    sent, _ = parent_model.requests[1]
    assert _tool_messages(sent)[0].is_error


async def test_nested_agents_nest_deeply_with_one_root() -> None:
    leaf = raygent.agent("leaf", model=ScriptedModel(["leaf says hi"]))
    middle = raygent.agent(
        "middle",
        model=ScriptedModel([reply(tool_calls=[call("leaf", {"input": "hi"})]), "middle done"]),
        tools=[leaf],
    )
    top = raygent.agent(
        "top",
        model=ScriptedModel([reply(tool_calls=[call("middle", {"input": "go"})]), "top done"]),
        tools=[middle.as_tool(description="The middle agent.")],
    )
    result = await top.execute("start", session_id="deep")
    middle_report = result.report.tool_calls[0].child
    assert middle_report is not None
    leaf_report = middle_report.tool_calls[0].child
    assert leaf_report is not None
    root = result.report.run_id
    assert {middle_report.root_run_id, leaf_report.root_run_id} == {root}
    assert leaf_report.parent_run_id == middle_report.run_id
    assert leaf_report.session_id == "deep"
    assert result.usage.requests == 5


def test_two_tools_with_one_name_are_refused() -> None:
    def other(a: int) -> int:
        return a

    other_tool = raygent.tool(name="add")(other)
    try:
        raygent.agent(model=ScriptedModel([]), tools=[add, other_tool])
    except ValueError as exc:
        assert "add" in str(exc)
    else:
        raise AssertionError("expected a ValueError")


async def test_a_tool_s_own_abort_is_its_failure_not_the_run_s() -> None:
    @raygent.tool
    async def gives_up() -> str:
        """Aborts its own work."""
        raise raygent.errors.AbortedError("my own deadline", reason="deadline")

    model = ScriptedModel([reply(tool_calls=[call("gives_up")]), "handled"])
    result = await raygent.agent(model=model, tools=[gives_up]).execute("go")
    assert result.ok and result.text == "handled"
    assert result.report.tool_calls[0].error["code"] == "ABORTED"  # type: ignore[index]
