"""Parallel steps: branches at once (the simulator's latency and its in-flight count),
outputs keyed by branch, one failing branch aborting the others."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from flows_support import make_model, sim_agent, step_statuses
from pydantic import BaseModel

import raygent
from raygent.errors import StepFailedError
from raygent.sim import Fault, Latency, Match, Reply, Rule, serve

LATENCY_MS = 400


class Score(BaseModel):
    score: int


async def test_branches_run_at_once() -> None:
    script = [Rule(match=Match(system=f"^{n}"), reply=Reply(text=f"{n} says hi")) for n in "abc"]
    async with serve(script, latency=Latency(fixed_ms=LATENCY_MS)) as sim:
        flow = raygent.workflow(
            name="fan",
            steps=[
                raygent.step("all", parallel=[sim_agent(sim, name) for name in "abc"]),
                raygent.step("join", run=lambda s: " / ".join(s.outputs["all"].values())),
            ],
        )
        # Once to warm up (on Ray, the first request starts the provider's gateway).
        assert (await flow.execute("hello")).ok
        sim.reset()
        started = time.perf_counter()
        result = await flow.execute("hello")
        elapsed = time.perf_counter() - started
        stats = sim.stats()
    assert result.ok, result.error
    assert result.outputs["all"] == {"a": "a says hi", "b": "b says hi", "c": "c says hi"}
    assert result.data == "a says hi / b says hi / c says hi"
    # All three were in flight together; the step took about the slowest branch, not
    # the sum of the three.
    assert stats.peak_in_flight == 3
    assert elapsed < 0.75 * 3 * LATENCY_MS / 1000, elapsed
    step = result.report.step("all")
    assert step is not None and step.kind == "parallel"
    assert sorted(r.branch or "" for r in step.runs) == ["a", "b", "c"]
    branch_durations = [r.report.duration or 0.0 for r in step.runs]
    assert min(branch_durations) >= LATENCY_MS / 1000
    assert (step.duration or 0.0) < 0.75 * sum(branch_durations)
    assert result.usage == result.report.total_usage()
    assert result.usage.requests == 3


async def test_branches_named_by_pairs_or_a_dict_with_an_output_per_branch() -> None:
    script = [
        Rule(match=Match(system="^judge1"), reply=Reply(text='{"score": 3}')),
        Rule(match=Match(system="^judge2"), reply=Reply(text='{"score": 5}')),
    ]
    async with serve(script) as sim:
        one, two = sim_agent(sim, "judge1"), sim_agent(sim, "judge2")
        flow = raygent.workflow(
            name="judges",
            steps=[
                raygent.step("pairs", parallel=[("first", one), ("second", two)], output=Score),
                raygent.step(
                    "mapping",
                    parallel={"x": one, "y": two},
                    input=lambda s: "score again",
                    output=lambda results: sorted(r.text for r in results.values()),
                ),
            ],
        )
        result = await flow.execute("score this")
    assert result.ok, result.error
    assert result.outputs["pairs"] == {"first": Score(score=3), "second": Score(score=5)}
    assert result.outputs["mapping"] == ['{"score": 3}', '{"score": 5}']


async def test_a_failing_branch_aborts_the_others_which_are_still_counted() -> None:
    script = [
        Rule(match=Match(system="^slow"), reply=Reply(fault=Fault(kind="hang"))),
        Rule(match=Match(system="^quick"), reply=Reply(text="quick answer")),
    ]
    async with serve(script) as sim:

        async def fail_once_both_are_under_way(state: raygent.WorkflowState) -> str:
            # The quick branch answered and the slow one hangs in the provider: fail now.
            await sim.wait_until(lambda s: s.by_status.get(200, 0) >= 1 and s.in_flight >= 1)
            raise ValueError("checker found a problem")

        checker = raygent.workflow(
            name="checker", steps=[raygent.step("check", run=fail_once_both_are_under_way)]
        )
        flow = raygent.workflow(
            name="guarded",
            steps=[
                raygent.step(
                    "fan",
                    parallel={
                        "slow": sim_agent(sim, "slow"),
                        "quick": sim_agent(sim, "quick"),
                        "checker": checker,
                    },
                ),
                raygent.step("never", run=lambda s: "unreachable"),
            ],
        )
        result = await flow.execute("go")
        # The slow branch's request was closed, not left hanging.
        await sim.wait_until(lambda s: s.disconnects >= 1 and s.in_flight == 0)
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["step"] == "fan"
    assert result.error.details["branch"] == "checker"
    assert step_statuses(result) == [("fan", "failed")]
    runs = {r.branch: r.report for r in result.report.step("fan").runs}  # type: ignore[union-attr]
    assert {b: r.status for b, r in runs.items()} == {
        "slow": "cancelled",
        "quick": "completed",
        "checker": "failed",
    }
    # The quick branch's usage is the workflow's, though the step failed.
    assert result.usage.requests >= 1
    assert result.usage == result.report.total_usage()
    assert result.usage.cost is not None and result.usage.cost.total > 0


async def test_a_failing_branch_follows_the_steps_on_failure() -> None:
    script = [
        Rule(match=Match(system="^broken"), reply=Reply(fault=Fault(kind="status", status=400))),
        Rule(reply=Reply(text="fine")),
    ]
    errors: list[str] = []

    def recover(state: raygent.WorkflowState, error: BaseException) -> raygent.Goto:
        errors.append(type(error).__name__)
        return raygent.Goto("fallback")

    async with serve(script) as sim:
        flow = raygent.workflow(
            name="fallback-flow",
            steps=[
                raygent.step(
                    "fan",
                    parallel=[sim_agent(sim, "broken"), sim_agent(sim, "healthy")],
                    on_failure=recover,
                ),
                raygent.step("fallback", agent=sim_agent(sim, "backup")),
            ],
        )
        result = await flow.execute("go")
    assert result.ok, result.error
    assert errors == ["InvalidRequestError"]
    assert result.data == "fine"
    assert step_statuses(result) == [("fan", "failed"), ("fallback", "completed")]
    assert "fan" not in result.outputs


async def test_branches_keep_to_the_providers_bound() -> None:
    # Four branches on one provider declared to take two requests at once: two are in
    # flight at a time, never more (on Ray, the provider's gateway holds the bound).
    async with serve([Rule(reply=Reply(text="ok"))], latency=Latency(fixed_ms=200)) as sim:
        branches = {
            f"b{i}": raygent.agent(model=make_model(sim, max_concurrency=2), name=f"b{i}")
            for i in range(4)
        }
        flow = raygent.workflow(name="bounded", steps=[raygent.step("fan", parallel=branches)])
        result = await flow.execute("go")
        stats = sim.stats()
    assert result.ok, result.error
    assert result.data == {f"b{i}": "ok" for i in range(4)}
    assert stats.peak_in_flight == 2
    assert stats.by_status == {200: 4}


async def test_a_parallel_steps_runs_are_reported_in_the_declared_order() -> None:
    from raygent.testing import FunctionModel

    finished: list[str] = []
    others_done = asyncio.Event()

    def answer(name: str, last: bool) -> Any:
        async def fn(messages: Any, options: Any) -> str:
            if last:
                await others_done.wait()  # the first branch declared finishes last
            finished.append(name)
            if len(finished) == 3:
                others_done.set()
            return name

        return fn

    fan = {
        f"b{n}": raygent.agent(name=f"b{n}", model=FunctionModel(answer(f"b{n}", n == 0)))
        for n in range(4)
    }
    flow = raygent.workflow(name="fan", steps=[raygent.step("fan", parallel=fan)])
    result = await flow.execute("go")
    assert result.ok, result.error
    assert finished[-1] == "b0"
    step = result.report.step("fan")
    assert step is not None
    assert [r.branch for r in step.runs] == ["b0", "b1", "b2", "b3"]
    assert list(result.data) == ["b0", "b1", "b2", "b3"]
