"""Durable flows (workflows, supervisors): `durable=raygent.Durable(store)` on the flow
(or per call) writes its state as it settles (a workflow after every step, a supervisor
after every iteration), so `flow.resume(run_id)` goes on in another process after a
crash without running what settled (or the runs it made) again. What each flow writes
and how it goes on is its own (`durable_signature`, `continue_from`); starting, ending,
resuming and the store's questions are here.

The flows' own runs are not durable apart: a step or an iteration that had not settled
when the process died runs again from its start.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..durable.journal import is_stored as stored_under
from ..durable.journal import load
from ..durable.options import Durable
from ..durable.scope import run_scope
from ..errors import AbortedError, InvalidOptionsError, RaygentError
from ..observers.report import FlowReport, FlowResult, FlowResume
from ..usage import Usage
from ._durable import FlowEntry, FlowHeader, FlowJournal, FlowOutcome
from ._run import FlowRun, now
from ._values import validated

if TYPE_CHECKING:
    from ._flow import Flow

__all__ = [
    "abandon",
    "completed",
    "durable_for",
    "is_stored",
    "record_resume",
    "resumer",
    "start_journal",
]


def durable_for(flow: Flow, run: FlowRun, options: dict[str, Any]) -> Durable | None:
    if run.info.parent_run_id is not None:
        return None  # a nested flow is a step of its parent's: it re-runs whole
    durable = options.get("durable", flow.durable)
    if durable is not None and not isinstance(durable, Durable):
        raise TypeError("durable= takes raygent.Durable(store=...)")
    return durable


async def start_journal(
    flow: Flow, run: FlowRun, input: Any, options: dict[str, Any]
) -> FlowJournal | None:
    durable = durable_for(flow, run, options)
    if durable is None:
        return None
    journal = FlowJournal(durable, run_scope(run.info.run_id, options))
    await journal.start(
        FlowHeader(
            kind=flow.kind,
            name=flow.name,
            signature=flow.durable_signature(),
            run_id=run.info.run_id,
            root_run_id=run.info.root_run_id,
            started_at=run.report.started_at,
            input=input,
        )
    )
    return journal


async def completed(flow: Flow, journal: FlowJournal, result: FlowResult) -> None:
    await journal.finish(
        FlowOutcome(
            report=result.report,
            data=result.data,
            text=result.text,
            outputs=result.outputs,
            usage=result.usage,
        )
    )


def resumer(
    flow: Flow, run_id: str, force: bool, approvals: Any, options: dict[str, Any]
) -> Callable[[FlowRun], Awaitable[FlowResult]]:
    async def body(run: FlowRun) -> FlowResult:
        if approvals:
            raise InvalidOptionsError(f"a {flow.kind}'s resume takes no approvals")
        durable = durable_for(flow, run, options)
        if durable is None:
            raise InvalidOptionsError(
                f"{flow.kind} {flow.name!r} is not durable: give durable=raygent.Durable(...)"
            )
        current = flow.durable_signature()
        restored = await FlowJournal.restore(
            durable, run_scope(run_id, options), current, force=force
        )
        stored = restored.header.signature
        drift = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
        if restored.outcome is not None:
            return await resolved(flow, run, restored.outcome, drift, force)
        return await flow.continue_from(
            run, restored.header, restored.entries, restored.journal, drift, force
        )

    return body


async def resolved(
    flow: Flow, run: FlowRun, outcome: FlowOutcome, drift: list[str], force: bool
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


async def is_stored(flow: Flow, run_id: str, **options: Any) -> bool:
    """Whether a durable run is stored under `run_id` (on this flow's store)."""
    durable = options.get("durable", flow.durable)
    if durable is None:
        return False
    return await stored_under(durable, run_scope(run_id, options))


async def abandon(flow: Flow, run_id: str, reason: str = "abandoned", **options: Any) -> None:
    """End a stored run as cancelled: a later resume gives that result."""
    durable = options.get("durable", flow.durable)
    if durable is None:
        raise InvalidOptionsError(f"{flow.kind} {flow.name!r} is not durable")
    scope = run_scope(run_id, options)
    record = await load(durable, scope)
    if record is None or record.outcome is not None:
        return
    journal = await FlowJournal.claim(durable, scope, record)
    entries = [FlowEntry.model_validate_json(e) for e in record.entries]
    header = FlowHeader.model_validate_json(record.header)

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
    await journal.finish(FlowOutcome(report=report, usage=usage))


def record_resume(run: FlowRun, from_step: str | None, drift: list[str], force: bool) -> None:
    """Say on the report that the run goes on from `from_step` after what it restored."""
    run.report.resumes.append(
        FlowResume(
            at=now(),
            settled_steps=len(run.report.steps),
            from_step=from_step,
            forced=force and bool(drift),
            drift=drift,
        )
    )
    if run.report.resumed_from_step is None:
        run.report.resumed_from_step = from_step
