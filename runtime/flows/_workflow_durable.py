"""Durable workflows: `durable=raygent.Durable(store)` on a workflow (or per call) writes
its state after every settled step, so `workflow.resume(run_id)` goes on in another
process after a crash without running the settled steps (or the runs they made) again.

The steps' own runs are not durable apart: a step that had not settled when the process
died runs again from its start (a retry of the step, not a new run of the workflow).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..agents.durable import Durable
from ..errors import AbortedError, InvalidOptionsError, RaygentError
from ..observe.report import FlowResult, FlowResume, StepReport
from ..usage import Usage
from ._durable import FlowEntry, FlowHeader, FlowJournal, FlowOutcome, scope_of
from ._run import FlowRun, now
from ._values import validated

if TYPE_CHECKING:
    from .workflow import Workflow

__all__ = [
    "Cursor",
    "abandon",
    "completed",
    "is_stored",
    "resumer",
    "settled",
    "signature_of",
    "start_journal",
]


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


def durable_for(flow: Workflow, run: FlowRun, options: dict[str, Any]) -> Durable | None:
    if run.info.parent_run_id is not None:
        return None  # a nested workflow is a step of its parent's: it re-runs whole
    durable = options.get("durable", flow.durable)
    if durable is not None and not isinstance(durable, Durable):
        raise TypeError("durable= takes raygent.Durable(store=...)")
    return durable


async def start_journal(
    flow: Workflow, run: FlowRun, input: Any, options: dict[str, Any]
) -> FlowJournal | None:
    durable = durable_for(flow, run, options)
    if durable is None:
        return None
    journal = FlowJournal(durable, scope_of(run.info.run_id, options))
    await journal.start(
        FlowHeader(
            kind=flow.kind,
            name=flow.name,
            signature=signature_of(flow),
            run_id=run.info.run_id,
            root_run_id=run.info.root_run_id,
            started_at=run.report.started_at,
            input=input,
        )
    )
    return journal


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


async def completed(flow: Workflow, journal: FlowJournal, result: FlowResult) -> None:
    await journal.finish(
        FlowOutcome(
            report=result.report,
            data=result.data,
            text=result.text,
            outputs=result.outputs,
            usage=result.usage,
        )
    )


# -- resuming ---------------------------------------------------------------------


def resumer(
    flow: Workflow, run_id: str, force: bool, approvals: Any, options: dict[str, Any]
) -> Callable[[FlowRun], Awaitable[FlowResult]]:
    async def body(run: FlowRun) -> FlowResult:
        if approvals:
            raise InvalidOptionsError("a workflow's resume takes no approvals")
        durable = durable_for(flow, run, options)
        if durable is None:
            raise InvalidOptionsError(
                f"workflow {flow.name!r} is not durable: give durable=raygent.Durable(...)"
            )
        current = signature_of(flow)
        restored = await FlowJournal.restore(
            durable, scope_of(run_id, options), current, force=force
        )
        stored = restored.header.signature
        drift = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
        if restored.outcome is not None:
            return await resolved(flow, run, restored.outcome, drift, force)
        return await go_on(
            flow, run, restored.header, restored.entries, restored.journal, drift, force
        )

    return body


async def resolved(
    flow: Workflow, run: FlowRun, outcome: FlowOutcome, drift: list[str], force: bool
) -> FlowResult:
    report = outcome.report.model_copy(deep=True)
    report.resumes.append(
        FlowResume(
            at=now(),
            settled_steps=len(report.steps),
            forced=force and bool(drift),
            drift=drift,
            already_resolved=True,
        )
    )
    run.report, run.usage = report, outcome.usage
    error: RaygentError | None = None
    if report.status != "completed":
        message = str((report.error or {}).get("message") or report.status)
        error = AbortedError(message) if report.status == "cancelled" else RaygentError(message)
    data = outcome.data
    if flow.output_model is not None and data is not None and error is None:
        data = validated(data, flow.output_model, None)
    return await run.finish(
        data=data, text=outcome.text, outputs=outcome.outputs, error=error, status=report.status
    )


async def go_on(
    flow: Workflow,
    run: FlowRun,
    header: FlowHeader,
    entries: list[FlowEntry],
    journal: FlowJournal,
    drift: list[str],
    force: bool,
) -> FlowResult:
    from ._state import WorkflowState

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
    run.report.resumes.append(
        FlowResume(
            at=now(),
            settled_steps=len(entries),
            from_step=from_step,
            forced=force and bool(drift),
            drift=drift,
        )
    )
    if run.report.resumed_from_step is None:
        run.report.resumed_from_step = from_step
    return await flow._drive(run, state, cursor, journal)


# -- the store's questions ----------------------------------------------------------


async def is_stored(flow: Workflow, run_id: str, **options: Any) -> bool:
    """Whether a durable run is stored under `run_id` (on this workflow's store)."""
    durable = options.get("durable", flow.durable)
    if durable is None:
        return False
    return await durable.store.load_run(scope_of(run_id, options)) is not None


async def abandon(flow: Workflow, run_id: str, reason: str = "abandoned", **options: Any) -> None:
    """End a stored run as cancelled: a later resume gives that result."""
    durable = options.get("durable", flow.durable)
    if durable is None:
        raise InvalidOptionsError(f"workflow {flow.name!r} is not durable")
    scope = scope_of(run_id, options)
    record = await durable.store.load_run(scope)
    if record is None or record.outcome is not None:
        return
    epoch = await durable.store.claim_run(scope, record.epoch)
    entries = [FlowEntry.model_validate_json(e) for e in record.entries]
    header = FlowHeader.model_validate_json(record.header)
    from ..observe.report import FlowReport

    ended = now()
    report = FlowReport(
        kind=flow.kind,
        run_id=header.run_id,
        root_run_id=header.root_run_id,
        name=flow.name,
        version=flow.version,
        status="cancelled",
        started_at=header.started_at,
        ended_at=ended,
        duration=(ended - header.started_at).total_seconds(),
        steps=[e.step for e in entries],
        error={"type": "AbortedError", "code": "ABORTED", "message": reason},
    )
    usage = entries[-1].usage if entries else Usage()
    journal = FlowJournal(durable, scope, epoch, len(entries))
    await journal.finish(FlowOutcome(report=report, usage=usage))


def _restored_output(step: Any, value: Any) -> Any:
    """A settled step's output as the store gave it back: validated by the step's output
    model when it has one (per branch for a parallel step)."""
    schema = getattr(step, "schema", None)
    if schema is None or value is None:
        return value
    if getattr(step, "kind", None) == "parallel" and isinstance(value, dict):
        return {b: validated(v, schema, step.name) for b, v in value.items()}
    return validated(value, schema, step.name)
