"""Observers: the global registry and the observe-all switch, `observe=` per agent and per
run, nested trees, JSON."""

from __future__ import annotations

import asyncio
import logging

import pytest
from observe_support import Kept, nested_agents
from shared_support import Gate

import raygent
from raygent import AbortController, AgentReport
from raygent.errors import InvalidOptionsError
from raygent.testing import FunctionModel, ScriptedModel


async def test_a_global_observer_gets_every_run_until_removed() -> None:
    kept = Kept()
    bot = raygent.agent(model=FunctionModel(lambda messages, options: "hi"))
    remove = raygent.observers.add(kept)
    try:
        with raygent.observers.observe_all(True):
            first = await bot.execute("one")
            second = await bot.execute("two")
    finally:
        remove()
    with raygent.observers.observe_all(True):
        await bot.execute("three")
    remove()  # twice is harmless
    assert [r.run_id for r in kept.reports] == [first.report.run_id, second.report.run_id]
    assert kept.reports[0] is first.report  # the finished report itself
    assert kept.reports[0].status == "completed" and kept.reports[0].ended_at is not None
    assert kept not in raygent.observers.registered()


async def test_a_registration_is_a_context_manager() -> None:
    kept = Kept()
    bot = raygent.agent(model=FunctionModel(lambda messages, options: "hi"))
    with raygent.observers.observe_all(True):
        with raygent.observers.add(kept):
            assert raygent.observers.registered()[-1] is kept
            await bot.execute("one")
        await bot.execute("two")
    assert len(kept.reports) == 1


async def test_registered_observers_see_the_runs_that_ask_and_every_run_with_observe_all() -> None:
    kept = Kept()

    def hi(messages: object, options: object) -> str:
        return "hi"

    plain = raygent.agent(model=FunctionModel(hi))
    asking = raygent.agent(model=FunctionModel(hi), observe=True)
    private = raygent.agent(model=FunctionModel(hi), observe=False)
    own = Kept()
    assert raygent.observers.observing_all() is False  # off until turned on
    with raygent.observers.add(kept):
        # Observe-all off: only the runs that say observe=True (on the agent or the call).
        await plain.execute("unasked")
        await plain.execute("run-local only", observe=own)
        called = await plain.execute("asked by the call", observe=True)
        agent_asked = await asking.execute("asked by the agent")
        seen_off = [r.run_id for r in kept.reports]
        with raygent.observers.observe_all(True) as switch:
            assert raygent.observers.observing_all() is True and switch.previous is False
            every = await plain.execute("every run")
            with_own = await plain.execute("a collector besides", observe=own)
            await plain.execute("opted out", observe=False)
            await private.execute("an agent opted out")
            overridden = await private.execute("the call overrides", observe=True)
            await asking.execute("the call opts out", observe=False)
        assert raygent.observers.observing_all() is False  # the block put it back
        await plain.execute("off again")
    assert seen_off == [called.report.run_id, agent_asked.report.run_id]
    assert [r.run_id for r in kept.reports] == [
        called.report.run_id,
        agent_asked.report.run_id,
        every.report.run_id,
        with_own.report.run_id,
        overridden.report.run_id,
    ]
    assert len(own.reports) == 2  # a run-local collector, whatever the switch
    # Not in a block: the switch stays as set.
    raygent.observers.observe_all()
    try:
        assert raygent.observers.observing_all() is True
    finally:
        raygent.observers.observe_all(False)
    with pytest.raises(TypeError):
        raygent.observers.observe_all("yes")  # type: ignore[arg-type]


def test_an_observer_added_twice_stays_until_both_are_removed() -> None:
    kept = Kept()
    first, second = raygent.observers.add(kept), raygent.observers.add(kept)
    first()
    first()  # a second call removes nothing more
    assert raygent.observers.registered().count(kept) == 1
    second()
    assert kept not in raygent.observers.registered()


async def test_observe_false_on_a_call_turns_every_observer_off() -> None:
    global_kept, agent_kept = Kept(), Kept()
    bot = raygent.agent(model=FunctionModel(lambda messages, options: "hi"), observe=agent_kept)
    with raygent.observers.add(global_kept), raygent.observers.observe_all(True):
        await bot.execute("quiet", observe=False)
        loud = await bot.execute("loud")
    assert [r.run_id for r in global_kept.reports] == [loud.report.run_id]
    assert [r.run_id for r in agent_kept.reports] == [loud.report.run_id]


async def test_per_call_and_per_agent_observers_add_to_the_global_ones() -> None:
    global_kept, agent_kept, call_kept = Kept(), Kept(), Kept()
    order: list[str] = []
    for name, kept in (("global", global_kept), ("agent", agent_kept), ("call", call_kept)):
        kept.reports = _Tagged(order, name)
    bot = raygent.agent(model=FunctionModel(lambda messages, options: "hi"), observe=[agent_kept])
    with raygent.observers.add(global_kept), raygent.observers.observe_all(True):
        # The global observer named again on the call still sees the report once.
        await bot.execute("go", observe=[call_kept, global_kept])
    assert order == ["global", "agent", "call"]


async def test_an_agent_with_observe_false_skips_global_observers_unless_a_call_asks() -> None:
    global_kept, own = Kept(), Kept()
    bot = raygent.agent(model=FunctionModel(lambda messages, options: "hi"), observe=False)
    with raygent.observers.add(global_kept), raygent.observers.observe_all(True):
        await bot.execute("private", observe=own)
        asked = await bot.execute("asked", observe=True)
    assert [r.run_id for r in global_kept.reports] == [asked.report.run_id]
    assert len(own.reports) == 1


