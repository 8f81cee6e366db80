"""Cancellation: abort signals and task cancellation, between trips, mid-trip, in tools."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from agent_support import Recorder, StreamOnlyModel, add
from backend_support import Hanging
from shared_support import Gate

import raygent
from raygent import AbortController, AbortSignal, ModelOptions
from raygent.errors import AgentCancelledError
from raygent.messages import Message
from raygent.models.contract import Done, ModelResponse, StreamChunk, TextDelta
from raygent.observers.events import Event
from raygent.testing import FunctionModel, ScriptedModel, call, reply
from raygent.usage import Usage


def _cancelled(result: raygent.AgentResult) -> AgentCancelledError:
    assert result.report.status == "cancelled"
    assert isinstance(result.error, AgentCancelledError)
    assert result.error.to_dict()["category"] == "cancelled"
    return result.error


async def test_an_already_aborted_signal_cancels_before_any_trip() -> None:
    controller = AbortController()
    controller.abort("user left")
    model = ScriptedModel(["never"])
    result = await raygent.agent(model=model).execute("hi", signal=controller.signal)
    error = _cancelled(result)
    assert error.details["reason"] == "user left"
    assert error.details["cancelled_at"] == "between_trips"
    assert model.requests == []


async def test_an_abort_mid_trip_closes_the_request() -> None:
    gate = Gate()
    controller = AbortController()
    model = ScriptedModel([gate])
    run = asyncio.ensure_future(raygent.agent(model=model).execute("hi", signal=controller.signal))
    await gate.arrived.wait()
    controller.abort("too slow")
    result = await run
    error = _cancelled(result)
    assert (error.details["cancelled_at"], error.details["reason"]) == ("trip", "too slow")
    assert error.details["trip_index"] == 0
    assert "too slow" in error.message or "trip" in error.message


async def test_an_abort_between_trips_starts_no_tools_and_no_more_trips() -> None:
    ran: list[int] = []

    @raygent.tool
    def record(n: int) -> str:
        """Record."""
        ran.append(n)
        return "ok"

    controller = AbortController()
    model = ScriptedModel([reply(tool_calls=[call("record", {"n": 1})]), "never"])

    def stop(event: Event) -> None:
        controller.abort("enough")

    bot = raygent.agent(model=model, tools=[record])
    result = await bot.execute("go", signal=controller.signal, on={"agent.trip.completed": stop})
    error = _cancelled(result)
    assert error.details["cancelled_at"] == "between_trips"
    assert ran == [] and len(model.requests) == 1
    assert result.report.trips[0].finish_reason == "tool_calls"


async def test_an_abort_cancels_running_tools() -> None:
    hanging = Hanging()
    controller = AbortController()
    model = ScriptedModel([reply(tool_calls=[call("wait_forever"), call("add", {"a": 1, "b": 2})])])
    bot = raygent.agent(model=model, tools=[hanging.tool, add])
    run = asyncio.ensure_future(bot.execute("go", signal=controller.signal))
    await hanging.started.wait()
    controller.abort("stop tools")
    result = await run
    await hanging.was_cancelled()
    error = _cancelled(result)
    assert error.details["cancelled_at"] == "tools"
    assert len(model.requests) == 1


async def test_an_abort_from_another_thread_works() -> None:
    gate = Gate()
    controller = AbortController()
    run = asyncio.ensure_future(
        raygent.agent(model=ScriptedModel([gate])).execute("hi", signal=controller.signal)
    )
    await gate.arrived.wait()
    await asyncio.to_thread(controller.abort, "from a thread")
    assert _cancelled(await run).details["reason"] == "from a thread"


async def test_cancelling_the_awaiting_task_records_then_reraises() -> None:
    gate = Gate()
    errors = Recorder()
    bot = raygent.agent(model=ScriptedModel([gate]))
    task = asyncio.ensure_future(bot.execute("hi", on={"agent.error": errors}))
    await gate.arrived.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [event] = errors.events
    error = _cancelled(event.result)
    assert error.details["cancelled_at"] == "trip"
    assert error.details["reason"] == "task cancelled"
    assert event.error["code"] == "AGENT_CANCELLED"
    assert event.result.report.ended_at is not None


async def test_cancelling_the_task_during_tools_cancels_them() -> None:
    hanging = Hanging()
    errors = Recorder()
    model = ScriptedModel([reply(tool_calls=[call("wait_forever")])])
    task = asyncio.ensure_future(
        raygent.agent(model=model, tools=[hanging.tool]).execute("go", on={"agent.error": errors})
    )
    await hanging.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await hanging.was_cancelled()
    assert _cancelled(errors.events[0].result).details["cancelled_at"] == "tools"


async def test_a_stream_abort_gives_a_cancelled_result() -> None:
    gate = Gate()
    stream = raygent.agent(model=ScriptedModel([gate])).stream("hi")
    await gate.arrived.wait()
    stream.abort("stop streaming")
    events = [e.type async for e in stream]
    result = await stream.result
    assert _cancelled(result).details["reason"] == "stop streaming"
    assert events[-1] == "agent.error"


async def test_cancelling_the_stream_consumer_gives_a_cancelled_result() -> None:
    gate = Gate()
    stream = raygent.agent(model=ScriptedModel([gate])).stream("hi")

    async def consume() -> None:
        async for _ in stream:
            pass

    consumer = asyncio.ensure_future(consume())
    await gate.arrived.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    result = await stream.result
    assert _cancelled(result).details["cancelled_at"] == "trip"


async def test_cancelling_a_task_awaiting_stream_result_gives_the_cancelled_result() -> None:
    gate = Gate()
    stream = raygent.agent(model=ScriptedModel([gate])).stream("hi")

    async def wait_result() -> raygent.AgentResult:
        return await stream.result

    waiter = asyncio.ensure_future(wait_result())
    await gate.arrived.wait()
    waiter.cancel()
    result = await stream.result
    assert _cancelled(result).details["cancelled_at"] == "trip"


class SlowStreamModel(StreamOnlyModel):
    """Streams two deltas, then waits forever; records when its stream is closed."""

    name = "slow-stream"

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def stream(
        self,
        messages: Sequence[Message],
        options: ModelOptions | None = None,
        *,
        signal: AbortSignal | None = None,
    ) -> AsyncIterator[StreamChunk]:
        try:
            yield TextDelta("hello ")
            yield TextDelta("world")
            await asyncio.get_running_loop().create_future()
            yield Done(ModelResponse(finish_reason="stop", usage=Usage(), provider=self.provider))
        finally:
            self.closed.set()


async def test_a_cancelled_stream_closes_the_model_stream_at_once() -> None:
    model = SlowStreamModel()
    blocked = asyncio.Event()

    async def slow_handler(event: Event) -> None:
        blocked.set()
        await asyncio.get_running_loop().create_future()  # the run waits here

    stream = raygent.agent(model=model).stream("hi", on={"agent.trip.streaming": slow_handler})

    async def consume() -> None:
        async for _ in stream:
            pass

    consumer = asyncio.ensure_future(consume())
    await blocked.wait()
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    result = await stream.result
    assert result.report.status == "cancelled"
    # Closed by the run itself, not later by the garbage collector.
    assert model.closed.is_set()


async def test_a_nested_run_is_cancelled_with_its_parent() -> None:
    hanging = Hanging()
    child = raygent.agent(
        "child",
        model=ScriptedModel([reply(tool_calls=[call("wait_forever")])]),
        tools=[hanging.tool],
    )
    controller = AbortController()
    parent = raygent.agent(
        model=ScriptedModel([reply(tool_calls=[call("child", {"input": "go"})])]), tools=[child]
    )
    run = asyncio.ensure_future(parent.execute("go", signal=controller.signal))
    await hanging.started.wait()
    controller.abort("all stop")
    result = await run
    await hanging.was_cancelled()
    assert _cancelled(result).details["reason"] == "all stop"


async def test_a_shared_signal_does_not_keep_finished_runs_alive() -> None:
    controller = AbortController()
    bot = raygent.agent(model=FunctionModel(lambda messages, options: "ok"))
    for _ in range(5):
        assert (await bot.execute("hi", signal=controller.signal)).ok
    gate = Gate()
    run = asyncio.ensure_future(
        raygent.agent(model=ScriptedModel([gate])).execute("hi", signal=controller.signal)
    )
    await gate.arrived.wait()
    assert len(controller.signal._callbacks) == 1  # only the live run listens
    controller.abort("bye")
    _cancelled(await run)


async def test_a_stream_cancelled_before_it_starts_ends_its_events() -> None:
    model = ScriptedModel(["never"])
    stream = raygent.agent(model=model).stream("hi")
    stream.result.cancel()
    assert [e async for e in stream] == []
    with pytest.raises(asyncio.CancelledError):
        await stream.result
    assert model.requests == []
