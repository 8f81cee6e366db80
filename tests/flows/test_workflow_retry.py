"""Step retries (`retry=raygent.Retry(...)`: which errors, the backoff, every attempt's
usage) and `on_failure` (Goto, END, re-raise)."""

from __future__ import annotations

import asyncio
from typing import Any

from flows_support import Sleeps, sim_agent, step_statuses
from pydantic import BaseModel

import raygent
from raygent import AbortController, Retry
from raygent.errors import (
    AbortedError,
    FlowOutputError,
    ServerError,
    StepFailedError,
)
from raygent.sim import Fault, Match, Reply, Rule, serve


class Count(BaseModel):
    n: int


def flaky(failures: int, error: Exception) -> Any:
    """A step function failing `failures` times with `error`, then answering."""
    attempts: list[int] = []

    def run(state: raygent.WorkflowState) -> str:
        attempts.append(state.attempt)
        if len(attempts) <= failures:
            raise error
        return f"ok after {len(attempts)}"

    run.attempts = attempts  # type: ignore[attr-defined]
    return run


async def test_a_retryable_failure_is_retried_after_the_backoff() -> None:
    sleeps = Sleeps()
    run = flaky(2, ServerError("upstream 503", retryable=True))
    flow = raygent.workflow(
        name="retrying",
        steps=[
            raygent.step(
                "call",
                run=run,
                retry=Retry(attempts=3, base_delay=0.5, jitter=False, sleep=sleeps),
            )
        ],
    )
    result = await flow.execute("x")
    assert result.ok, result.error
    assert result.data == "ok after 3"
    assert run.attempts == [1, 2, 3]
    assert sleeps.delays == [0.5, 1.0]  # exponential: base, then twice the base
    assert result.report.step("call").attempts == 3  # type: ignore[union-attr]


async def test_a_failure_that_is_not_retryable_fails_the_step_at_once() -> None:
    sleeps = Sleeps()
    run = flaky(5, ValueError("bad value"))
    flow = raygent.workflow(
        name="once",
        steps=[raygent.step("call", run=run, retry=Retry(attempts=3, sleep=sleeps))],
    )
    result = await flow.execute("x")
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["step"] == "call"
    assert result.error.details["attempts"] == 1
    assert result.error.details["cause"] == {"type": "ValueError", "message": "bad value"}
    assert isinstance(result.error.__cause__, ValueError)
    assert run.attempts == [1]
    assert sleeps.delays == []
    assert step_statuses(result) == [("call", "failed")]


async def test_retries_run_out() -> None:
    sleeps = Sleeps()
    run = flaky(9, ServerError("down", retryable=True))
    flow = raygent.workflow(
        name="out",
        steps=[
            raygent.step(
                "call",
                run=run,
                retry=Retry(attempts=4, backoff="linear", base_delay=2, jitter=False, sleep=sleeps),
            )
        ],
    )
    result = await flow.execute("x")
    assert isinstance(result.error, StepFailedError)
    assert result.error.details["attempts"] == 4
    # The step's error was retryable: so is the workflow's (an outer retry may try it).
    assert result.error.retryable is True
    assert sleeps.delays == [2, 4, 6]
    assert run.attempts == [1, 2, 3, 4]


async def test_an_agent_step_is_retried_on_a_provider_error() -> None:
    sleeps = Sleeps()
    script = [
        Rule(reply=Reply(fault=Fault(kind="status", status=500)), times=1),
        Rule(reply=Reply(text="recovered")),
    ]
    async with serve(script) as sim:
        flow = raygent.workflow(
            name="provider",
            steps=[
                raygent.step(
                    "ask",
                    agent=sim_agent(sim, "asker"),
                    retry=Retry(attempts=2, base_delay=1, jitter=False, sleep=sleeps),
                )
            ],
        )
        result = await flow.execute("question")
        statuses = sim.stats().by_status
    assert result.ok, result.error
    assert result.data == "recovered"
    assert statuses == {500: 1, 200: 1}
    assert sleeps.delays == [1]
    runs = result.report.step("ask").runs  # type: ignore[union-attr]
    assert [(r.attempt, r.report.status) for r in runs] == [(1, "failed"), (2, "completed")]


