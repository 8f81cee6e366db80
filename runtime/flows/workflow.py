"""`raygent.workflow(...)`: a fixed pipeline of steps (functions, agents, other flows,
parallel branches), run in order unless a step's `next` routes elsewhere.

A durable workflow writes an entry per settled step (its report, its output, the step to
run next, the counters); a resume goes on from the entries (see `_flow` for the rest). A
step that had not settled runs again from its start (a retry of the step, not a new run
of the workflow)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from ..durable.options import Durable
from ..errors import (
    AbortedError,
    BudgetExceededError,
    FlowOutputError,
    InvalidOptionsError,
    MaxStepsError,
    StepFailedError,
    error_dict,
)
from ..observers import Observe
from ..observers.delivery import own_observers
from ..observers.events import Handlers
from ..observers.report import FlowResult, StepReport
from ._durable import FlowEntry, FlowHeader, FlowJournal
from ._flow import Flow, completed, record_resume, start_journal
from ._markers import END, Goto
from ._run import FlowRun
from ._state import WorkflowState
from ._step import Step
from ._step_run import StepFailure, run_attempts
from ._values import as_text, call_hook, validated

__all__ = ["Workflow", "workflow"]


class Workflow(Flow):
    """Build with `raygent.workflow(...)`. `steps` and `max_steps` are as given; the
    executable surface (`execute`, `execute_sync`, `stream`, `as_tool`, `on`) is `Flow`'s.
    """

    kind: ClassVar[Literal["workflow"]] = "workflow"

    def __init__(
        self,
        *,
        name: str,
        steps: Iterable[Step],
        input_model: type[BaseModel] | None,
        output_model: type[BaseModel] | None,
        max_steps: int,
        version: str | None,
        description: str | None,
        on: Handlers | None,
        observe: Observe,
        durable: Durable | None = None,
    ) -> None:
        super().__init__(
            name=name,
            version=version,
            input_model=input_model,
            output_model=output_model,
            description=description,
            on=on,
            observe=observe,
            durable=durable,
        )
        self.steps: tuple[Step, ...] = tuple(steps)
        if not self.steps:
            raise TypeError(f"workflow {name!r} needs at least one step")
        self._index: dict[str, int] = {}
        for position, item in enumerate(self.steps):
            if not isinstance(item, Step):
                raise TypeError(f"workflow {name!r}: a step is raygent.step(...), not {item!r}")
            if item.name in self._index:
                raise TypeError(f"workflow {name!r}: two steps are named {item.name!r}")
            self._index[item.name] = position
        for item in self.steps:
            if isinstance(item.next, str) and item.next not in self._index:
                raise TypeError(
                    f"workflow {name!r}: step {item.name!r} goes next to {item.next!r}, "
                    f"which is not a step (steps: {', '.join(self._index)})"
                )
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise TypeError(f"max_steps must be a positive integer, not {max_steps!r}")
        self.max_steps = max_steps

    def _children(self) -> list[Any]:
        children: list[Any] = []
        for item in self.steps:
            children.append(item.agent)
            children.extend((item.branches or {}).values())
        return children

    async def _body(self, run: FlowRun, input: Any) -> FlowResult:
        state = WorkflowState(input=input, context=run.context, run_id=run.info.run_id)
        journal = await start_journal(self, run, input, dict(run.options))
        return await self._drive(run, state, Cursor(), journal)

    async def _drive(
        self, run: FlowRun, state: WorkflowState, cursor: Cursor, journal: FlowJournal | None
    ) -> FlowResult:
        """Run steps from `cursor` to the end; a durable run writes each settled step."""
        run.outputs = state.outputs
        while cursor.position is not None:
            run.check_abort()
            position = cursor.position
            item = self.steps[position]
            if cursor.taken >= self.max_steps:
                raise MaxStepsError(
                    f"workflow {self.name!r} ran {cursor.taken} steps without reaching its end",
                    max_steps=self.max_steps,
                    last_step=item.name,
                )
            cursor.taken += 1
            cursor.visits[item.name] += 1
            visit = cursor.visits[item.name]
            state.step, state.visit, state.attempt = item.name, visit, 0
            report = await run.open_step(item.name, item.kind, iteration=visit)
            outcome = await self._step(run, item, report, state)
            output = None
            if outcome is _SKIPPED:
                cursor.position = self._after(position, None)
            elif outcome is _FAILED_TO_END:
                cursor.position = None
            elif isinstance(outcome, Goto):
                cursor.position = self._to(item, outcome.step)
            else:
                output = cursor.last = outcome.value
                cursor.position = self._after(position, await self._next(item, state))
            if journal is not None:
                await settled(self, journal, run, report, output, cursor)
        result = await self._finish(run, state, cursor.last)
        if journal is not None:
            await completed(self, journal, result)
        return result

    # -- durable runs (see the end of this module) --------------------------------

    def durable_signature(self) -> dict[str, Any]:
        return signature_of(self)

    async def continue_from(
        self,
        run: FlowRun,
        header: FlowHeader,
        entries: list[FlowEntry],
        journal: FlowJournal,
        drift: list[str],
        force: bool,
    ) -> FlowResult:
        return await go_on(self, run, header, entries, journal, drift, force)

    async def _step(
        self, run: FlowRun, item: Step, report: StepReport, state: WorkflowState
    ) -> Any:
        """Run one step: `_Done(output)`, `_SKIPPED`, a `Goto` or `_FAILED_TO_END` (its
        `on_failure` routed), or raise the workflow's error."""
        try:
            if item.skip is not None and await call_hook(item.skip, state):
                await run.close_step(report, "skipped")
                return _SKIPPED
            if item.before is not None:
                await call_hook(item.before, state)
            output = await run_attempts(run, item, report, state)
            state.outputs[item.name] = output
            state.last = output
            if item.after is not None:
                await call_hook(item.after, state, output)
        except asyncio.CancelledError:
            await run.close_step(report, "cancelled")
            raise
        except Exception as exc:
            failure = exc if isinstance(exc, StepFailure) else StepFailure(exc)
            if run.signal.aborted:
                await run.close_step(report, "cancelled", failure.error)
                raise AbortedError(
                    f"the workflow was aborted: {run.signal.reason or 'no reason given'}",
                    reason=run.signal.reason,
                ) from None
            await run.close_step(report, "failed", failure.error)
            route = None
            if item.on_failure is not None:
                try:
                    route = await call_hook(item.on_failure, state, failure.error)
                except Exception as raised:
                    # Re-raised (or another error): the step's failure.
                    failure = StepFailure(raised, failure.branch)
                    raise _workflow_error(item, report, failure) from raised
            if isinstance(route, Goto):
                return route
            if route is END:
                return _FAILED_TO_END
            if route is not None:
                raise TypeError(
                    f"step {item.name!r}: on_failure returns raygent.Goto(name), raygent.END "
                    f"or None, not {route!r}"
                ) from failure.error
            raise _workflow_error(item, report, failure) from failure.error
        await run.close_step(report, "completed")
        return _Done(output)

    async def _next(self, item: Step, state: WorkflowState) -> Any:
        target = item.next
        if callable(target):
            try:
                target = await call_hook(target, state)
            except Exception as exc:
                raise StepFailedError(
                    f"step {item.name!r}: next raised {type(exc).__name__}: {exc}",
                    step=item.name,
                    cause=error_dict(exc),
                ) from exc
        if target is None or target is END:
            return target
        if isinstance(target, Goto):
            target = target.step
        if not isinstance(target, str):
            raise StepFailedError(
                f"step {item.name!r}: next returned {target!r}, not a step's name, "
                "raygent.END or None",
                step=item.name,
            )
        return self._to(item, target)

    def _to(self, item: Step, target: str) -> int:
        position = self._index.get(target)
        if position is None:
            raise StepFailedError(
                f"step {item.name!r} routes to {target!r}, which is not a step of workflow "
                f"{self.name!r} (steps: {', '.join(self._index)})",
                step=item.name,
                unknown_step=target,
            )
        return position

    def _after(self, position: int, target: Any) -> int | None:
        """Where the run goes after the step at `position` given its `next`."""
        if target is END:
            return None
        if isinstance(target, int):
            return target
        following = position + 1
        return following if following < len(self.steps) else None

    async def _finish(self, run: FlowRun, state: WorkflowState, last: Any) -> FlowResult:
        data = last
        if self.output_model is not None:
            data = validated(last, self.output_model, None)
        return await run.finish(data=data, text=as_text(data), outputs=state.outputs, error=None)


