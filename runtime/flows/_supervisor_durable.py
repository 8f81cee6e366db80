"""What a durable supervisor writes (an entry per settled iteration: its routing and
intent steps, its outputs, the errors `on_failure` let go by) and how a resume goes on
from the entries: the settled iterations are history, the next one is routed afresh
(see `_flow_durable` for the rest). An iteration that had not settled runs again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RaygentError, error_dict
from ._durable import FlowEntry, FlowHeader, FlowJournal
from ._flow_durable import record_resume
from ._run import FlowRun
from ._supervisor_state import Iteration, SupervisorState

if TYPE_CHECKING:
    from .supervisor import Supervisor

__all__ = ["iteration_entry", "restored_state", "signature_of", "write"]


def signature_of(flow: Supervisor) -> dict[str, Any]:
    """What a resume must find unchanged (bump `version=` for a change of meaning)."""
    return {
        "kind": flow.kind,
        "name": flow.name,
        "version": flow.version,
        "intents": sorted(flow.intents),
        "routing": "route" if flow.router is None else "router",
        "max_iterations": flow.max_iterations,
        "max_fan_out": flow.max_fan_out,
        "input": None if flow.input_model is None else flow.input_model.__name__,
        "output": None if flow.output_model is None else flow.output_model.__name__,
    }


def iteration_entry(run: FlowRun, first_step: int, done: Iteration) -> FlowEntry:
    """The entry of a settled iteration whose steps start at `first_step`."""
    steps = run.report.steps[first_step:]
    return FlowEntry(
        step=steps[0],
        more_steps=steps[1:],
        output=done.outputs,
        position={
            "iteration": done.index,
            "intents": list(done.intents),
            "errors": {name: error_dict(error) for name, error in done.errors.items()},
        },
        usage=run.usage,
    )


def restored_state(
    flow: Supervisor,
    run: FlowRun,
    header: FlowHeader,
    entries: list[FlowEntry],
    drift: list[str],
    force: bool,
) -> SupervisorState:
    """The state after the settled iterations: their history, outputs, steps, usage."""
    input = flow._validated_input(header.input) if header.input is not None else None
    state = SupervisorState(input=input, context=run.context, run_id=run.info.run_id)
    for entry in entries:
        position = entry.position
        outputs = dict(entry.output or {})
        errors: dict[str, BaseException] = {
            name: RaygentError(str(info.get("message", "")), **_details(info))
            for name, info in dict(position.get("errors") or {}).items()
        }
        done = Iteration(
            index=int(position["iteration"]),
            intents=tuple(position.get("intents") or outputs),
            outputs=outputs,
            errors=errors,
        )
        state.history.append(done)
        state.outputs.update(outputs)
        run.report.steps.extend([entry.step, *entry.more_steps])
        run.usage = entry.usage
    state.iteration = (state.history[-1].index if state.history else 0) + 1
    run.outputs = state.outputs
    from_step = f"iteration {state.iteration}"
    record_resume(run, from_step, drift, force)
    return state


def _details(info: dict[str, Any]) -> dict[str, Any]:
    return {"code": info.get("code"), "type": info.get("type")}


async def write(journal: FlowJournal | None, entry: FlowEntry) -> None:
    if journal is not None:
        await journal.settled(entry)