async def test_async_observers_are_awaited_before_execute_returns() -> None:
    seen: list[str] = []

    async def slow(report: AgentReport) -> None:
        await asyncio.sleep(0)  # a real suspension inside the observer
        seen.append(report.run_id)

    result = await raygent.agent(model=ScriptedModel(["ok"])).execute("go", observe=slow)
    assert seen == [result.report.run_id]


async def test_an_observer_that_raises_is_logged_and_the_run_and_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(report: AgentReport) -> None:
        raise RuntimeError("observer down")

    async def broken_async(report: AgentReport) -> None:
        raise ValueError("async observer down")

    after = Kept()
    bot = raygent.agent(model=ScriptedModel(["fine"]))
    with caplog.at_level(logging.WARNING, logger="raygent.observers"):
        result = await bot.execute("go", observe=[broken, broken_async, after])
    assert result.ok and result.text == "fine"
    assert len(after.reports) == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "raygent.observers"]
    assert any("observer down" in m for m in messages)
    assert any("async observer down" in m for m in messages)


async def test_a_nested_run_is_delivered_once_inside_its_root_tree() -> None:
    kept = Kept()
    with raygent.observers.add(kept), raygent.observers.observe_all(True):
        result = await nested_agents().execute("tell me about birds")
    assert result.ok, result.error
    assert len(kept.reports) == 1  # not the nested run apart
    root = kept.reports[0]
    assert root.name == "editor" and root.parent_run_id is None
    by_name = {c.name: c for c in root.tool_calls}
    assert by_name["lookup"].child is None
    child = by_name["researcher"].child
    assert child is not None and child.name == "researcher"
    assert child.parent_run_id == root.run_id and child.root_run_id == root.run_id
    assert [c.output for c in child.tool_calls] == ["notes on owls"]
    # The tree's usage is what the result counted: the nested run's trips included.
    assert root.total_usage() == result.usage
    assert result.usage.requests == 4


async def test_failed_and_cancelled_runs_are_observed_too() -> None:
    kept = Kept()
    failing = raygent.agent(model=ScriptedModel([RuntimeError("provider exploded")]))
    failed = await failing.execute("go", observe=kept)

    gate, controller = Gate(), AbortController()
    hanging = raygent.agent(model=ScriptedModel([gate]))
    run = asyncio.ensure_future(hanging.execute("go", observe=kept, signal=controller.signal))
    await gate.arrived.wait()
    controller.abort("enough")
    cancelled = await run
    assert [r.status for r in kept.reports] == ["failed", "cancelled"]
    assert kept.reports[0].error is not None and failed.error is not None
    assert kept.reports[0].error["code"] == failed.error.code
    assert kept.reports[1] is cancelled.report


async def test_a_streamed_run_is_observed_after_its_last_event() -> None:
    order: list[str] = []

    def observer(report: AgentReport) -> None:
        order.append("observer")

    bot = raygent.agent(model=ScriptedModel(["streamed"]))
    stream = bot.stream(
        "go", observe=observer, on={"agent.completed": lambda e: order.append(e.type)}
    )
    events = [event.type async for event in stream]
    assert (await stream.result).ok
    assert events[-1] == "agent.completed"
    assert order == ["agent.completed", "observer"]


async def test_batch_runs_are_observed_through_run_options() -> None:
    kept = Kept()
    bot = raygent.agent(model=FunctionModel(lambda messages, options: messages[-1].text))
    result = await raygent.batch(
        bot, ["a", "b", "c"], progress=False, run_options={"observe": kept}
    )
    assert result.ok
    assert sorted(r.trips[0].output for r in kept.reports) == ["a", "b", "c"]


async def test_a_bad_observe_value_fails_the_run_typed_yet_is_observed() -> None:
    kept = Kept()
    bot = raygent.agent(model=ScriptedModel(["never"]), observe=kept)
    result = await bot.execute("go", observe=["not callable"])  # type: ignore[list-item]
    assert result.status == "failed"
    assert isinstance(result.error, InvalidOptionsError)
    assert [r.status for r in kept.reports] == ["failed"]
    with pytest.raises(TypeError):
        raygent.observers.add("nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        raygent.agent(model=ScriptedModel([]), observe=[42])  # type: ignore[list-item]


async def test_a_report_tree_round_trips_through_json() -> None:
    kept = Kept()
    agent = nested_agents(capture_messages=True)
    await agent.execute("tell me about birds", observe=kept, session_id="s-1")
    report = kept.reports[0]
    text = report.to_json()
    again = AgentReport.from_json(text)
    assert again == report
    assert again.to_json() == text
    child = next(c.child for c in again.tool_calls if c.child is not None)
    assert child.session_id == "s-1" and child.trips[-1].output == "Owls hunt at night."
    assert again.messages is not None and again.messages[-1].text.startswith("Birds")


class _Tagged(list[AgentReport]):
    """A report list that also notes which observer appended, to check the order."""

    def __init__(self, order: list[str], name: str) -> None:
        super().__init__()
        self._order, self._name = order, name

    def append(self, report: AgentReport) -> None:
        self._order.append(self._name)
        super().append(report)