class _Done:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_SKIPPED = object()
_FAILED_TO_END = object()


def _workflow_error(item: Step, report: StepReport, failure: StepFailure) -> Exception:
    """What a failed step makes of the run's error: an output mismatch or a budget that
    ran out as itself (the run ends BUDGET_EXCEEDED, as an agent's does), any other
    failure as StepFailedError (retryable when its cause is)."""
    error = failure.error
    if isinstance(error, (FlowOutputError, BudgetExceededError)):
        return error
    where = f"step {item.name!r}" + ("" if failure.branch is None else f" ({failure.branch})")
    return StepFailedError(
        f"{where} failed: {type(error).__name__}: {error}",
        retryable=getattr(error, "retryable", False) is True,
        step=item.name,
        attempts=report.attempts,
        branch=failure.branch,
        cause=error_dict(error),
    )


def workflow(
    *,
    name: str,
    steps: Iterable[Step],
    input: type[BaseModel] | None = None,
    output: type[BaseModel] | None = None,
    max_steps: int = 100,
    version: str | None = None,
    description: str | None = None,
    on: Handlers | None = None,
    observe: Observe = None,
    durable: Durable | None = None,
) -> Workflow:
    """A workflow: `steps` (each `raygent.step(...)`) run in order, unless a step's
    `next` (or an `on_failure`'s `Goto`) routes elsewhere; a step may be revisited, up
    to `max_steps` steps entered in all, skipped ones included (then MaxStepsError).

    `input=` validates the input (a model instance, a dict, JSON text) before any step
    (InvalidOptionsError otherwise); `output=` validates the result's `data` from the
    last step's output (FlowOutputError otherwise); without it `data` is that output.
    The result's `outputs` holds every step's output by name, its report one StepReport
    per step entered, its usage every child run's, retries included.

    It is an executable like an agent: `execute`, `execute_sync`, `stream`, `as_tool`,
    a step of another workflow, a supervisor's intent, a batch's executable.

    `durable=raygent.Durable(store)` (or per call) writes the run's state after every
    settled step; `resume(run_id)` goes on from there in any process (see
    the end of this module), and `raygent.batch(workflow, ..., durable=...)`
    continues its items' runs.
    """
    return Workflow(
        name=name,
        steps=steps,
        input_model=input,
        output_model=output,
        max_steps=max_steps,
        version=version,
        description=description,
        on=on,
        observe=observe if observe is None or isinstance(observe, bool) else own_observers(observe),
        durable=durable,
    )


