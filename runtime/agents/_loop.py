"""The agent loop: trips and tool rounds until a final answer (`_next_step` says what
a reply means). `run_loop` runs a new run; a durable run's resume (`_resume`) goes through
the same `lifecycle` and `drive`.

A durable run (`run.journal`) writes its state after every settled step, before the
save policy sees the step: a resume then replays the last hand-over (stores skip an
append they already hold) instead of losing or doubling it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import (
    AbortedError,
    AgentCancelledError,
    AgentIncompleteError,
    AwaitingApprovalError,
    ContextLengthExceededError,
    RaygentError,
)
from ..messages import AssistantMessage, Message, ToolCall, UserMessage
from ..models.contract import ModelResponse
from ..observers.delivery import deliver
from ..observers.events import AgentCompleted, AgentErrored, AgentStarting
from ..observers.report import AgentResult, RunStatus
from ._approval import AwaitingApproval, decide
from ._next_step import (
    CONTINUE_PROMPT,
    Continue,
    Final,
    Repair,
    Resume,
    RunTools,
    Step,
    next_step,
)
from ._retry_resume import continue_stored, stored_answer
from ._state import Progress, RunState, maybe_await, now
from ._tool_round import check_tool_errors, run_tool_round
from ._toolsets import resolve_toolsets
from ._trip import model_trip

__all__ = ["drive", "lifecycle", "run_loop", "settle", "tool_step"]

Body = Callable[[Progress], Awaitable[AgentResult]]


async def run_loop(run: RunState, user_input: list[Any]) -> AgentResult:
    """Run to the end. Never raises, except CancelledError after recording the cancel."""

    async def body(progress: Progress) -> AgentResult:
        if run.saver is not None:
            # Queued behind the session's earlier runs: an abort ends the wait.
            run.insert_history(await run.saver.open(run.signal))
        result = await _short_circuit(run, user_input)
        if result is not None:
            return result
        if not continue_stored(run):  # a retry goes on from what its attempt stored
            run.add(*user_input)
        run.signal.raise_if_aborted()  # aborted while queued: nothing is accepted
        if run.journal is not None:
            await run.journal.start(run)
        if run.saver is not None:
            await run.saver.accepted(run.unsaved())
        return stored_answer(run) or await drive(run, progress)

    return await lifecycle(run, Progress(), body)


async def lifecycle(run: RunState, progress: Progress, body: Body) -> AgentResult:
    """Events, middleware, the save policy's end and the report around `body`."""
    try:
        await run.emit(
            AgentStarting,
            name=run.info.agent_name,
            session_id=run.info.session_id,
            parent_run_id=run.info.parent_run_id,
            tenant=run.report.tenant,
        )
        if run.setup_error is not None:
            raise run.setup_error
        await resolve_toolsets(run)
        result = await body(progress)
        for mw in reversed(run.config.middleware):
            result = await maybe_await(mw.after_execute(run.info, result))
        if run.saver is not None:
            await run.saver.succeeded()
    except asyncio.CancelledError:
        await _fail(run, progress, _cancelled(run, None), "cancelled")
        raise
    except AwaitingApproval as pause:
        return await _pause(run, progress, pause)
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


async def drive(run: RunState, progress: Progress) -> AgentResult:
    """Trip until a final answer."""
    while True:
        run.signal.raise_if_aborted()
        response = await model_trip(run, progress.purpose)
        progress.last = response
        step = next_step(run, response, progress)
        if isinstance(step, Final):
            run.add(response.message)
            # After a client compaction the blocks are signed against a history the
            # caller never had: they cannot be replayed. (A server compaction's reply
            # carries its own compaction block: it replays.)
            compacted = any(
                d.status == "applied" and d.kind == "client" for d in run.report.compactions
            )
            blocks = response.blocks if run.trip_count == 1 and not compacted else None
            result = _result(run, data=step.data, text=step.text, blocks=blocks)
            if run.journal is not None:
                await run.journal.finish(run, result)
            await _saved(run)
            return result
        await _take(run, step, response, progress)


