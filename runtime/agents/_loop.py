"""The agent loop: trips and tool rounds until a final answer, each step its own function.

run_loop -> model_trip -> next_step -> one of:
    RunTools      run the tool round, trip again
    Resume        pause_turn: send the turn back as is, trip again
    Continue      cut off by the output limit: run the calls that arrived whole, drop
                  the cut-off ones, ask to continue, trip again
    Repair        the reply failed the schema: say why, trip again
    Final         validated answer: done
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    AbortedError,
    AgentCancelledError,
    AgentIncompleteError,
    ContextLengthExceededError,
    RaygentError,
    RefusalError,
    SchemaValidationError,
)
from ..messages import AssistantMessage, ToolCall, UserMessage
from ..models.contract import ModelResponse
from ..observe._delivery import deliver
from ..observe.events import AgentCompleted, AgentErrored, AgentStarting
from ..observe.report import AgentResult, RunStatus
from ._continue import continue_stored, stored_answer
from ._state import RunState, maybe_await, now
from ._tool_round import run_tool_round
from ._trip import model_trip

__all__ = ["run_loop"]

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


@dataclass
class Progress:
    """What the loop carries from trip to trip.

    `segments` holds the text of earlier trips that the answer continues (a paused or
    cut-off reply); `last` is the latest reply whose text is not in `segments` yet.
    """

    segments: list[str] = field(default_factory=list)
    continuations: int = 0
    repairs: int = 0
    purpose: str = "answer"
    last: ModelResponse | None = None

    def text(self) -> str:
        """The answer so far: the carried segments and the latest reply's text."""
        tail = self.last.text if self.last is not None else ""
        return "".join([*self.segments, tail])

    def carry(self) -> None:
        """The next reply continues the latest one: keep its text as a segment."""
        if self.last is not None:
            self.segments.append(self.last.text)
            self.last = None

    def restart(self) -> None:
        """The next reply is a new answer (after tool results, or a repair)."""
        self.segments.clear()


async def run_loop(run: RunState, user_input: list[Any]) -> AgentResult:
    """Run to the end. Never raises, except CancelledError after recording the cancel."""
    progress = Progress()
    try:
        await run.emit(
            AgentStarting,
            name=run.info.agent_name,
            session_id=run.info.session_id,
            parent_run_id=run.info.parent_run_id,
        )
        if run.setup_error is not None:
            raise run.setup_error
        if run.saver is not None:
            # Queued behind the session's earlier runs: an abort ends the wait.
            run.insert_history(await run.saver.open(run.signal))
        result = await _short_circuit(run, user_input)
        if result is None:
            if not continue_stored(run):  # a retry goes on from what its attempt stored
                run.add(*user_input)
            if run.saver is not None:
                run.signal.raise_if_aborted()  # aborted while queued: nothing is accepted
                await run.saver.accepted(run.unsaved())
            result = stored_answer(run) or await _drive(run, progress)
        for mw in reversed(run.config.middleware):
            result = await maybe_await(mw.after_execute(run.info, result))
        if run.saver is not None:
            await run.saver.succeeded()
    except asyncio.CancelledError:
        await _fail(run, progress, _cancelled(run, None), "cancelled")
        raise
    except Exception as exc:
        error, status = _classify(run, exc, progress)
        return await _fail(run, progress, error, status)
    finally:
        run.unlink()
        if run.saver is not None:
            await run.saver.close()
    await _finish(run, result, "completed")
    await run.emit(AgentCompleted, result=result)
    await deliver(run.report, run.observers)
    return result


async def _short_circuit(run: RunState, user_input: list[Any]) -> AgentResult | None:
    for mw in run.config.middleware:
        value = await maybe_await(mw.before_execute(run.info, list(user_input)))
        if value is not None:
            text = value if isinstance(value, str) else str(value)
            return _result(run, data=None if isinstance(value, str) else value, text=text)
    return None


async def _drive(run: RunState, progress: Progress) -> AgentResult:
    while True:
        run.signal.raise_if_aborted()
        response = await model_trip(run, progress.purpose)
        progress.last = response
        step = next_step(run, response, progress)
        if isinstance(step, Final):
            run.add(response.message)
            await _saved(run)
            # After a compaction the blocks are signed against a history the caller
            # never had: they cannot be replayed.
            compacted = any(d.status == "applied" for d in run.report.compactions)
            blocks = response.blocks if run.trip_count == 1 and not compacted else None
            return _result(run, data=step.data, text=step.text, blocks=blocks)
        await _take(run, step, response, progress)
        await _saved(run)


async def _saved(run: RunState) -> None:
    """A step is complete: hand its messages to the save policy."""
    if run.saver is not None:
        await run.saver.turn_done(run.unsaved())


