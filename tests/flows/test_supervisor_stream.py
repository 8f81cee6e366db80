"""A supervisor streamed and observed: its events and every nested run's (with their own
run_id and the supervisor's root_run_id), nested supervisors, abort, one report tree."""

from __future__ import annotations

import asyncio
from typing import Any

from supervisor_support import Recorder, echo, sim_model

import raygent
from raygent.observers.report import FlowReport, RunReport
from raygent.sim import Match, Reply, Rule, serve
from raygent.testing import ScriptedModel, hang, mock_router

ROUTER = "router of a team"


def flow_steps(events: list[Any], run_id: str) -> list[tuple[str, str, int | None]]:
    return [
        (e.type, e.step, e.iteration)
        for e in events
        if e.type.startswith("flow.step.") and e.run_id == run_id
    ]


async def test_a_stream_carries_every_nested_runs_events() -> None:
    script = [
        Rule(
            match=Match(system=ROUTER),
            reply=[Reply(json={"intent": "billing"}), Reply(json={"intent": "END"})],
        ),
        Rule(match=Match(system="billing"), reply=Reply(text="Refunded.")),
    ]
    async with serve(script) as sim:
        billing = raygent.agent(
            name="billing_bot", model=sim_model("openai", sim), system_prompt="billing"
        )
        router = raygent.router(model=sim_model("openai", sim), intents=["billing"])
        desk = raygent.supervisor(name="desk", intents={"billing": billing}, router=router)
        stream = desk.stream("charged twice")
        events = [event async for event in stream]
        result = await stream.result

    assert result.ok, result.error
    root = result.run_id
    assert events[0].type == "flow.starting" and events[0].run_id == root
    assert events[-1].type == "flow.completed" and events[-1].result is result
    assert all(e.root_run_id == root for e in events)
    children = {r.run_id: r.name for r in result.report.runs()}
    assert len(children) == 3  # two routings, one intent
    assert {e.run_id for e in events} == {root, *children}
    for run_id in children:
        types = [e.type for e in events if e.run_id == run_id]
        assert types[0] == "agent.starting" and types[-1] == "agent.completed"
    assert flow_steps(events, root) == [
        ("flow.step.started", "route", 1),
        ("flow.step.completed", "route", 1),
        ("flow.step.started", "billing", 1),
        ("flow.step.completed", "billing", 1),
        ("flow.step.started", "route", 2),
        ("flow.step.completed", "route", 2),
    ]
    # The intent's run happens inside its step.
    billing_run = next(k for k, v in children.items() if v == "billing_bot")
    order = [(e.type, e.run_id) for e in events]
    started = order.index(("flow.step.started", root), 2)
    ended = order.index(("flow.step.completed", root), started)
    inside = {run_id for _, run_id in order[started:ended]}
    assert billing_run in inside


async def test_on_handlers_of_a_call_see_nested_events_too() -> None:
    seen = Recorder()
    desk = raygent.supervisor(
        name="desk", intents={"tech": echo("tech")}, route=mock_router(["tech"])
    )
    result = await desk.execute("x", on={"*": seen})
    (child,) = result.report.runs()
    assert next(e.type for e in seen.events if e.run_id == child.run_id) == "agent.starting"
    assert {e.root_run_id for e in seen.events} == {result.run_id}
    assert seen.of("flow.completed")[0].result is result


async def test_a_supervisor_as_an_intent_nests_its_report_and_events() -> None:
    inner = raygent.supervisor(
        name="inner", intents={"tech": echo("tech")}, route=mock_router(["tech"])
    )
    outer = raygent.supervisor(
        name="outer",
        intents={"escalate": inner, "billing": echo("billing")},
        route=mock_router([["billing", "escalate"]]),
    )
    seen = Recorder()
    result = await outer.execute("x", on={"*": seen})

    assert result.ok, result.error
    assert result.data == {"billing": "billing: x", "escalate": "tech: x"}
    nested = result.report.step("escalate")
    assert nested is not None
    inner_report = nested.runs[0].report
    assert isinstance(inner_report, FlowReport) and inner_report.kind == "supervisor"
    assert inner_report.parent_run_id == result.run_id
    assert inner_report.root_run_id == result.run_id
    (inner_agent,) = inner_report.runs()
    assert inner_agent.root_run_id == result.run_id
    assert inner_agent.parent_run_id == inner_report.run_id
    assert {e.root_run_id for e in seen.events} == {result.run_id}
    assert inner_agent.run_id in {e.run_id for e in seen.events}
    assert result.usage.requests == 2 == result.report.total_usage().requests


async def test_aborting_a_stream_cancels_the_running_intent() -> None:
    stuck = raygent.agent(name="stuck", model=ScriptedModel([hang()]))
    desk = raygent.supervisor(name="desk", intents={"stuck": stuck}, route=mock_router(["stuck"]))
    stream = desk.stream("x")
    async for event in stream:
        if event.type == "agent.trip.started":
            stream.abort("user left")
    result = await asyncio.wait_for(stream.result, 10)

    assert result.status == "cancelled"
    assert result.error is not None and result.error.category == "cancelled"
    step = result.report.step("stuck")
    assert step is not None and step.status == "cancelled"
    assert step.runs[0].report.status == "cancelled"


async def test_observers_get_one_tree() -> None:
    delivered: list[RunReport] = []
    router = mock_router([["billing", "tech"]])
    desk = raygent.supervisor(
        name="desk",
        intents={"billing": echo("billing"), "tech": echo("tech")},
        route=router,
        observe=delivered.append,
    )
    result = await desk.execute("x")
    assert delivered == [result.report]
    assert [r.name for r in result.report.runs()] == ["billing", "tech"]
    assert FlowReport.from_json(result.report.to_json()) == result.report
