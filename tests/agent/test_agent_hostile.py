"""A hostile or buggy model (and tools and handlers): the run holds up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_support import add, assert_wellformed, drain
from backend_support import Marks

import raygent
from raygent import AbortController, ModelOptions, ToolMessage
from raygent.errors import ProviderResponseError
from raygent.messages import Message
from raygent.observers.events import Event
from raygent.testing import FunctionModel, ScriptedModel, call, reply

TWENTY = 20


async def test_malformed_arguments_and_unknown_tools_are_told_to_the_model() -> None:
    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("add", raw="{not json"),
                    call("add", raw="[1, 2]"),
                    call("add", raw='"a string"'),
                    call("rm_rf", {"path": "/"}),
                    call("", {}),
                ]
            ),
            "sorry",
        ]
    )
    result = await raygent.agent(model=model, tools=[add]).execute("go")
    assert result.ok and result.text == "sorry"
    sent, _ = model.requests[1]
    assert_wellformed(sent)
    replies = [m for m in sent if isinstance(m, ToolMessage)]
    assert len(replies) == 5 and all(m.is_error for m in replies)
    assert "unknown tool 'rm_rf'" in replies[3].text
    assert all(c.error is not None for c in result.report.tool_calls)


async def test_twenty_calls_in_one_trip_run_at_once_and_answer_in_order(tmp_path: Path) -> None:
    # On Ray too: the tool asks for no placement, so its calls run on the node's tool
    # executors, all at once, whatever the node's CPUs.
    count = TWENTY
    marks = Marks(tmp_path)

    @raygent.tool
    async def slow_echo(n: int) -> str:
        """Echo once all of them are running."""
        marks.add("arrived", str(n))
        await marks.wait("arrived", count)
        # Each call finishes after the one behind it: the last asked finishes first.
        if n + 1 < count:
            await marks.wait(f"finished-{n + 1}")
        # Its place in the order first: the call behind it goes on once it is finished.
        marks.add("order", str(n))
        marks.add(f"finished-{n}")
        return f"echo {n}"

    calls = [call("slow_echo", {"n": n}, call_id=f"c{n:02}") for n in range(count)]
    model = ScriptedModel([reply(tool_calls=calls), "all echoed"])
    bot = raygent.agent(model=model, tools=[slow_echo])
    result = await asyncio.wait_for(bot.execute("go"), timeout=30)
    assert result.ok, result.error
    assert marks.read("order") == [str(n) for n in reversed(range(count))]
    sent, _ = model.requests[1]
    replies = [(m.call_id, m.text) for m in sent if isinstance(m, ToolMessage)]
    assert replies == [(f"c{n:02}", f"echo {n}") for n in range(count)]


async def test_a_huge_reply_goes_through_streamed_or_not() -> None:
    huge = "x" * 2_000_000
    executed = await raygent.agent(model=ScriptedModel([huge])).execute("go")
    assert executed.ok and executed.text == huge
    stream = raygent.agent(model=ScriptedModel([huge]), streaming_tool_guard=True).stream("go")
    events, streamed = await drain(stream)
    assert streamed.text == huge
    assert "".join(e.text for e in events if e.type == "agent.trip.streaming") == huge


async def test_huge_tool_arguments_are_fine() -> None:
    big = "y" * 500_000
    model = ScriptedModel([reply(tool_calls=[call("echo_len", {"text": big})]), "done"])

    @raygent.tool
    def echo_len(text: str) -> int:
        """Length."""
        return len(text)

    result = await raygent.agent(model=model, tools=[echo_len]).execute("go")
    assert result.ok and result.report.tool_calls[0].output == "500000"


async def test_a_tool_that_hangs_is_cancelled_by_its_timeout_or_an_abort(tmp_path: Path) -> None:
    marks = Marks(tmp_path)

    @raygent.tool(timeout=0.05)
    async def stuck() -> str:
        """Hangs."""
        await asyncio.get_running_loop().create_future()
        return "never"

    @raygent.tool
    async def stuck_forever() -> str:
        """Hangs with no timeout."""
        marks.add("started")
        await asyncio.get_running_loop().create_future()
        return "never"

    model = ScriptedModel([reply(tool_calls=[call("stuck")]), "moved on"])
    result = await raygent.agent(model=model, tools=[stuck]).execute("go")
    assert result.ok and result.text == "moved on"
    assert result.report.tool_calls[0].error["code"] == "TOOL_TIMEOUT"  # type: ignore[index]

    controller = AbortController()
    model = ScriptedModel([reply(tool_calls=[call("stuck_forever")])])
    run = asyncio.ensure_future(
        raygent.agent(model=model, tools=[stuck_forever]).execute("go", signal=controller.signal)
    )
    await marks.wait("started")
    controller.abort("hung tool")
    assert (await run).report.status == "cancelled"


async def test_a_handler_that_raises_on_every_event_breaks_nothing() -> None:
    def hostile(event: Event) -> None:
        raise RuntimeError(f"no {event.type}")

    model = ScriptedModel([reply(tool_calls=[call("add", {"a": 1, "b": 2})]), "3"])
    bot = raygent.agent(model=model, tools=[add], on={"*": [hostile, hostile]})
    events, result = await drain(bot.stream("go", on={"*": hostile}))
    assert result.ok and result.text == "3"
    assert len(result.report.handler_errors) == 3 * len(events)


async def test_a_model_that_returns_garbage_fails_the_run_typed() -> None:
    def garbage(messages: list[Message], options: ModelOptions) -> Any:
        return 42  # not a step

    result = await raygent.agent(model=FunctionModel(garbage)).execute("go")
    assert result.report.status == "failed"
    assert result.error is not None


async def test_a_stream_that_ends_without_a_reply_fails_typed() -> None:
    class Empty:
        name = "empty"
        provider = "test"
        capabilities = raygent.Capabilities()

        async def complete(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, *args: Any, **kwargs: Any) -> Any:
            return
            yield

    result = await raygent.agent(model=Empty()).stream("go").result  # type: ignore[arg-type]
    assert isinstance(result.error, ProviderResponseError)


async def test_duplicate_call_ids_do_not_break_the_conversation() -> None:
    model = ScriptedModel(
        [
            reply(
                tool_calls=[
                    call("add", {"a": 1, "b": 1}, call_id="same"),
                    call("add", {"a": 2, "b": 2}, call_id="same"),
                ]
            ),
            "ok",
        ]
    )
    result = await raygent.agent(model=model, tools=[add]).execute("go")
    assert result.ok
    sent, _ = model.requests[1]
    assert [m.text for m in sent if isinstance(m, ToolMessage)] == ["2", "4"]


async def test_a_model_that_loops_on_tools_is_stopped_by_max_trips() -> None:
    model = FunctionModel(
        lambda messages, options: reply(tool_calls=[call("add", {"a": 0, "b": 0})] * 3)
    )
    result = await raygent.agent(model=model, tools=[add], max_trips=4).execute("go")
    assert result.report.status == "failed"
    assert result.error is not None and result.error.code == "AGENT_MAX_TRIPS"
    assert len(result.report.tool_calls) == 12
