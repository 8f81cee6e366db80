"""What a durable workflow writes (an entry per settled step: its report, its output,
the step to run next, the counters) and how a resume goes on from the entries (see
`_flow_durable` for the rest). A step that had not settled runs again from its start (a
retry of the step, not a new run of the workflow).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidOptionsError
from ..observers.report import FlowResult, StepReport
from ._durable import FlowEntry, FlowHeader, FlowJournal
from ._flow_durable import record_resume
from ._run import FlowRun
from ._values import validated

if TYPE_CHECKING:
    from .workflow import Workflow

__all__ = [
    "Cursor",
    "go_on",
    "settled",
    "signature_of",
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
