"""A workflow's runs: a nested workflow as a step, streamed events of every nested run,
one report tree for the observers, usage summed over the runs, an abort."""

from __future__ import annotations

import asyncio

from flows_support import Observed, Recorder, assert_usage_equal, sim_agent, step_statuses

import raygent
from raygent import AbortController, FlowReport
from raygent.errors import AbortedError
from raygent.observers.report import AgentReport
from raygent.sim import Fault, Match, Reply, Rule, Simulator, serve

SCRIPT = [
    Rule(match=Match(system="^researcher"), reply=Reply(text="three facts")),
    Rule(match=Match(system="^writer"), reply=Reply(text="a short essay")),
    Rule(match=Match(system="^editor"), reply=Reply(text="an edited essay")),
]


def pipeline(sim: Simulator, **options: object) -> raygent.Workflow:
    """research -> (a nested workflow: write -> tidy) -> edit."""
    drafting = raygent.workflow(
        name="drafting",
        steps=[
            raygent.step("write", agent=sim_agent(sim, "writer")),
            raygent.step("tidy", run=lambda s: s.last.strip()),
        ],
    )
    return raygent.workflow(
        name="essay",
        steps=[
            raygent.step("research", agent=sim_agent(sim, "researcher")),
            raygent.step("draft", agent=drafting),
            raygent.step("edit", agent=sim_agent(sim, "editor")),
        ],
        **options,  # type: ignore[arg-type]
    )


async def test_a_workflow_runs_as_a_step_of_another() -> None:
    async with serve(SCRIPT) as sim:
        result = await pipeline(sim).execute("Write about Ray.")
    assert result.ok, result.error
    assert result.data == "an edited essay"
    assert result.outputs == {
        "research": "three facts",
        "draft": "a short essay",
        "edit": "an edited essay",
    }
    inner = result.report.step("draft").runs[0].report  # type: ignore[union-attr]
    assert isinstance(inner, FlowReport) and inner.name == "drafting"
    assert inner.parent_run_id == result.run_id
    assert inner.root_run_id == result.run_id
    written = inner.step("write").runs[0].report  # type: ignore[union-attr]
    assert isinstance(written, AgentReport)
    assert written.parent_run_id == inner.run_id
    assert written.root_run_id == result.run_id
    assert [s.name for s in inner.steps] == ["write", "tidy"]


async def test_usage_is_the_sum_of_every_runs_usage_cost_included() -> None:
    async with serve(SCRIPT) as sim:
        result = await pipeline(sim).execute("Write about Ray.")
    agents = [
        run
        for step in result.report.steps
        for run in (s.report for s in step.runs)
        if isinstance(run, AgentReport)
    ]
    inner = result.report.step("draft").runs[0].report  # type: ignore[union-attr]
    assert isinstance(inner, FlowReport)
    agents += [r for r in inner.runs() if isinstance(r, AgentReport)]
    assert len(agents) == 3
    total = sum((a.total_usage() for a in agents), raygent.Usage())
    assert_usage_equal(result.usage, total)
    assert result.usage.requests == 3
    assert result.usage.cost is not None and result.usage.cost.total > 0


async def test_streamed_events_carry_the_ids_of_every_nested_run() -> None:
    async with serve(SCRIPT) as sim:
        stream = pipeline(sim).stream("Write about Ray.")
        events = [event async for event in stream]
        result = await stream.result
    assert result.ok, result.error
    root = result.run_id
    assert {e.root_run_id for e in events} == {root}
    inner = result.report.step("draft").runs[0].report  # type: ignore[union-attr]
    assert isinstance(inner, FlowReport)
    agent_ids = {r.run_id for r in result.report.runs() if isinstance(r, AgentReport)}
    agent_ids |= {r.run_id for r in inner.runs()}
    # Every run streamed its own events: the workflows' and each agent's.
    assert {e.run_id for e in events} == {root, inner.run_id} | agent_ids
    starts = [(e.name, e.parent_run_id) for e in events if e.type == "flow.starting"]
    assert starts == [("essay", None), ("drafting", root)]
    steps = [(e.run_id, e.step) for e in events if e.type == "flow.step.completed"]
    assert steps == [
        (root, "research"),
        (inner.run_id, "write"),
        (inner.run_id, "tidy"),
        (root, "draft"),
        (root, "edit"),
    ]
    assert events[-1].type == "flow.completed" and events[-1].run_id == root
    # The agents streamed: their text deltas are in the workflow's stream, and add up
    # to each agent's answer.
    deltas = [e for e in events if e.type == "agent.trip.streaming"]
    assert {e.run_id for e in deltas} == agent_ids
    for report in (r for r in [*result.report.runs(), *inner.runs()] if isinstance(r, AgentReport)):
        text = "".join(e.text for e in deltas if e.run_id == report.run_id)
        assert text == report.trips[-1].output


