"""What a model reply means for a run (what the loop carries from trip to trip,
`Progress`, is `_state`'s).

next_step decides one of:
    RunTools      run the tool round, trip again
    Resume        pause_turn: send the turn back as is, trip again
    Continue      cut off by the output limit: run the calls that arrived whole, drop
                  the cut-off ones, ask to continue, trip again
    Repair        the reply failed the schema: say why, trip again
    Final         validated answer: done
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import AgentIncompleteError, RefusalError, SchemaValidationError
from ..messages import ToolCall
from ..models.contract import ModelResponse
from ._state import Progress, RunState

__all__ = [
    "CONTINUE_PROMPT",
    "Continue",
    "Final",
    "Repair",
    "Resume",
    "RunTools",
    "Step",
    "incomplete",
    "next_step",
]

CONTINUE_PROMPT = "Continue exactly where your previous reply stopped, without repeating it."


@dataclass
class RunTools:
    calls: list[ToolCall]


@dataclass
class Resume:
    pass


@dataclass
class Continue:
    """Cut off by the output limit: run the complete calls, drop the cut-off ones."""

    complete: list[ToolCall]
    dropped: list[ToolCall]


@dataclass
class Repair:
    error: SchemaValidationError


@dataclass
class Final:
    text: str
    data: Any


Step = RunTools | Resume | Continue | Repair | Final


def next_step(run: RunState, response: ModelResponse, progress: Progress) -> Step:
    """Decide what a reply means for the run (raising for the ends that are failures)."""
    finish = response.finish_reason
    if finish == "refusal":
        raise RefusalError(
            f"the model refused: {response.refusal or response.text or 'no reason given'}",
            provider=response.provider,
        )
    if finish == "context_exceeded":
        raise incomplete(run, "context_window", progress)
    if finish == "length":
        complete, truncated = _split_cut_off(response.tool_calls)
        run.report.trips[-1].truncated_tool_calls = [c.call_id for c in truncated]
        # A continuation is a trip like any other: with none left, the run is cut off.
        continuations_left = progress.continuations < run.config.continue_on_output_limit
        if continuations_left and run.trip_count < run.config.max_trips:
            return Continue(complete=complete, dropped=truncated)
        raise incomplete(run, "output_limit", progress)
    if finish == "pause_turn":
        return Resume()
    if response.tool_calls:
        return RunTools(calls=response.tool_calls)
    text = progress.text()
    if run.config.output is None:
        return Final(text=text, data=None)
    try:
        return Final(text=text, data=run.config.output.validate(text))
    except SchemaValidationError as error:
        repair = run.config.repair
        if repair is not None and progress.repairs < repair.max_attempts:
            return Repair(error=error)
        raise


def _split_cut_off(calls: list[ToolCall]) -> tuple[list[ToolCall], list[ToolCall]]:
    """(complete, cut off) calls of a reply cut off by the output limit. A call is cut
    off when its arguments do not parse, or when it is the last and none arrived."""
    complete, cut = [], []
    for position, tool_call in enumerate(calls):
        last = position == len(calls) - 1
        if tool_call.arguments is None or (last and not tool_call.arguments_text.strip()):
            cut.append(tool_call)
        else:
            complete.append(tool_call)
    return complete, cut


def incomplete(run: RunState, reason: str, progress: Progress) -> AgentIncompleteError:
    return AgentIncompleteError(
        f"the reply was cut off ({reason})",
        reason=reason,
        trip_index=run.trip_count - 1,
        continuations=progress.continuations,
    )
