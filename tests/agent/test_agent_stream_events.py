"""Streaming and events: the event sequence, stream == execute, handler tiers and isolation."""

from __future__ import annotations

import json
import logging

import pytest
from agent_support import City, Recorder, add, drain, outcome, search

import raygent
from raygent import Repair
from raygent.observers.events import Event
from raygent.testing import ScriptedModel, Step, call, reply

TOOL_SCRIPT: list[Step] = [
    reply(
        "Looking.",
        [call("add", {"a": 2, "b": 3}), call("search", {"query": "q"})],
        reasoning="Two tools.",
    ),
    reply("It is 5.", reasoning="Done."),
]

SCRIPTS: dict[str, tuple[list[Step], dict[str, object]]] = {
    "text": (["Hello there, friend."], {}),
    "tools": (TOOL_SCRIPT, {}),
    "tool errors": ([reply(tool_calls=[call("add", raw="{bad"), call("nope")]), "ok"], {}),
    "output": (['{"name": "Oslo", "population": 1}'], {"output": City}),
    "repair": (["{}", '{"name": "Oslo", "population": 1}'], {"output": City, "repair": Repair()}),
    "continuation": (
        [reply("Once upon ", finish="length"), "a time."],
        {"continue_on_output_limit": 1},
    ),
    "pause": ([reply("a", finish="pause_turn"), "b"], {}),
    "incomplete": ([reply("cut", finish="length")], {}),
    "refusal": ([reply("no", finish="refusal")], {}),
    "max trips": ([reply(tool_calls=[call("add", {"a": 1, "b": 1})])] * 3, {"max_trips": 2}),
    "provider error": ([raygent.errors.ServerError("down", provider="test")], {}),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_stream_and_execute_give_identical_results(name: str) -> None:
    script, given = SCRIPTS[name]
    options = dict(given)
    max_trips = int(options.pop("max_trips", 10))  # type: ignore[call-overload]

    def make() -> raygent.Agent:
        return raygent.agent(
            model=ScriptedModel(list(script)), tools=[add, search], max_trips=max_trips
        )

    executed = await make().execute("go", **options)  # type: ignore[arg-type]
    events, streamed = await drain(make().stream("go", **options))  # type: ignore[arg-type]
    assert outcome(streamed) == outcome(executed)
    assert events[0].type == "agent.starting"
    assert events[-1].type == ("agent.completed" if executed.ok else "agent.error")
    assert events[-1].result is streamed


async def test_a_stream_yields_the_typed_events_in_order() -> None:
    stream = raygent.agent(model=ScriptedModel(TOOL_SCRIPT), tools=[add, search]).stream("go")
    events, result = await drain(stream)
    types = [e.type for e in events]
    first_trip = types[: types.index("agent.trip.completed") + 1]
    assert first_trip[0:2] == ["agent.starting", "agent.trip.started"]
    assert "agent.trip.reasoning" in first_trip and "agent.trip.streaming" in first_trip
    assert "agent.tool.streaming" in first_trip and "agent.trip.usage" in first_trip
    tool_events = types[len(first_trip) : types.index("agent.trip.started", len(first_trip))]
    assert sorted(tool_events) == sorted(["agent.tool.calling"] * 2 + ["agent.tool.called"] * 2)
    assert types[-2:] == ["agent.trip.completed", "agent.completed"]
    # Every event carries the run's ids; tool events carry the call id.
    assert {(e.run_id, e.root_run_id) for e in events} == {
        (result.report.run_id, result.report.root_run_id)
    }
    for event in events:
        if event.type.startswith("agent.tool."):
            assert event.call_id in {"call_1", "call_2"}
    # Deltas add up to the text, the reasoning and the arguments.
    trip0 = [e for e in events if getattr(e, "trip_index", None) == 0]
    assert "".join(e.text for e in trip0 if e.type == "agent.trip.streaming") == "Looking."
    assert "".join(e.text for e in trip0 if e.type == "agent.trip.reasoning") == "Two tools."
    args = {}
    for e in trip0:
        if e.type == "agent.tool.streaming":
            args[e.call_id] = args.get(e.call_id, "") + e.arguments_delta
    assert {k: json.loads(v) for k, v in args.items()} == {
        "call_1": {"a": 2, "b": 3},
        "call_2": {"query": "q"},
    }
    called = {e.call_id: e.output for e in events if e.type == "agent.tool.called"}
    assert called == {"call_1": "5", "call_2": "results for q (top 3)"}
    completed = [e for e in events if e.type == "agent.trip.completed"]
    assert [(e.trip_index, e.finish_reason, e.text) for e in completed] == [
        (0, "tool_calls", "Looking."),
        (1, "stop", "It is 5."),
    ]
    assert result.text == "It is 5."


STREAM_ONLY = {"agent.trip.streaming", "agent.trip.reasoning", "agent.trip.usage"}
STREAM_ONLY |= {"agent.tool.streaming"}


def _listened(script: list[Step], max_trips: int) -> tuple[raygent.Agent, list[Recorder]]:
    """An agent with a recorder on each tier (factory, instance), each listening to "*"
    and to the stream-only events by name; the call's recorder is the third."""
    factory, instance, per_call = Recorder(), Recorder(), Recorder()
    bot = raygent.agent(
        model=ScriptedModel(list(script)),
        tools=[add, search],
        max_trips=max_trips,
        on={"*": factory, **dict.fromkeys(STREAM_ONLY, factory)},
    )
    for kind in ["*", *STREAM_ONLY]:
        bot.on(kind, instance)
    return bot, [factory, instance, per_call]


@pytest.mark.parametrize("name", ["tools", "continuation", "max trips"])
async def test_execute_fires_the_lifecycle_events_and_stream_adds_the_deltas(name: str) -> None:
    script, given = SCRIPTS[name]
    options = dict(given)
    max_trips = int(options.pop("max_trips", 10))  # type: ignore[call-overload]
    executed, on_execute = _listened(script, max_trips)
    streamed, on_stream = _listened(script, max_trips)
    call_on = {kind: on_execute[2] for kind in ["*", *STREAM_ONLY]}
    await executed.execute("go", on=call_on, **options)  # type: ignore[arg-type]
    stream_on = {kind: on_stream[2] for kind in ["*", *STREAM_ONLY]}
    events, _ = await drain(streamed.stream("go", on=stream_on, **options))  # type: ignore[arg-type]
    yielded = [e.type for e in events]
    lifecycle = [t for t in yielded if t not in STREAM_ONLY]
    assert "agent.trip.usage" in yielded  # every script here has some delta to stream
    if name == "tools":
        assert set(yielded) >= STREAM_ONLY
    for recorder in on_execute:
        # execute(): the lifecycle events alone, the same ones, on every tier.
        assert recorder.types == lifecycle
    for recorder in on_stream:
        # stream(): the deltas on top (here once for "*" and once by name).
        assert [t for t in recorder.types if t not in STREAM_ONLY] == lifecycle
        deltas = [t for t in recorder.types if t in STREAM_ONLY]
        assert sorted(deltas) == sorted(2 * [t for t in yielded if t in STREAM_ONLY])


async def test_events_can_be_read_after_the_result() -> None:
    stream = raygent.agent(model=ScriptedModel(["hi"])).stream("go")
    result = await stream.result
    types = [e.type async for e in stream]
    assert types[0] == "agent.starting" and types[-1] == "agent.completed"
    assert result.text == "hi"
    assert [e async for e in stream] == []  # a second pass ends at once


async def test_handlers_fire_by_tier_factory_instance_call() -> None:
    order: list[str] = []

    def tag(name: str) -> raygent.observers.events.EventHandler:
        def handler(event: Event) -> None:
            order.append(f"{name}:{event.type}")

        return handler

    async def async_tag(event: Event) -> None:
        order.append(f"async:{event.type}")

    bot = raygent.agent(
        model=ScriptedModel(["a", "b"]),
        on={"agent.completed": [tag("factory"), async_tag], "*": tag("any")},
    )
    unsubscribe = bot.on("agent.completed", tag("instance"))
    await bot.execute("go", on={"agent.completed": tag("call")})
    completed = [o for o in order if o.endswith("agent.completed")]
    assert completed == [
        "factory:agent.completed",
        "async:agent.completed",
        "any:agent.completed",
        "instance:agent.completed",
        "call:agent.completed",
    ]
    assert "any:agent.starting" in order  # "*" sees every event
    order.clear()
    unsubscribe()
    unsubscribe()  # twice is harmless
    await bot.execute("go")
    assert "instance:agent.completed" not in order


async def test_a_handler_that_raises_is_isolated_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: Event) -> None:
        raise ValueError(f"handler broke on {event.type}")

    async def broken_async(event: Event) -> None:
        raise KeyError("async")

    seen = Recorder()
    bot = raygent.agent(
        model=ScriptedModel([reply(tool_calls=[call("add", {"a": 1, "b": 1})]), "2"]),
        tools=[add],
        on={"*": broken},
    )
    with caplog.at_level(logging.WARNING, logger="raygent.events"):
        result = await bot.execute(
            "go", on={"agent.tool.called": broken_async, "agent.completed": seen}
        )
    assert result.ok and result.text == "2"
    assert seen.types == ["agent.completed"]  # later handlers still run
    errors = result.report.handler_errors
    assert {e["event"] for e in errors if "ValueError" in e["error"]} >= {
        "agent.starting",
        "agent.trip.started",
        "agent.tool.calling",
        "agent.completed",
    }
    assert any("KeyError" in e["error"] and e["event"] == "agent.tool.called" for e in errors)
    assert "handler broke" in caplog.text


async def test_a_raising_handler_does_not_break_a_stream() -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("nope")

    stream = raygent.agent(model=ScriptedModel(["fine"])).stream("go", on={"*": broken})
    events, result = await drain(stream)
    assert result.ok and result.text == "fine"
    assert events[-1].type == "agent.completed"