async def _take(run: RunState, step: Step, response: ModelResponse, progress: Progress) -> None:
    """Carry out a step that needs another trip."""
    trip_index = run.trip_count - 1
    if isinstance(step, RunTools):
        run.add(response.message)
        await run_tool_round(run, trip_index, step.calls)
        progress.restart()
        progress.purpose = "tools"
    elif isinstance(step, Resume):
        run.add(response.message)
        progress.carry()
        progress.purpose = "resume"
    elif isinstance(step, Continue):
        await _continue(run, trip_index, response, step)
        progress.carry()
        progress.continuations += 1
        progress.purpose = "continuation"
    elif isinstance(step, Repair):
        run.add(
            response.message,
            UserMessage(content=f"{step.error.message}. Reply again with only the corrected JSON."),
        )
        progress.restart()
        progress.repairs += 1
        progress.purpose = "repair"


def next_step(run: RunState, response: ModelResponse, progress: Progress) -> Step:
    """Decide what a reply means for the run (raising for the ends that are failures)."""
    finish = response.finish_reason
    if finish == "refusal":
        raise RefusalError(
            f"the model refused: {response.refusal or response.text or 'no reason given'}",
            provider=response.provider,
        )
    if finish == "context_exceeded":
        raise _incomplete(run, "context_window", progress)
    if finish == "length":
        complete, truncated = _split_cut_off(response.tool_calls)
        run.report.trips[-1].truncated_tool_calls = [c.call_id for c in truncated]
        # A continuation is a trip like any other: with none left, the run is cut off.
        continuations_left = progress.continuations < run.config.continue_on_output_limit
        if continuations_left and run.trip_count < run.config.max_trips:
            return Continue(complete=complete, dropped=truncated)
        raise _incomplete(run, "output_limit", progress)
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


async def _continue(
    run: RunState, trip_index: int, response: ModelResponse, step: Continue
) -> None:
    """Keep the partial text, run the calls that arrived whole, drop the cut-off ones,
    and ask the model to go on (saying which calls did not run)."""
    run.add(AssistantMessage(content=response.content, tool_calls=step.complete))
    if step.complete:
        await run_tool_round(run, trip_index, step.complete)
    note = "".join(
        f" Your call to tool {c.name!r} was cut off and did not run." for c in step.dropped
    )
    run.add(UserMessage(content=CONTINUE_PROMPT + note))


def _incomplete(run: RunState, reason: str, progress: Progress) -> AgentIncompleteError:
    return AgentIncompleteError(
        f"the reply was cut off ({reason})",
        reason=reason,
        trip_index=run.trip_count - 1,
        continuations=progress.continuations,
    )


def _cancelled(run: RunState, exc: AbortedError | None) -> AgentCancelledError:
    at = {"trip": "trip", "tools": "tools"}.get(run.phase, "between_trips")
    reason = run.signal.reason or (None if exc is None else exc.details.get("reason"))
    return AgentCancelledError(
        f"the run was cancelled ({at})",
        cancelled_at=at,
        reason=reason or "task cancelled",
        trip_index=max(0, run.trip_count - 1),
    )


def _classify(run: RunState, exc: Exception, progress: Progress) -> tuple[RaygentError, RunStatus]:
    if isinstance(exc, AbortedError):
        return _cancelled(run, exc), "cancelled"
    if isinstance(exc, AgentIncompleteError):
        return exc, "incomplete"
    if isinstance(exc, ContextLengthExceededError):
        return AgentIncompleteError(
            f"the conversation no longer fits the context window: {exc.message}",
            reason="context_window",
            trip_index=max(0, run.trip_count - 1),
            continuations=progress.continuations,
        ), "incomplete"
    if isinstance(exc, RaygentError):
        return exc, "failed"
    return RaygentError(f"unexpected {type(exc).__name__}: {exc}"), "failed"


async def _fail(
    run: RunState, progress: Progress, error: RaygentError, status: RunStatus
) -> AgentResult:
    for mw in run.config.middleware:
        # An error hook must not mask the run's own error.
        with contextlib.suppress(Exception):
            await maybe_await(mw.on_execute_error(run.info, error))
    if run.saver is not None:
        await run.saver.failed(error, run.new_messages)
    result = _result(run, data=None, text=progress.text(), error=error)
    await _finish(run, result, status)
    await run.emit(AgentErrored, error=error.to_dict(), result=result)
    await deliver(run.report, run.observers)
    return result


def _result(
    run: RunState,
    *,
    data: Any,
    text: str,
    blocks: Any = None,
    error: RaygentError | None = None,
) -> AgentResult:
    return AgentResult(
        data=data, text=text, blocks=blocks, report=run.report, usage=run.usage, error=error
    )


async def _finish(run: RunState, result: AgentResult, status: RunStatus) -> None:
    report = run.report
    report.status = status
    report.ended_at = now()
    report.duration = (report.ended_at - report.started_at).total_seconds()
    report.error = None if result.error is None else result.error.to_dict()
    report.handler_errors = run.events.handler_errors
    if run.config.capture_messages:
        report.messages = list(run.messages)
    result.usage = run.usage
    run.phase = "done"
    run.result = result
