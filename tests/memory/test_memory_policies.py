"""Save policies on every store: exactly what `load` returns and what `record_error`
holds after each way a run can end (failure before the first trip completes, in the
tools, after a tool turn, mid-stream, abort and task cancellation), and how many
appends a successful run makes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from backend_support import Hanging
from memory_support import (
    POLICIES,
    AppendFails,
    Recorder,
    RecordErrorFails,
    Shape,
    assistant,
    batches,
    explode,
    lookup,
    result,
    shapes,
    sim_model,
    user,
)
from pydantic import BaseModel
from shared_support import Gate

import raygent
from raygent import AbortController, AgentResult, Memory, Repair
from raygent.errors import AgentCancelledError, ServerError
from raygent.messages import Message
from raygent.models.contract import ModelOptions
from raygent.sim import Fault, Match, Reply, Rule, ToolCallReply, serve
from raygent.stores import Scope, StoreUnavailableError
from raygent.testing import FunctionModel, ScriptedModel, call, reply

SCOPE = Scope("s1")
GO = user("go")
TOOL_TURN = [assistant("", "c1"), result("c1", "found x")]
LOOKUP = reply(tool_calls=[call("lookup", {"q": "x"}, call_id="c1")])
WAIT = reply(tool_calls=[call("wait_forever", call_id="c1")])


class City(BaseModel):
    name: str


@pytest.fixture(params=POLICIES)
def policy(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- the failure matrix ------------------------------------------------------------


@dataclass
class Ended:
    """How a scenario's run ended: its id and result (for a cancelled task, which
    raises CancelledError as it must, the result its agent.error event carried)."""

    run_id: str
    result: AgentResult


Runner = Callable[[Memory], Awaitable[Ended]]


@dataclass(frozen=True)
class Scenario:
    run: Runner
    turns: list[list[Shape]]  # the steps that completed after the input
    partial: list[Shape]  # the messages of the step that did not complete
    status: str
    code: str


def _session(memory: Memory, steps: list[Any], tools: list[Any] | None = None) -> Any:
    bot = raygent.agent(model=ScriptedModel(steps), tools=tools or [lookup], memory=memory)
    return bot.session("s1")


async def _executed(session: Any, **options: Any) -> Ended:
    outcome = await session.execute("go", **options)
    return Ended(outcome.report.run_id, outcome)


async def model_fails_first_trip(memory: Memory) -> Ended:
    return await _executed(_session(memory, [ServerError("upstream down", provider="test")]))


async def model_fails_after_tool_turn(memory: Memory) -> Ended:
    steps = [LOOKUP, ServerError("upstream down", provider="test")]
    return await _executed(_session(memory, steps))


async def _aborted_when(memory: Memory, steps: list[Any], tools: list[Any], ready: Any) -> Ended:
    controller = AbortController()
    task = asyncio.ensure_future(
        _executed(_session(memory, steps, tools), signal=controller.signal)
    )
    await ready.wait()
    controller.abort("user left")
    return await task


async def _cancelled_when(memory: Memory, steps: list[Any], tools: list[Any], ready: Any) -> Ended:
    seen = Recorder()
    task = asyncio.ensure_future(_executed(_session(memory, steps, tools), on={"*": seen}))
    await ready.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The cancelled run's result comes with its agent.error event.
    [errored] = [e for e in seen.events if e.type == "agent.error"]
    return Ended(seen.run_id, errored.result)


async def abort_in_first_trip(memory: Memory) -> Ended:
    gate = Gate()
    return await _aborted_when(memory, [gate], [lookup], gate.arrived)


async def abort_in_second_trip(memory: Memory) -> Ended:
    gate = Gate()
    return await _aborted_when(memory, [LOOKUP, gate], [lookup], gate.arrived)


async def abort_in_tools(memory: Memory) -> Ended:
    hanging = Hanging()
    ended = await _aborted_when(memory, [WAIT], [hanging.tool], hanging.started)
    await hanging.was_cancelled()
    return ended


async def cancel_in_first_trip(memory: Memory) -> Ended:
    gate = Gate()
    return await _cancelled_when(memory, [gate], [lookup], gate.arrived)


async def cancel_in_second_trip(memory: Memory) -> Ended:
    gate = Gate()
    return await _cancelled_when(memory, [LOOKUP, gate], [lookup], gate.arrived)


async def cancel_in_tools(memory: Memory) -> Ended:
    hanging = Hanging()
    ended = await _cancelled_when(memory, [WAIT], [hanging.tool], hanging.started)
    await hanging.was_cancelled()
    return ended


async def incomplete_after_tool_turn(memory: Memory) -> Ended:
    return await _executed(_session(memory, [LOOKUP, reply("cut off", finish="length")]))


async def abort_between_trips(memory: Memory) -> Ended:
    """Aborted once the tool-call reply is in, before its tools start."""
    controller = AbortController()

    def stop(event: Any) -> None:
        controller.abort("enough")

    session = _session(memory, [LOOKUP, "never"])
    return await _executed(session, signal=controller.signal, on={"agent.trip.completed": stop})


FIRST = Rule(
    match=Match(after_tool_result=False),
    reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"}, id="c1")]),
)


async def _streamed(memory: Memory, rules: list[Rule], abort_on_text: bool = False) -> Ended:
    """`session.stream` against the simulator over HTTP; optionally abort the run at
    the first text delta of the second trip (mid-stream)."""
    async with serve(rules) as sim:
        bot = raygent.agent(model=sim_model(sim.openai_base_url), tools=[lookup], memory=memory)
        stream = bot.session("s1").stream("go")
        async for event in stream:
            if abort_on_text and event.type == "agent.trip.streaming" and event.trip_index == 1:
                stream.abort("enough")
        outcome = await stream.result
    return Ended(outcome.report.run_id, outcome)


async def stream_cut_in_first_trip(memory: Memory) -> Ended:
    cut = Reply(text="never finished", fault=Fault(kind="truncate", after_chunks=2))
    return await _streamed(memory, [Rule(reply=cut)])


async def stream_cut_after_tool_turn(memory: Memory) -> Ended:
    cut = Reply(text="never finished", fault=Fault(kind="truncate", after_chunks=2))
    return await _streamed(memory, [FIRST, Rule(match=Match(after_tool_result=True), reply=cut)])


async def stream_aborted_mid_stream(memory: Memory) -> Ended:
    stuck = Reply(text="never finished", fault=Fault(kind="hang", after_chunks=2))
    rules = [FIRST, Rule(match=Match(after_tool_result=True), reply=stuck)]
    return await _streamed(memory, rules, abort_on_text=True)


SCENARIOS = {
    "model_fails_first_trip": Scenario(
        model_fails_first_trip, [], [], "failed", "PROVIDER_SERVER_ERROR"
    ),
    "model_fails_after_tool_turn": Scenario(
        model_fails_after_tool_turn, [TOOL_TURN], [], "failed", "PROVIDER_SERVER_ERROR"
    ),
    "abort_in_first_trip": Scenario(abort_in_first_trip, [], [], "cancelled", "AGENT_CANCELLED"),
    "abort_in_second_trip": Scenario(
        abort_in_second_trip, [TOOL_TURN], [], "cancelled", "AGENT_CANCELLED"
    ),
    "abort_in_tools": Scenario(
        abort_in_tools, [], [assistant("", "c1")], "cancelled", "AGENT_CANCELLED"
    ),
    "abort_between_trips": Scenario(
        abort_between_trips, [], [assistant("", "c1")], "cancelled", "AGENT_CANCELLED"
    ),
    "incomplete_after_tool_turn": Scenario(
        incomplete_after_tool_turn, [TOOL_TURN], [], "incomplete", "AGENT_INCOMPLETE"
    ),
    "cancel_in_first_trip": Scenario(cancel_in_first_trip, [], [], "cancelled", "AGENT_CANCELLED"),
    "cancel_in_second_trip": Scenario(
        cancel_in_second_trip, [TOOL_TURN], [], "cancelled", "AGENT_CANCELLED"
    ),
    "cancel_in_tools": Scenario(
        cancel_in_tools, [], [assistant("", "c1")], "cancelled", "AGENT_CANCELLED"
    ),
    "stream_cut_in_first_trip": Scenario(
        stream_cut_in_first_trip, [], [], "failed", "PROVIDER_BAD_RESPONSE"
    ),
    "stream_cut_after_tool_turn": Scenario(
        stream_cut_after_tool_turn, [TOOL_TURN], [], "failed", "PROVIDER_BAD_RESPONSE"
    ),
    "stream_aborted_mid_stream": Scenario(
        stream_aborted_mid_stream, [TOOL_TURN], [], "cancelled", "AGENT_CANCELLED"
    ),
}


def stored_by(policy: str, turns: list[list[Shape]]) -> list[Shape]:
    """What a failed run leaves in the history under `policy`."""
    done = [shape for turn in turns for shape in turn]
    if policy == "message":
        return [GO, *done]  # the input went in before the model loop
    if policy == "turn":
        return [GO, *done] if turns else []  # the input rides in the first whole turn
    return []  # run: nothing unless the run succeeds


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_a_failed_run_stores_what_its_policy_says(store: Any, policy: str, name: str) -> None:
    scenario = SCENARIOS[name]
    ended = await scenario.run(Memory(store, save_policy=policy))  # type: ignore[arg-type]
    assert ended.result.report.run_id == ended.run_id
    assert ended.result.report.status == scenario.status
    assert ended.result.error is not None
    assert ended.result.error.code == scenario.code
    if scenario.status == "cancelled":
        assert isinstance(ended.result.error, AgentCancelledError)
    assert shapes(await store.load(SCOPE)) == stored_by(policy, scenario.turns)
    [record] = await store.errors(SCOPE)
    assert record.run_id == ended.run_id
    assert record.error["code"] == scenario.code
    new = [GO, *(s for turn in scenario.turns for s in turn), *scenario.partial]
    assert shapes(record.messages) == new
    # Every stored message belongs to this run, and the error is not history.
    stored = await store.get_conversation(store.ref(SCOPE))
    assert {s.run_id for s in stored} <= {ended.run_id}


async def test_a_cancel_records_where_it_happened(store: Any, policy: str) -> None:
    ended = await cancel_in_tools(Memory(store, save_policy=policy))  # type: ignore[arg-type]
    [record] = await store.errors(SCOPE)
    assert record.run_id == ended.run_id
    assert (record.error["cancelled_at"], record.error["reason"]) == ("tools", "task cancelled")


# -- a raising tool is not a run failure -------------------------------------------


async def test_a_raising_tool_is_stored_as_an_error_result(store: Any, policy: str) -> None:
    steps = [reply(tool_calls=[call("explode", {"reason": "x"}, call_id="c1")]), "recovered"]
    bot = raygent.agent(model=ScriptedModel(steps), tools=[explode], memory=Memory(store, policy))  # type: ignore[arg-type]
    outcome = await bot.session("s1").execute("go")
    assert outcome.ok, outcome.error
    error_text = "Error: tool 'explode' raised RuntimeError: boom: x"
    assert shapes(await store.load(SCOPE)) == [
        GO,
        assistant("", "c1"),
        result("c1", error_text, is_error=True),
        assistant("recovered"),
    ]
    assert await store.errors(SCOPE) == []


# -- successful runs: the appends ---------------------------------------------------


async def test_a_single_trip_run(store: Any, policy: str) -> None:
    bot = raygent.agent(model=ScriptedModel(["hello"]), memory=Memory(store, policy))  # type: ignore[arg-type]
    outcome = await bot.session("s1").execute("go")
    assert outcome.ok, outcome.error
    run = outcome.report.run_id
    written = batches(await store.get_conversation(store.ref(SCOPE)))
    if policy == "message":
        assert written == [(run, 0, [GO]), (run, 1, [assistant("hello")])]
    else:  # turn: the prompt rides in the answer's batch; run: one batch
        assert written == [(run, 0, [GO, assistant("hello")])]
    assert await store.errors(SCOPE) == []


async def test_a_multi_turn_run(store: Any, policy: str) -> None:
    steps = [
        LOOKUP,
        reply(
            "Two more.",
            tool_calls=[
                call("lookup", {"q": "y"}, call_id="c2"),
                call("lookup", {"q": "z"}, call_id="c3"),
            ],
        ),
        "done",
    ]
    bot = raygent.agent(model=ScriptedModel(steps), tools=[lookup], memory=Memory(store, policy))  # type: ignore[arg-type]
    outcome = await bot.session("s1").execute("go")
    assert outcome.ok, outcome.error
    run = outcome.report.run_id
    second = [
        assistant("Two more.", "c2", "c3"),
        result("c2", "found y"),
        result("c3", "found z"),
    ]
    final = [assistant("done")]
    expected = {
        "message": [(run, 0, [GO]), (run, 1, TOOL_TURN), (run, 2, second), (run, 3, final)],
        "turn": [(run, 0, [GO, *TOOL_TURN]), (run, 1, second), (run, 2, final)],
        "run": [(run, 0, [GO, *TOOL_TURN, *second, *final])],
    }[policy]
    assert batches(await store.get_conversation(store.ref(SCOPE))) == expected
    assert shapes(await store.load(SCOPE)) == [GO, *TOOL_TURN, *second, *final]


async def test_a_paused_reply_and_its_resume_are_turns(store: Any, policy: str) -> None:
    steps = [reply("Thinking...", finish="pause_turn"), " done."]
    bot = raygent.agent(model=ScriptedModel(steps), memory=Memory(store, policy))  # type: ignore[arg-type]
    outcome = await bot.session("s1").execute("go")
    assert outcome.ok, outcome.error
    assert outcome.text == "Thinking... done."
    run = outcome.report.run_id
    paused, resumed = assistant("Thinking..."), assistant(" done.")
    assert (
        batches(await store.get_conversation(store.ref(SCOPE)))
        == {
            "message": [(run, 0, [GO]), (run, 1, [paused]), (run, 2, [resumed])],
            "turn": [(run, 0, [GO, paused]), (run, 1, [resumed])],
            "run": [(run, 0, [GO, paused, resumed])],
        }[policy]
    )


async def test_a_repair_is_a_turn_of_its_own(store: Any, policy: str) -> None:
    steps = ['{"nom": "Oslo"}', '{"name": "Oslo"}']
    memory = Memory(store, policy)  # type: ignore[arg-type]
    bot = raygent.agent(model=ScriptedModel(steps), output=City, memory=memory)
    outcome = await bot.session("s1").execute("go", repair=Repair(max_attempts=1))
    assert outcome.ok, outcome.error
    written = batches(await store.get_conversation(store.ref(SCOPE)))
    assert [turn for _, turn, _ in written] == {
        "message": [0, 1, 2],
        "turn": [0, 1],
        "run": [0],
    }[policy]
    roles = [s[0] for _, _, batch in written for s in batch]
    assert roles == ["user", "assistant", "user", "assistant"]


async def test_with_message_the_tool_call_is_stored_only_with_its_results(
    store: Any, policy: str
) -> None:
    """While the tools run, the assistant's tool-call message is not stored yet (a
    history never holds a call without its result)."""

    @raygent.tool
    async def peek() -> str:
        """Look at the stored history while the tools run (on Ray, in a worker: a copy of
        an in-memory store, taken when the tool is shipped, at its first call)."""
        return repr(shapes(await store.load(SCOPE)))

    steps = [reply(tool_calls=[call("peek", call_id="c1")]), "done"]
    bot = raygent.agent(model=ScriptedModel(steps), tools=[peek], memory=Memory(store, policy))  # type: ignore[arg-type]
    result = await bot.session("s1").execute("go")
    assert result.ok
    assert result.report.tool_calls[0].output == repr([GO] if policy == "message" else [])


async def test_a_stored_history_comes_after_the_system_prompt(store: Any, policy: str) -> None:
    model = ScriptedModel(["first", "second"])
    bot = raygent.agent(model=model, system_prompt="Be terse.", memory=Memory(store, policy))  # type: ignore[arg-type]
    session = bot.session("s1")
    await session.execute("one")
    await session.execute("two", history=[raygent.UserMessage(content="given")])
    sent, _ = model.requests[1]
    assert shapes(sent) == [
        ("system", "Be terse."),
        user("one"),
        assistant("first"),
        user("given"),
        user("two"),
    ]
    # The given history is context for this run, not stored.
    assert shapes(await store.load(SCOPE)) == [
        user("one"),
        assistant("first"),
        user("two"),
        assistant("second"),
    ]


# -- record_error and append failures ------------------------------------------------


async def test_a_failing_record_error_never_replaces_the_run_error(store: Any, policy: str) -> None:
    broken = RecordErrorFails(store)
    memory = Memory(broken, policy)  # type: ignore[arg-type]
    outcome = await model_fails_after_tool_turn(memory)
    assert outcome.result.report.status == "failed"
    assert isinstance(outcome.result.error, ServerError)
    assert outcome.result.report.error is not None
    assert outcome.result.report.error["code"] == "PROVIDER_SERVER_ERROR"
    assert broken.attempts == 1
    assert shapes(await store.load(SCOPE)) == stored_by(policy, [TOOL_TURN])
    assert await store.errors(SCOPE) == []


async def test_a_failing_record_error_on_cancel_still_cancels(store: Any, policy: str) -> None:
    broken = RecordErrorFails(store)
    ended = await abort_in_tools(Memory(broken, policy))  # type: ignore[arg-type]
    assert isinstance(ended.result.error, AgentCancelledError)
    assert broken.attempts == 1
    ended = await cancel_in_second_trip(Memory(broken, policy))  # type: ignore[arg-type]
    assert isinstance(ended.result.error, AgentCancelledError)
    assert broken.attempts == 2
    # A run that never held the session (it could not start) is recorded from the
    # store directly; that failing does not hide its error either.
    memory = Memory(broken, policy)  # type: ignore[arg-type]
    bot = raygent.agent(model=ScriptedModel(["never"]), system_prompt="{{x}}", memory=memory)
    outcome = await bot.session("s1").execute("go")
    assert outcome.error is not None and outcome.error.code == "PROMPT"
    assert broken.attempts == 3


async def test_a_failing_append_fails_the_run_typed(store: Any, policy: str) -> None:
    down = StoreUnavailableError("the store is down")
    memory = Memory(AppendFails(store, down), policy)  # type: ignore[arg-type]
    bot = raygent.agent(model=ScriptedModel([LOOKUP, "done"]), tools=[lookup], memory=memory)
    outcome = await bot.session("s1").execute("go")
    assert outcome.report.status == "failed"
    assert isinstance(outcome.error, StoreUnavailableError)
    [record] = await store.errors(SCOPE)
    assert record.error["code"] == "STORE_UNAVAILABLE"
    # message fails on the input; turn on the first turn; run at the end.
    expected = {
        "message": [GO],
        "turn": [GO, *TOOL_TURN],
        "run": [GO, *TOOL_TURN, assistant("done")],
    }[policy]
    assert shapes(record.messages) == expected
    assert await store.load(SCOPE) == []


async def test_a_model_step_sees_no_error_as_history(store: Any, policy: str) -> None:
    """Recorded errors are never loaded as history."""
    memory = Memory(store, policy)  # type: ignore[arg-type]
    await model_fails_first_trip(memory)
    sent: list[list[Message]] = []

    def answer(messages: list[Message], options: ModelOptions) -> str:
        sent.append(messages)
        return "fine"

    bot = raygent.agent(model=FunctionModel(answer), memory=memory)
    assert (await bot.session("s1").execute("again")).ok
    assert shapes(sent[0]) == [*stored_by(policy, []), user("again")]