async def test_handlers_see_the_nested_runs_events() -> None:
    recorder = Recorder()
    async with serve(SCRIPT) as sim:
        result = await pipeline(sim).execute("Write about Ray.", on={"*": recorder})
    assert result.ok, result.error
    assert recorder.types[0] == "flow.starting"
    assert recorder.types[-1] == "flow.completed"
    assert len(recorder.of("agent.completed")) == 3
    assert {e.root_run_id for e in recorder.events} == {result.run_id}


async def test_observers_get_one_report_tree() -> None:
    observed = Observed()
    async with serve(SCRIPT) as sim:
        result = await pipeline(sim, observe=observed).execute("Write about Ray.")
        called = Observed()
        await pipeline(sim).execute("Write about Ray.", observe=called)
    assert result.ok, result.error
    # One delivery: the root's tree, nested workflow and agents inside it.
    assert len(observed.reports) == 1
    assert observed.reports[0] is result.report
    assert [r.name for r in result.report.runs()] == ["researcher", "drafting", "editor"]
    assert len(called.flows) == 1 and len(called.reports) == 1
    tree = FlowReport.from_json(result.report.to_json())
    assert tree.total_usage() == result.usage


async def test_an_abort_cancels_the_running_step() -> None:
    script = [
        Rule(match=Match(system="^researcher"), reply=Reply(text="facts")),
        Rule(match=Match(system="^writer"), reply=Reply(fault=Fault(kind="hang"))),
    ]
    failures: list[BaseException] = []
    async with serve(script) as sim:
        flow = raygent.workflow(
            name="abortable",
            steps=[
                raygent.step("research", agent=sim_agent(sim, "researcher")),
                raygent.step(
                    "write",
                    agent=sim_agent(sim, "writer"),
                    on_failure=lambda s, e: failures.append(e) or raygent.END,
                ),
                raygent.step("publish", run=lambda s: "never"),
            ],
        )
        controller = AbortController()
        task = asyncio.ensure_future(flow.execute("go", signal=controller.signal))
        await sim.wait_until(lambda s: s.in_flight == 1 and s.by_status.get(200, 0) == 1)
        controller.abort("user left")
        result = await asyncio.wait_for(task, timeout=20)
        await sim.wait_until(lambda s: s.disconnects == 1 and s.in_flight == 0)
    assert isinstance(result.error, AbortedError)
    assert result.status == "cancelled"
    assert failures == []  # an abort is no failure of the step
    assert step_statuses(result) == [("research", "completed"), ("write", "cancelled")]
    writer = result.report.step("write").runs[0].report  # type: ignore[union-attr]
    assert writer.status == "cancelled"
    assert result.outputs == {"research": "facts"}
    assert result.usage == result.report.total_usage()


async def test_a_workflow_runs_from_sync_code() -> None:
    flow = raygent.workflow(name="sync", steps=[raygent.step("s", run=lambda s: s.input * 2)])
    result = await asyncio.to_thread(flow.execute_sync, "ab")
    assert result.ok, result.error
    assert result.data == "abab"


async def test_aborting_a_stream_cancels_a_running_function_step() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def wait_forever(state: raygent.WorkflowState) -> str:
        started.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    flow = raygent.workflow(name="waiting", steps=[raygent.step("wait", run=wait_forever)])
    stream = flow.stream("x")
    events = []

    async def consume() -> None:
        async for event in stream:
            events.append(event)

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(started.wait(), timeout=10)
    stream.abort("enough")
    result = await asyncio.wait_for(stream.result, timeout=10)
    await asyncio.wait_for(consumer, timeout=10)
    assert cancelled.is_set()
    assert isinstance(result.error, AbortedError)
    assert result.status == "cancelled"
    assert step_statuses(result) == [("wait", "cancelled")]
    assert [e.type for e in events][-1] == "flow.error"