async def _saved(run: RunState) -> None:
    """A step is complete: hand its messages to the save policy."""
    if run.saver is not None:
        await run.saver.turn_done(run.unsaved())


async def settle(run: RunState, progress: Progress) -> None:
    """A step that needs another trip is done: write it (durable), then save it."""
    if run.journal is not None:
        await run.journal.settled(run, progress)
    await _saved(run)


async def _take(run: RunState, step: Step, response: ModelResponse, progress: Progress) -> None:
    """Carry out a step that needs another trip: the messages before its tool round, the
    round, the messages after it. Progress moves first, so that a durable run's state
    written before the round is the state after the step."""
    trip_index = run.trip_count - 1
    before: list[Message] = [response.message]
    calls: list[ToolCall] = []
    after: list[Message] = []
    if isinstance(step, RunTools):
        calls = step.calls
        progress.restart()
        progress.purpose = "tools"
    elif isinstance(step, Resume):
        progress.carry()
        progress.purpose = "resume"
    elif isinstance(step, Continue):
        # Keep the partial text, run the calls that arrived whole, drop the cut-off
        # ones, and ask the model to go on (saying which calls did not run).
        before = [AssistantMessage(content=response.content, tool_calls=step.complete)]
        calls = step.complete
        note = "".join(
            f" Your call to tool {c.name!r} was cut off and did not run." for c in step.dropped
        )
        after = [UserMessage(content=CONTINUE_PROMPT + note)]
        progress.carry()
        progress.continuations += 1
        progress.purpose = "continuation"
    elif isinstance(step, Repair):
        after = [
            UserMessage(content=f"{step.error.message}. Reply again with only the corrected JSON.")
        ]
        progress.restart()
        progress.repairs += 1
        progress.purpose = "repair"
    run.add(*before)
    if calls:
        await tool_step(run, progress, trip_index, calls, after)
    run.add(*after)
    await settle(run, progress)


async def tool_step(
    run: RunState,
    progress: Progress,
    trip_index: int,
    calls: list[ToolCall],
    after: list[Message],
    reran: bool = False,
) -> None:
    """The tool round of a step: decide approvals (stopping the run while any call waits),
    write the pending round (durable), run it."""
    denied = await decide(run, trip_index, calls)
    if denied is None:
        if run.journal is not None:
            await run.journal.awaiting(run, progress, trip_index, calls, after)
        raise AwaitingApproval(run.report.pending)
    write = None
    if run.journal is not None:
        write = run.journal.reply(run, progress, trip_index, calls, after, denied)
    if reran:
        resume = run.report.resumes[-1]
        resume.reran_calls = [c.call_id for c in calls if c.call_id not in denied]
    try:
        await run_tool_round(run, trip_index, calls, denied)
    except BaseException:
        if write is not None:
            write.cancel()
        raise
    if write is not None:
        await write.done()
    check_tool_errors(run, trip_index)


async def _pause(run: RunState, progress: Progress, pause: AwaitingApproval) -> AgentResult:
    """The run waits for approvals (`decide` listed them in the report): not a failure,
    nothing recorded as an error."""
    ids = [p.call_id for p in pause.pending]
    error = AwaitingApprovalError(
        f"the run waits for approval of {len(ids)} tool call(s): {', '.join(ids)}", pending=ids
    )
    result = _result(run, data=None, text=progress.text(), error=error)
    await _finish(run, result, "awaiting_approval")
    await run.emit(AgentErrored, error=error.to_dict(), result=result)
    await deliver(run.report, run.observers)
    return result


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
    if run.journal is not None and run.saver is not None and status != "awaiting_approval":
        # The durable run has ended: its session no longer keeps its place for it. (A
        # failing release leaves a hold that its resume or `abandon` releases.)
        with contextlib.suppress(Exception):
            await run.saver.hold.release()
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
