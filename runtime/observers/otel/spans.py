"""A finished report tree as spans, with the times the report recorded.

A run is one span (`invoke_agent <name>`); its trips (model requests) and tool calls are
its children, and a nested run hangs under the tool call that ran it. Tool calls are
siblings of the trips rather than their children: a tool call starts after its trip has
ended, and trace viewers draw a child inside its parent's time range (the trip that
asked for it is in `raygent.trip.index`), as the GenAI conventions do with
`execute_tool` under `invoke_agent`.

A workflow is `invoke_workflow <name>` and a supervisor `invoke_agent <name>` (it is an
agent that routes to agents; `raygent.kind` says which), each of its steps a child span
(`step <name>`), and the runs a step made hang under their step (a parallel branch or an
intent in `raygent.branch`, the step's attempt in `raygent.attempt`).

A trip's attempts that failed before its answer (a fallback model's, a tier's refusal, a
send retried after a 429) are events on its span (`raygent.attempt.failed`), at the
trip's start: the report keeps no time of its own for each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ...usage import Usage
from ..report import AgentReport, FlowReport
from . import names as n
from .requests import fresh_trips, resumed_from, trip_request

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from ..report import RunReport, StepReport, StepRun, Timing, ToolCallReport, TripReport

__all__ = ["SpanWriter"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_CONTENT_LIMIT = 4096  # characters of input/output kept on a span with capture_content


class SpanWriter:
    """Writes report trees as spans through one tracer."""

    def __init__(self, tracer: Tracer, capture_content: bool) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self.capture_content = capture_content

    def write(self, report: RunReport) -> None:
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
        workflow = report.kind == "workflow"
        operation = n.INVOKE_WORKFLOW if workflow else n.INVOKE_AGENT
        attributes = {
            **ids,
            **extra,
            n.OPERATION: operation,
            (n.WORKFLOW_NAME if workflow else n.AGENT_NAME): report.name,
            n.KIND: report.kind,
            "raygent.flow.name": report.name,
            "raygent.flow.version": report.version,
            n.PARENT_RUN_ID: report.parent_run_id,
            n.STATUS: report.status,
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
        span.set_attribute(n.ERROR_TYPE, str(error.get("code") or status))
        message = str(error.get("message") or f"the run ended {status}")
        span.set_status(self._trace.StatusCode.ERROR, message)

    def _run(self, report: AgentReport, parent: Context | None, extra: dict[str, Any]) -> None:
        ids = _ids(report)
        attributes = {
            **ids,
            **extra,
            n.OPERATION: n.INVOKE_AGENT,
            n.AGENT_NAME: report.name,
            n.AGENT_VERSION: report.version,
            n.REQUEST_MODEL: report.model.name,
            n.PROVIDER: n.provider_name(report.model.provider),
            n.PARENT_RUN_ID: report.parent_run_id,
            n.TENANT: report.tenant,
            n.STATUS: report.status,
            "raygent.trips": len(report.trips),
            "raygent.tool_calls": len(report.tool_calls),
            **_usage(report.total_usage()),
        }
        end = report.ended_at or report.started_at
        span = self._start(f"invoke_agent {report.name}", parent, attributes, report.started_at)
        self._status(span, report.status == "completed", report.error, report.status)
        inside = self._trace.set_span_in_context(span)
        for trip in fresh_trips(report):
            self._trip(report, trip, ids, inside)
        start = resumed_from(report)
        for call in report.tool_calls:
            if call.trip_index >= start:
                self._tool_call(call, ids, inside, end)
        span.end(_ns(end))

    def _trip(
        self, report: AgentReport, trip: TripReport, ids: dict[str, Any], parent: Context
    ) -> None:
        request = trip_request(report, trip)
        attributes = {
            **ids,
            n.OPERATION: n.CHAT,
            n.REQUEST_MODEL: request.model,
            n.RESPONSE_MODEL: request.response_model,
            n.PROVIDER: n.provider_name(request.provider),
            n.FINISH_REASONS: [trip.finish_reason] if trip.finish_reason else None,
            n.tier_name(request.provider, response=False): request.request_tier,
            n.tier_name(request.provider, response=True): request.response_tier,
            "raygent.trip.index": trip.index,
            "raygent.trip.purpose": trip.purpose,
            "raygent.trip.attempts": len(trip.attempts) or None,
            n.ROUTE: trip.via,
            n.PROVIDER_BATCH: trip.provider_batch,
            n.BATCH_WAIT: trip.batch_wait,
            n.CACHE: trip.cache,
            n.CACHE_SAVED: trip.saved or None,
            n.RATE_WAIT: trip.rate_wait or None,
            n.THROTTLED: trip.throttled or None,
            n.TIER_FALLBACKS: sum(a.fallback == "tier" for a in request.failed) or None,
            n.OUTPUT_MESSAGES: self._output(trip),
            **_usage(trip.usage),
        }
        at = trip.timing.started_at
        span = self._start(f"chat {report.model.name}", parent, attributes, at)
        for attempt in request.failed:
            event = {
                n.REQUEST_MODEL: attempt.model,
                n.PROVIDER: n.provider_name(attempt.provider),
                n.ERROR_TYPE: attempt.error_type,
                n.FALLBACK: attempt.fallback,
            }
            span.add_event(n.ATTEMPT_EVENT, event, _ns(at))
        for send in trip.attempts:
            if "attempt" in send and not send.get("ok", True) and "fallback" not in send:
                retried = n.present(
                    {
                        n.ERROR_TYPE: send.get("code") or n.OTHER_ERROR,
                        "raygent.send": send["attempt"],
                    }
                )
                span.add_event(n.ATTEMPT_EVENT, retried, _ns(at))  # type: ignore[arg-type]
        if request.error_type is not None:
            span.set_attribute(n.ERROR_TYPE, request.error_type)
            message = str((report.error or {}).get("message") or "the request failed")
            span.set_status(self._trace.StatusCode.ERROR, message)
        span.end(_ns(_ended(trip.timing, report.ended_at)))

    def _tool_call(
        self, call: ToolCallReport, ids: dict[str, Any], parent: Context, run_end: datetime
    ) -> None:
        attributes = {
            **ids,
            n.OPERATION: n.EXECUTE_TOOL,
            n.TOOL_NAME: call.name,
            n.TOOL_CALL_ID: call.call_id,
            n.TOOL_TYPE: n.FUNCTION_TOOL,
            "raygent.trip.index": call.trip_index,
            n.TOOL_ARGUMENTS: self._content(call.input),
            n.TOOL_RESULT: self._content(call.output),
        }
        span = self._start(f"execute_tool {call.name}", parent, attributes, call.timing.started_at)
        if call.error is not None:
            span.set_attribute(n.ERROR_TYPE, str(call.error.get("code") or "tool_error"))
            span.set_status(self._trace.StatusCode.ERROR, str(call.error.get("message") or ""))
        if call.child is not None:
            self._any(call.child, self._trace.set_span_in_context(span))
        span.end(_ns(_ended(call.timing, run_end)))

    def _start(
        self, name: str, parent: Context | None, attributes: Mapping[str, Any], at: datetime
    ) -> Span:
        present = n.present(dict(attributes))
        return self._tracer.start_span(name, parent, attributes=present, start_time=_ns(at))  # type: ignore[arg-type]

    def _content(self, value: Any) -> str | None:
        if not self.capture_content or value is None:
            return None
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return text[:_CONTENT_LIMIT]

    def _output(self, trip: TripReport) -> str | None:
        """The reply as the conventions' `gen_ai.output.messages` (its text; the tool
        calls it asked for are their own spans)."""
        if not self.capture_content or trip.finish_reason is None:
            return None
        message = {
            "role": "assistant",
            "parts": [{"type": "text", "content": trip.output[:_CONTENT_LIMIT]}],
            "finish_reason": trip.finish_reason,
        }
        return json.dumps([message])


def _ids(report: RunReport) -> dict[str, Any]:
    return {
        n.RUN_ID: report.run_id,
        n.ROOT_RUN_ID: report.root_run_id,
        n.CONVERSATION: report.session_id,
    }


def _usage(usage: Usage) -> dict[str, Any]:
    if usage.requests == 0 and usage.total_tokens == 0:
        return {}
    return {
        n.INPUT_TOKENS: usage.total_input_tokens,
        n.OUTPUT_TOKENS: usage.output_tokens,
        n.CACHE_READ_TOKENS: usage.cached_tokens,
        n.CACHE_WRITE_TOKENS: usage.cache_write_tokens,
        n.REASONING_TOKENS: usage.reasoning_tokens,
        n.REQUESTS: usage.requests,
        n.COST: None if usage.cost is None else usage.cost.total,
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