# -- durable runs ------------------------------------------------------------------


@dataclass
class Cursor:
    """Where a workflow run stands: the step to run next (None: the end), how many steps
    it has entered, how often each, and the latest completed step's output."""

    position: int | None = 0
    taken: int = 0
    visits: Counter[str] = field(default_factory=Counter)
    last: Any = None


def signature_of(flow: Workflow) -> dict[str, Any]:
    """What a resume must find unchanged (bump `version=` for a change of meaning)."""
    return {
        "kind": flow.kind,
        "name": flow.name,
        "version": flow.version,
        "steps": [f"{s.name}:{s.kind}" for s in flow.steps],
        "max_steps": flow.max_steps,
        "input": None if flow.input_model is None else flow.input_model.__name__,
        "output": None if flow.output_model is None else flow.output_model.__name__,
    }


# -- writing ----------------------------------------------------------------------


async def settled(
    flow: Workflow,
    journal: FlowJournal,
    run: FlowRun,
    report: StepReport,
    output: Any,
    cursor: Cursor,
) -> None:
    position = cursor.position
    await journal.settled(
        FlowEntry(
            step=report,
            output=output,
            next=None if position is None else flow.steps[position].name,
            position={"taken": cursor.taken, "visits": dict(cursor.visits)},
            usage=run.usage,
        )
    )


# -- resuming ---------------------------------------------------------------------


async def go_on(
    flow: Workflow,
    run: FlowRun,
    header: FlowHeader,
    entries: list[FlowEntry],
    journal: FlowJournal,
    drift: list[str],
    force: bool,
) -> FlowResult:
    input = flow._validated_input(header.input) if header.input is not None else None
    state = WorkflowState(input=input, context=run.context, run_id=run.info.run_id)
    state.last = input
    cursor = Cursor(position=0, last=input)
    by_name = {s.name: s for s in flow.steps}
    for entry in entries:
        report = entry.step
        run.report.steps.append(report)
        if report.status == "completed":
            item = by_name.get(report.name)
            output = _restored_output(item, entry.output)
            state.outputs[report.name] = output
            state.last = cursor.last = output
        cursor.position = None if entry.next is None else flow._index.get(entry.next)
        cursor.taken = int(entry.position.get("taken", cursor.taken))
        cursor.visits = Counter(
            {str(k): int(v) for k, v in entry.position.get("visits", {}).items()}
        )
        run.usage = entry.usage
    if entries and entries[-1].next is not None and cursor.position is None:
        raise InvalidOptionsError(
            f"the stored run goes on to step {entries[-1].next!r}, which workflow "
            f"{flow.name!r} no longer has"
        )
    from_step = None if cursor.position is None else flow.steps[cursor.position].name
    record_resume(run, from_step, drift, force)
    return await flow._drive(run, state, cursor, journal)


def _restored_output(step: Any, value: Any) -> Any:
    """A settled step's output as the store gave it back: validated by the step's output
    model when it has one (per branch for a parallel step)."""
    schema = getattr(step, "schema", None)
    if schema is None or value is None:
        return value
    if getattr(step, "kind", None) == "parallel" and isinstance(value, dict):
        return {b: validated(v, schema, step.name) for b, v in value.items()}
    return validated(value, schema, step.name)
