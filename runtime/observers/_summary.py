"""Short `repr()`s of results and reports: status, counts, cost, duration on one line
(the pydantic default prints the whole tree, kilobytes of it; `to_json()` and the
notebook views still show everything). The reports are taken as they come (`Any`): the
report module imports this one."""

from __future__ import annotations

from typing import Any

from ..usage import Usage, total_cost

__all__ = ["report_repr", "result_repr", "tool_call_repr", "trip_repr"]

_TEXT = 60  # characters of an answer or an error a repr shows


def result_repr(kind: str, result: Any) -> str:
    """`AgentResult(completed, 'Sunny in Paris.', 2 trips, 1 tool call, $0.000120, 1.20 s)`."""
    report = result.report
    said = f"error={_error(result.error)}" if result.error is not None else _clip(result.text)
    return (
        f"{kind}({report.status}, {said}, {_counts(report)}, {_money(result.usage)}{_secs(report)})"
    )


def report_repr(report: Any) -> str:
    """`AgentReport('forecaster', completed, 2 trips, 1 tool call, 1.20 s, run_id='…')`."""
    name = type(report).__name__
    error = f", error={report.error.get('code')}" if report.error else ""
    return (
        f"{name}({report.name!r}, {report.status}, {_counts(report)}{_secs(report)}{error}, "
        f"run_id={report.run_id!r})"
    )


def trip_repr(trip: Any) -> str:
    """`TripReport(#1 tools, finish=tool_calls, 120 in / 30 out tokens, 0.31 s)`."""
    usage = trip.usage
    tokens = f"{usage.total_input_tokens:,} in / {usage.output_tokens:,} out tokens"
    cache = f", cache={trip.cache}" if trip.cache else ""
    via = ", via=batch" if trip.via == "batch" else ""
    # A tier is shown when it is not the provider's standard one.
    shown = trip.service_tier not in (None, "default", "standard")
    tier = f", tier={trip.service_tier}" if shown else ""
    took = f", {trip.timing.duration:.2f} s" if trip.timing.duration is not None else ""
    return (
        f"TripReport(#{trip.index} {trip.purpose}, finish={trip.finish_reason}, "
        f"{tokens}{cache}{via}{tier}{took})"
    )


def tool_call_repr(call: Any) -> str:
    """`ToolCallReport('get_weather', ok, 0.01 s)` or `(..., error=TOOL_EXECUTION, ...)`."""
    outcome = f"error={call.error.get('code')}" if call.error else "ok"
    took = f", {call.timing.duration:.2f} s" if call.timing.duration is not None else ""
    return f"ToolCallReport({call.name!r}, {outcome}{took})"


def _counts(report: Any) -> str:
    if not hasattr(report, "trips"):  # a flow: its steps
        return _plural(len(report.steps), "step")
    line = f"{_plural(len(report.trips), 'trip')}, {_plural(len(report.tool_calls), 'tool call')}"
    failed = report.tool_errors
    return f"{line} ({failed} failed)" if failed else line


def _money(usage: Usage) -> str:
    cost = total_cost(usage)
    if cost is None:
        return "cost unknown" if usage.requests else "$0"
    return f"${cost:.6f}" if cost else "$0"


def _secs(report: Any) -> str:
    return "" if report.duration is None else f", {report.duration:.2f} s"


def _error(error: Any) -> str:
    code = getattr(error, "code", None) or type(error).__name__
    return f"{code}: {_clip(str(error))}"


def _clip(text: str | None) -> str:
    text = text or ""
    return repr(text if len(text) <= _TEXT else text[: _TEXT - 1] + "…")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
