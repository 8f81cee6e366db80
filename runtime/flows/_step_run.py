"""Running one workflow step: its attempts (retries with backoff), its function, child
run or parallel branches, and the extraction of its output."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from ..abort import AbortController, abortable
from ..observers.report import StepReport
from ._flow import child_input
from ._run import FlowRun
from ._state import WorkflowState
from ._step import Step
from ._values import call_hook, child_validated, result_value, validated

__all__ = ["StepFailure", "run_attempts"]


class StepFailure(Exception):
    """A step's last attempt failed with `error` (in `branch`, for a parallel step)."""

    def __init__(self, error: BaseException, branch: str | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.branch = branch


async def run_attempts(run: FlowRun, step: Step, report: StepReport, state: WorkflowState) -> Any:
    """The step's output, after as many attempts as its `retry` allows; StepFailure when
    the last one failed, AbortedError when the run was aborted meanwhile."""
    retry = step.retry
    while True:
        state.attempt = await run.attempt(report)
        try:
            return await _attempt(run, step, report, state)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error, branch = (exc.error, exc.branch) if isinstance(exc, StepFailure) else (exc, None)
            run.check_abort()
            if retry is None or report.attempts >= retry.attempts or not retry.should_retry(error):
                raise StepFailure(error, branch) from exc
            # An abort during the backoff ends the wait (AbortedError), not the run's loop.
            await abortable(retry.sleep(retry.delay(report.attempts, error)), run.signal)


async def _attempt(run: FlowRun, step: Step, report: StepReport, state: WorkflowState) -> Any:
    if step.run is not None:
        raw = await abortable(_call_run(step.run, state), run.signal)
        if step.schema is not None:
            return validated(raw, step.schema, step.name)
        return raw if step.output is None else await call_hook(step.output, raw)
    given = step.input is not None
    value = await call_hook(step.input, state) if given else state.last
    if step.agent is not None:
        result = await run.child(step.agent, child_input(step.agent, value, given=given), report)
        if result.error is not None:
            raise result.error
        if step.schema is not None:
            return child_validated(result, step.schema, step.name)
        return result_value(result) if step.output is None else await call_hook(step.output, result)
    results = await _parallel(run, step, report, value, given)
    if step.schema is not None:
        schema = step.schema
        return {b: child_validated(r, schema, step.name) for b, r in results.items()}
    if step.output is not None:
        return await call_hook(step.output, results)
    return {branch: result_value(result) for branch, result in results.items()}


async def _call_run(fn: Any, state: WorkflowState) -> Any:
    """An async function awaited on the loop; a sync one in a worker thread."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    ):
        return await fn(state)
    value = await asyncio.to_thread(fn, state)
    return await value if inspect.isawaitable(value) else value


async def _parallel(
    run: FlowRun, step: Step, report: StepReport, value: Any, given: bool
) -> dict[str, Any]:
    """Every branch's result by name; when one fails, the others are aborted (their runs
    end cancelled and are reported and counted like any) and its error raised."""
    branches = step.branches or {}
    controller = AbortController()
    unlink = run.signal.add_callback(lambda: controller.abort(run.signal.reason))
    tasks = {
        asyncio.ensure_future(
            run.child(
                executable,
                child_input(executable, value, given=given),
                report,
                branch=branch,
                signal=controller.signal,
            )
        ): branch
        for branch, executable in branches.items()
    }
    failed: StepFailure | None = None
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.result().error
                if error is not None and failed is None:
                    failed = StepFailure(error, tasks[task])
                    controller.abort(f"branch {tasks[task]!r} of step {step.name!r} failed")
    finally:
        unlink()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        _in_declared_order(report, list(branches))
    if failed is not None:
        raise failed
    results = {branch: task.result() for task, branch in tasks.items()}
    return {branch: results[branch] for branch in branches}


def _in_declared_order(report: StepReport, names: list[str]) -> None:
    """This attempt's branch runs as the step declares them, not as they finished."""
    order = {name: k for k, name in enumerate(names)}
    mine = [r for r in report.runs if r.attempt == report.attempts]
    if not mine:
        return
    rest = [r for r in report.runs if r.attempt != report.attempts]
    mine.sort(key=lambda r: order.get(r.branch or "", len(order)))
    report.runs[:] = rest + mine
