"""`raygent.observers.OpenTelemetry`: report trees as OpenTelemetry spans (the `otel` extra).

The spans are made from the finished report, with the times the report recorded, so
tracing costs a run nothing while it runs. A run is one span; its trips (model
requests) and tool calls are its children, and a nested run hangs under the tool call
that ran it. Tool calls are siblings of the trips rather than their children: a tool
call starts after its trip has ended, and trace viewers draw a child inside its
parent's time range (the trip that asked for it is in `raygent.trip.index`), as the
GenAI semantic conventions do with `execute_tool` under `invoke_agent`.

A workflow or supervisor run is a span too (`invoke_workflow <name>`,
`invoke_supervisor <name>`), each of its steps a child span (`step <name>`), and the
runs a step made hang under their step (agents and nested flows alike; a parallel
branch or an intent in `raygent.branch`, the step's attempt in `raygent.attempt`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..usage import Usage
from .report import AgentReport, FlowReport

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from .report import RunReport, StepReport, StepRun, Timing, ToolCallReport, TripReport

__all__ = ["OpenTelemetry"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_CONTENT_LIMIT = 4096  # characters of input/output kept on a span with capture_content


class OpenTelemetry:
    """An observer that records each report tree as spans.

    Every span carries `raygent.run_id`, `raygent.root_run_id` and (when set)
    `raygent.session_id`; tool spans `raygent.call_id`; run and trip spans the token
    usage (`gen_ai.usage.*`) and `raygent.cost_usd` when the pricing is known (a flow
    and each of its steps too: the usage of every run under it); a flow span also has
    `raygent.kind`, a step span `raygent.step.name`, `.kind`, `.status` and `.attempts`.
    A run that did not complete, a step that failed or a tool call that failed has an
    error status and `error.type` (the error's code). Tool arguments and outputs and
    model text are left out unless `capture_content=True`. The root span's parent is the
    span current when the run ended, if any.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False
    ) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError(
                "raygent.observers.OpenTelemetry needs OpenTelemetry: "
                "pip install 'raygent[otel]' (or opentelemetry-api and an SDK)"
            ) from exc
        from .._version import __version__

        self._trace = trace
        self._tracer: Tracer = trace.get_tracer("raygent", __version__, tracer_provider)
        self.capture_content = capture_content

    def __call__(self, report: RunReport) -> None:
        self._any(report, None)

    def _any(self, report: RunReport, parent: Context | None, run: StepRun | None = None) -> None:
        extra = (
            {} if run is None else {"raygent.branch": run.branch, "raygent.attempt": run.attempt}
        )
        if isinstance(report, FlowReport):
            self._flow(report, parent, extra)
        else:
            self._run(report, parent, extra)

    def _flow(self, report: FlowReport, parent: Context | None, extra: dict[str, Any]) -> None:
        ids = _ids(report)
        operation = f"invoke_{report.kind}"
        attributes = {
            **ids,
            **extra,
            "gen_ai.operation.name": operation,
            "raygent.kind": report.kind,
            "raygent.flow.name": report.name,
            "raygent.flow.version": report.version,
            "raygent.parent_run_id": report.parent_run_id,
            "raygent.status": report.status,
            "raygent.steps": len(report.steps),
            "raygent.runs": len(report.runs()),
            **_usage(report.total_usage()),
        }
        end = report.ended_at or report.started_at
        span = self._start(f"{operation} {report.name}", parent, attributes, report.started_at)
        self._status(span, report.status == "completed", report.error, report.status)
        inside = self._trace.set_span_in_context(span)
        for step in report.steps:
            self._step(step, ids, inside, end)
        span.end(_ns(end))

    def _step(self, step: StepReport, ids: dict[str, Any], parent: Context, end: datetime) -> None:
        attributes = {
            **ids,
            "raygent.step.name": step.name,
            "raygent.step.kind": step.kind,
            "raygent.step.status": step.status,
            "raygent.step.attempts": step.attempts,
            "raygent.step.iteration": step.iteration,
            **_usage(sum((run.report.total_usage() for run in step.runs), Usage())),
        }
        span = self._start(f"step {step.name}", parent, attributes, step.started_at)
        self._status(span, step.status not in ("failed", "cancelled"), step.error, step.status)
        inside = self._trace.set_span_in_context(span)
        for run in step.runs:
            self._any(run.report, inside, run)
        span.end(_ns(step.ended_at or end))

    def _status(self, span: Span, ok: bool, error: dict[str, Any] | None, status: str) -> None:
        if ok:
            span.set_status(self._trace.StatusCode.OK)
            return
        error = error or {}
        span.set_attribute("error.type", str(error.get("code") or status))
        message = str(error.get("message") or f"the run ended {status}")
        span.set_status(self._trace.StatusCode.ERROR, message)

    def _run(self, report: AgentReport, parent: Context | None, extra: dict[str, Any]) -> None:
        ids = _ids(report)
        attributes = {
            **ids,
            **extra,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": report.name,
            "gen_ai.request.model": report.model.name,
            "gen_ai.provider.name": report.model.provider,
            "raygent.parent_run_id": report.parent_run_id,
            "raygent.agent.version": report.version,
            "raygent.status": report.status,
            "raygent.trips": len(report.trips),
            "raygent.tool_calls": len(report.tool_calls),
            **_usage(report.total_usage()),
        }
        end = report.ended_at or report.started_at
        span = self._start(f"invoke_agent {report.name}", parent, attributes, report.started_at)
        self._status(span, report.status == "completed", report.error, report.status)
        inside = self._trace.set_span_in_context(span)
        for trip in report.trips:
            self._trip(report, trip, ids, inside)
        for call in report.tool_calls:
            self._tool_call(call, ids, inside, end)
        span.end(_ns(end))

    def _trip(
        self, report: AgentReport, trip: TripReport, ids: dict[str, Any], parent: Context
    ) -> None:
        attributes = {
            **ids,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": report.model.name,
            "gen_ai.provider.name": report.model.provider,
            "gen_ai.response.finish_reasons": [trip.finish_reason] if trip.finish_reason else None,
            "raygent.trip.index": trip.index,
            "raygent.trip.purpose": trip.purpose,
            "raygent.trip.attempts": len(trip.attempts) or None,
            "raygent.trip.output": self._content(trip.output),
            **_usage(trip.usage),
        }
        span = self._start(f"chat {report.model.name}", parent, attributes, trip.timing.started_at)
        span.end(_ns(_ended(trip.timing, report.ended_at)))

    def _tool_call(
        self, call: ToolCallReport, ids: dict[str, Any], parent: Context, run_end: datetime
    ) -> None:
        attributes = {
            **ids,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.call_id,
            "raygent.call_id": call.call_id,
            "raygent.trip.index": call.trip_index,
            "raygent.tool.input": self._content(call.input),
            "raygent.tool.output": self._content(call.output),
        }
        span = self._start(f"execute_tool {call.name}", parent, attributes, call.timing.started_at)
        if call.error is not None:
            span.set_attribute("error.type", str(call.error.get("code") or "tool_error"))
            span.set_status(self._trace.StatusCode.ERROR, str(call.error.get("message") or ""))
        if call.child is not None:
            self._any(call.child, self._trace.set_span_in_context(span))
        span.end(_ns(_ended(call.timing, run_end)))

    def _start(
        self, name: str, parent: Context | None, attributes: Mapping[str, Any], at: datetime
    ) -> Span:
        # OpenTelemetry refuses None attribute values: leave out what a report lacks.
        present = {key: value for key, value in attributes.items() if value is not None}
        return self._tracer.start_span(name, parent, attributes=present, start_time=_ns(at))

    def _content(self, value: Any) -> str | None:
        if not self.capture_content or value is None:
            return None
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return text[:_CONTENT_LIMIT]


def _ids(report: RunReport) -> dict[str, Any]:
    return {
        "raygent.run_id": report.run_id,
        "raygent.root_run_id": report.root_run_id,
        "raygent.session_id": report.session_id,
    }


def _usage(usage: Usage) -> dict[str, Any]:
    if usage.requests == 0 and usage.total_tokens == 0:
        return {}
    return {
        "gen_ai.usage.input_tokens": usage.total_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "raygent.usage.cached_tokens": usage.cached_tokens,
        "raygent.usage.reasoning_tokens": usage.reasoning_tokens,
        "raygent.usage.requests": usage.requests,
        "raygent.cost_usd": None if usage.cost is None else usage.cost.total,
    }


def _ended(timing: Timing, fallback: datetime | None) -> datetime:
    """When a step ended; a step cut short by a cancellation ends with its run."""
    return timing.ended_at or fallback or timing.started_at


def _ns(at: datetime) -> int:
    """Nanoseconds since the epoch, exactly (a float timestamp loses microseconds)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
