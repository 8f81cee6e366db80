"""The tool calls of one trip: run concurrently, answered in the order the model asked.

A tool that is unknown, gets invalid arguments, raises, times out or returns an image
that fails its checks becomes an error result the model can read (and an
`agent.tool.failed` event); the run goes on. A result's images go on as image parts of
its tool message (`tool_result_content`, checked by `attachments.tool_parts`). Only an
abort or a cancellation stops the round, cancelling every tool still running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, cast

from ..abort import abortable
from ..attachments.load import tool_parts
from ..errors import (
    AbortedError,
    InvalidOptionsError,
    RaygentError,
    ToolDeniedError,
    ToolExecutionError,
)
from ..messages import ToolCall, ToolMessage
from ..observers.events import ToolCalled, ToolCalling, ToolFailed
from ..observers.report import Timing, ToolCallReport
from ..seams.attempt import ScopedToolContext
from ..tools import ToolContext, tool_result_content
from ._state import RunState, ToolErrors, maybe_await, now

__all__ = ["check_tool_errors", "run_tool_round", "tool_context", "tool_errors_setting"]


async def run_tool_round(
    run: RunState,
    trip_index: int,
    calls: list[ToolCall],
    denied: Mapping[str, str] | None = None,
) -> None:
    """Run `calls` and append their results to the conversation, in the model's order.
    A call in `denied` (call_id -> reason) does not run: its result is the denial."""
    run.signal.raise_if_aborted()  # an aborted run starts no tools
    run.phase = "tools"
    denied = denied or {}
    tasks = [asyncio.ensure_future(_one(run, trip_index, call, denied)) for call in calls]
    try:
        results = await abortable(asyncio.gather(*tasks), run.signal)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    run.add(*results)
    run.phase = "between_trips"


async def _one(
    run: RunState, trip_index: int, call: ToolCall, denied: Mapping[str, str]
) -> ToolMessage:
    clock = time.perf_counter()
    record = ToolCallReport(
        call_id=call.call_id,
        name=call.name,
        input=call.arguments,
        trip_index=trip_index,
        timing=Timing(started_at=now()),
        session_id=run.info.session_id,
    )
    run.report.tool_calls.append(record)
    await run.emit(
        ToolCalling,
        trip_index=trip_index,
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
    )
    try:
        if call.call_id in denied:
            raise ToolDeniedError(
                f"the call to {call.name!r} was denied: {denied[call.call_id]}",
                tool=call.name,
                reason=denied[call.call_id],
            )
        value = await _invoke(run, trip_index, call, record)
        returned, data = tool_result_content(value, call.name)
        config = run.config
        parts = await tool_parts(
            returned, config.attachment_policy, config.model.capabilities, call.name
        )
    except Exception as exc:
        if isinstance(exc, AbortedError) and run.signal.aborted:
            raise  # the run is being cancelled; anything else a tool raises is its failure
        error = _as_tool_error(exc, call)
        record.error = error.to_dict()
        _finish(record, clock)
        await run.emit(
            ToolFailed,
            trip_index=trip_index,
            call_id=call.call_id,
            name=call.name,
            error=record.error,
        )
        return ToolMessage(
            call_id=call.call_id, name=call.name, content=f"Error: {error}", is_error=True
        )
    message = ToolMessage(call_id=call.call_id, name=call.name, content=parts)
    record.output = output = message.text
    if data is not None:
        record.data = data
    images = sum(1 for p in parts if p.type == "image")
    if images:
        record.images = images
    _finish(record, clock)
    await run.emit(
        ToolCalled,
        trip_index=trip_index,
        call_id=call.call_id,
        name=call.name,
        output=output,
        duration=record.timing.duration or 0.0,
    )
    return message


async def _invoke(run: RunState, trip_index: int, call: ToolCall, record: ToolCallReport) -> Any:
    config = run.config
    for mw in config.middleware:
        short = await maybe_await(mw.before_tool(run.info, call))
        if short is not None:
            return short
    tool = config.tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(config.tools)) or "none"
        raise ToolExecutionError(
            f"unknown tool {call.name!r}; the tools are: {known}", tool=call.name
        )
    ctx = tool_context(run, trip_index, call)
    try:
        value = await config.backend.tools.invoke(tool, call.arguments, ctx)
    except BaseException as exc:
        for mw in config.middleware:
            await maybe_await(mw.on_tool_error(run.info, call, exc))
        raise
    child = getattr(value, "report", None)
    if child is not None and hasattr(value, "usage"):
        # A nested run (an agent, a workflow, a supervisor): its report hangs under this
        # call, its usage adds to ours.
        record.child = child
        run.usage = run.usage + value.usage
        if value.error is not None:
            kind = getattr(child, "kind", "agent")
            raise ToolExecutionError(f"{kind} {call.name!r} failed: {value.error}", tool=call.name)
        value = value.data if value.data is not None else value.text
    for mw in reversed(config.middleware):
        value = await maybe_await(mw.after_tool(run.info, call, value))
    return value


def check_tool_errors(run: RunState, trip_index: int) -> None:
    """With `tool_errors="fail"`: raise the first failed call of this round as the run's
    error (a denial is a decision, not a failure: the model reads it either way)."""
    if run.config.tool_errors != "fail":
        return
    for record in run.report.tool_calls:
        error = record.error
        if record.trip_index != trip_index or error is None or error.get("code") == "TOOL_DENIED":
            continue
        raise ToolExecutionError(
            f"tool {record.name!r} failed (tool_errors='fail'): {error.get('message')}",
            tool=record.name,
            call_id=record.call_id,
            tool_error=error.get("code"),
        )


def tool_errors_setting(value: Any) -> ToolErrors:
    """`tool_errors=` checked: "continue" (the model reads the error) or "fail"."""
    if value not in ("continue", "fail"):
        raise InvalidOptionsError(
            f'tool_errors must be "continue" or "fail", not {value!r}', option="tool_errors"
        )
    return cast("ToolErrors", value)


def tool_context(run: RunState, trip_index: int, call: ToolCall) -> ToolContext:
    """What a tool (or its approval policy) learns about the call; with the scope a run
    it starts inherits (an agent run as a tool is held to this run's budgets too)."""
    config = run.config
    return ScopedToolContext(
        run_id=run.info.run_id,
        root_run_id=run.info.root_run_id,
        session_id=run.info.session_id,
        call_id=call.call_id,
        tool_name=call.name,
        trip_index=trip_index,
        signal=run.signal,
        deps=run.info.deps,
        scope=config.scope.child(config.ledgers),
    )


def _as_tool_error(exc: Exception, call: ToolCall) -> RaygentError:
    if isinstance(exc, RaygentError):
        return exc
    return ToolExecutionError(
        f"tool {call.name!r} raised {type(exc).__name__}: {exc}", tool=call.name
    )


def _finish(record: ToolCallReport, clock: float) -> None:
    record.timing.ended_at = now()
    record.timing.duration = time.perf_counter() - clock