async def test_every_attempts_usage_is_counted() -> None:
    script = [
        Rule(reply=Reply(text="not json at all"), times=1),
        Rule(reply=Reply(text='{"n": 5}')),
    ]
    async with serve(script) as sim:
        flow = raygent.workflow(
            name="usage",
            steps=[
                raygent.step(
                    "count",
                    agent=sim_agent(sim, "counter"),
                    output=Count,
                    retry=Retry(attempts=3, retry_on=FlowOutputError, sleep=Sleeps()),
                )
            ],
        )
        result = await flow.execute("count")
    assert result.ok, result.error
    assert result.data == Count(n=5)
    runs = result.report.step("count").runs  # type: ignore[union-attr]
    assert [r.attempt for r in runs] == [1, 2]
    first, second = (r.report.total_usage() for r in runs)
    assert first.requests == 1 and second.requests == 1
    assert result.usage == first + second
    assert result.usage.cost is not None and result.usage.cost.total > 0
    assert result.usage.cost == (first + second).cost


async def test_on_failure_goes_to_another_step() -> None:
    seen: list[tuple[str | None, int, str]] = []

    def handle(state: raygent.WorkflowState, error: BaseException) -> raygent.Goto:
        seen.append((state.step, state.attempt, str(error)))
        return raygent.Goto("fallback")

    flow = raygent.workflow(
        name="recover",
        steps=[
            raygent.step("primary", run=flaky(9, ValueError("broken")), on_failure=handle),
            raygent.step("skipped_over", run=lambda s: "never"),
            raygent.step("fallback", run=lambda s: "fallback answer"),
        ],
    )
    result = await flow.execute("x")
    assert result.ok, result.error
    assert seen == [("primary", 1, "broken")]
    assert result.data == "fallback answer"
    assert step_statuses(result) == [("primary", "failed"), ("fallback", "completed")]
    assert result.report.step("primary").error["message"] == "broken"  # type: ignore[index, union-attr]


async def test_on_failure_can_end_the_workflow_with_what_it_has() -> None:
    flow = raygent.workflow(
        name="ending",
        steps=[
            raygent.step("first", run=lambda s: "first answer"),
            raygent.step(
                "second", run=flaky(9, ValueError("no")), on_failure=lambda s, e: raygent.END
            ),
            raygent.step("third", run=lambda s: "never"),
        ],
    )
    result = await flow.execute("x")
    assert result.ok, result.error
    assert result.data == "first answer"
    assert result.outputs == {"first": "first answer"}
    assert step_statuses(result) == [("first", "completed"), ("second", "failed")]


async def test_on_failure_that_re_raises_or_returns_none_fails_the_workflow() -> None:
    def reraise(state: raygent.WorkflowState, error: BaseException) -> None:
        raise error

    for handler in (reraise, lambda s, e: None):
        flow = raygent.workflow(
            name="failing",
            steps=[
                raygent.step("only", run=flaky(9, KeyError("gone")), on_failure=handler),
            ],
        )
        result = await flow.execute("x")
        assert isinstance(result.error, StepFailedError), handler
        assert result.error.details["step"] == "only"
        assert result.error.details["cause"]["type"] == "KeyError"
        assert result.status == "failed"


async def test_an_abort_during_the_backoff_ends_the_run_cancelled() -> None:
    controller = AbortController()

    async def abort_while_waiting(seconds: float) -> None:
        controller.abort("stop retrying")
        await asyncio.sleep(seconds)

    flow = raygent.workflow(
        name="aborted",
        steps=[
            raygent.step(
                "call",
                run=flaky(9, ServerError("down", retryable=True)),
                retry=Retry(attempts=5, base_delay=60, jitter=False, sleep=abort_while_waiting),
            ),
            raygent.step("next", run=lambda s: "never"),
        ],
    )
    result = await asyncio.wait_for(flow.execute("x", signal=controller.signal), timeout=20)
    assert isinstance(result.error, AbortedError)
    assert result.status == "cancelled"
    assert step_statuses(result) == [("call", "cancelled")]
    assert result.report.step("call").attempts == 1  # type: ignore[union-attr]


async def test_each_attempt_of_an_agent_step_is_its_own_child_run() -> None:
    script = [
        Rule(match=Match(last_user="go"), reply=Reply(fault=Fault(kind="status")), times=1),
        Rule(reply=Reply(text="fine")),
    ]
    async with serve(script) as sim:
        flow = raygent.workflow(
            name="ids",
            steps=[
                raygent.step(
                    "ask", agent=sim_agent(sim, "asker"), retry=Retry(attempts=2, sleep=Sleeps())
                )
            ],
        )
        result = await flow.execute("go")
    assert result.ok, result.error
    runs = result.report.runs()
    assert len(runs) == 2
    assert {r.root_run_id for r in runs} == {result.run_id}
    assert {r.parent_run_id for r in runs} == {result.run_id}
    assert len({r.run_id for r in runs}) == 2
