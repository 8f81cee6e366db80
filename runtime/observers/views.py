"""Notebook views: `_repr_html_` of results and reports, as self-contained HTML.

No script and nothing fetched: a style block and plain elements, so a view renders the
same in Jupyter, VS Code and an exported notebook. Every string that comes from a run
(model text, tool arguments and outputs, errors, names, keys) goes through `esc`;
only numbers computed here go into style attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from html import escape
from typing import Any

from ..usage import Usage
from .report import AgentReport, AgentResult, FlowReport, FlowResult, RunReport, Timing

__all__ = [
    "ROWS",
    "STYLE",
    "badge",
    "bar",
    "clip",
    "esc",
    "flow_html",
    "more",
    "report_html",
    "secs",
    "table",
    "usage_line",
]

ROWS = 50  # items or cases listed in a batch or eval view; the rest are counted
_CLIP = 300  # characters of text, arguments or output shown per cell

STYLE = """<style>
.rg{font:13px/1.4 system-ui,sans-serif;color:#222;max-width:960px}
.rg table{border-collapse:collapse;width:100%}
.rg td,.rg th{padding:2px 6px;text-align:left;vertical-align:top;border-bottom:1px solid #eee}
.rg .st{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:11px}
.rg .completed,.rg .passed{background:#2e7d32}.rg .failed{background:#c62828}
.rg .cancelled{background:#757575}.rg .incomplete{background:#ef6c00}
.rg .awaiting_approval{background:#1565c0}
.rg .meta{color:#666}.rg .err{color:#c62828;white-space:pre-wrap}
.rg .out{white-space:pre-wrap;background:#f6f6f6;padding:4px 6px;margin:4px 0}
.rg .track{position:relative;height:12px;min-width:240px;background:#f3f3f3}
.rg .bar{position:absolute;top:0;height:12px;min-width:2px}
.rg .trip{background:#1e88e5}.rg .tool{background:#8e24aa}.rg .bad{background:#c62828}
.rg .item{background:#00897b}.rg .step{background:#5e35b1}.rg details{margin-left:16px}
</style>"""


def report_html(report: RunReport, result: AgentResult | FlowResult | None = None) -> str:
    """A run: status, usage and cost, its answer or error, and a timeline of its trips
    and tool calls (nested runs folded under their tool call)."""
    if isinstance(report, FlowReport):
        return flow_html(report, result)
    assert result is None or isinstance(result, AgentResult)
    text = result.text if result is not None else (report.trips[-1].output if report.trips else "")
    usage = result.usage if result is not None else report.total_usage()
    return f'<div class="rg">{STYLE}{_run_body(report, usage, text)}</div>'


def flow_html(report: FlowReport, result: AgentResult | FlowResult | None = None) -> str:
    """A workflow or supervisor run: status, usage and cost, its answer or error, and its
    steps (kind, status, attempts, duration, a bar on the run's span), each step's runs
    folded under it (nested flows the same way)."""
    usage = result.usage if result is not None else report.total_usage()
    answer: Any = None
    if isinstance(result, FlowResult):
        answer = result.text or result.data
    return f'<div class="rg">{STYLE}{_flow_body(report, usage, answer)}</div>'


# -- one run -----------------------------------------------------------------------------


def _run_body(report: AgentReport, usage: Usage, text: str) -> str:
    parts = [
        f"<div><b>{esc(report.name)}</b> {badge(report.status, report.status)} "
        f'<span class="meta">{esc(report.model.provider)}:{esc(report.model.name)} · '
        f"{secs(report.duration)} · {len(report.trips)} trips · "
        f"{len(report.tool_calls)} tool calls · run {esc(report.run_id)}"
        + (f" · session {esc(report.session_id)}" if report.session_id else "")
        + "</span></div>",
        f"<div>{usage_line(usage)}</div>",
    ]
    if report.error:
        parts.append(_error(report.error))
    if text:
        parts.append(f'<div class="out">{esc(clip(text, 2000))}</div>')
    if report.pending:
        calls = "".join(
            f"<tr><td>{esc(p.call_id)}</td><td>{esc(p.tool)}</td>"
            f"<td>{esc(clip(p.arguments))}</td></tr>"
            for p in report.pending
        )
        parts.append(
            "<div><b>awaiting approval</b></div>"
            f"<table><tr><th>call</th><th>tool</th><th>arguments</th></tr>{calls}</table>"
        )
    if report.resumes:
        resumed = "; ".join(
            f"from trip {r.from_trip}"
            + (f", re-ran {', '.join(r.reran_calls)}" if r.reran_calls else "")
            + (" (forced)" if r.forced else "")
            + (" (already resolved)" if r.already_resolved else "")
            for r in report.resumes
        )
        parts.append(f'<div class="meta">resumed: {esc(resumed)}</div>')
    parts.append(_timeline(report))
    return "".join(parts)


def _timeline(report: AgentReport) -> str:
    """One row per trip and tool call, in start order, each a bar on the run's span."""
    start = report.started_at
    timings = [t.timing for t in report.trips] + [c.timing for c in report.tool_calls]
    ends = [timing.ended_at for timing in timings if timing.ended_at]
    end = max([report.ended_at or start, *ends])
    span = max((end - start).total_seconds(), 1e-9)

    def place(timing: Timing) -> tuple[float, float]:
        left = (timing.started_at - start).total_seconds() / span
        stop = (timing.ended_at or end) - start
        return left, max(stop.total_seconds() / span - left, 0.0)

    rows: list[tuple[datetime, str]] = []
    for trip in report.trips:
        left, width = place(trip.timing)
        label = (
            f"trip {trip.index} · {esc(trip.purpose)}"
            f' <span class="meta">{esc(trip.finish_reason or "")} · '
            f"{trip.usage.total_tokens} tokens</span>"
        )
        cells = f"<td>{label}</td><td>{bar(left, width, 'trip')}</td>"
        rows.append((trip.timing.started_at, _row(cells, trip.timing)))
    for call in report.tool_calls:
        left, width = place(call.timing)
        kind = "bad" if call.error else "tool"
        arguments = clip(call.input, 120)
        label = f"{esc(call.name)}(<span class='meta'>{esc(arguments)}</span>)"
        if call.error:
            detail = f'<div class="err">{esc(clip(call.error.get("message")))}</div>'
        else:
            detail = f'<div class="meta">→ {esc(clip(call.output))}</div>'
        if call.child is not None:
            detail += _folded(call.child, f"nested {_kind(call.child)}")
        cells = f"<td>{label}{detail}</td><td>{bar(left, width, kind)}</td>"
        rows.append((call.timing.started_at, _row(cells, call.timing)))
    rows.sort(key=lambda row: row[0])
    return table(["step", "timeline", ""], [row for _, row in rows])


# -- one flow ----------------------------------------------------------------------------


def _flow_body(report: FlowReport, usage: Usage, answer: Any) -> str:
    runs = report.runs()
    parts = [
        f"<div><b>{esc(report.name)}</b> {badge(report.status, report.status)} "
        f'<span class="meta">{esc(report.kind)}'
        + (f" {esc(report.version)}" if report.version else "")
        + f" · {secs(report.duration)} · {len(report.steps)} steps · {len(runs)} runs · "
        f"run {esc(report.run_id)}"
        + (f" · session {esc(report.session_id)}" if report.session_id else "")
        + "</span></div>",
        f"<div>{usage_line(usage)}</div>",
    ]
    if report.error:
        parts.append(_error(report.error))
    if answer is not None and answer != "":
        parts.append(f'<div class="out">{esc(clip(answer, 2000))}</div>')
    parts.append(_steps(report))
    return "".join(parts)


def _steps(report: FlowReport) -> str:
    """One row per step (every iteration and retry kept; the first ROWS), a bar on the
    flow's span, its runs folded in the row."""
    start = report.started_at
    ends = [step.ended_at for step in report.steps if step.ended_at]
    end = max([report.ended_at or start, *ends])
    span = max((end - start).total_seconds(), 1e-9)
    rows = []
    for step in report.steps[:ROWS]:
        left = (step.started_at - start).total_seconds() / span
        width = ((step.ended_at or end) - start).total_seconds() / span - left
        kind = "bad" if step.status == "failed" else "step"
        # A supervisor's iterations, a workflow's revisits (a Goto loop); not a first visit.
        shown = step.iteration is not None and (report.kind == "supervisor" or step.iteration > 1)
        label = esc(step.name) + (
            f' <span class="meta">{"iteration" if report.kind == "supervisor" else "visit"} '
            f"{step.iteration}</span>"
            if shown
            else ""
        )
        detail = _error(step.error) if step.error else ""
        for run in step.runs:
            tags = [f"branch {run.branch}"] if run.branch is not None else []
            if step.attempts > 1:
                tags.append(f"attempt {run.attempt}")
            detail += _folded(run.report, _kind(run.report), " · ".join(tags))
        rows.append(
            f"<tr><td>{label}{detail}</td><td>{esc(step.kind)}</td>"
            f"<td>{badge(step.status, step.status)}</td><td>{step.attempts}</td>"
            f"<td>{bar(left, max(width, 0.0), kind)}</td><td>{secs(step.duration)}</td></tr>"
        )
    listed = table(["step", "kind", "status", "attempts", "timeline", ""], rows)
    return listed + more(len(report.steps))


def _folded(report: RunReport, label: str, tags: str = "") -> str:
    """A run under a step or a tool call, folded: its name and status, then its view."""
    if isinstance(report, FlowReport):
        body = _flow_body(report, report.total_usage(), None)
    else:
        body = _run_body(report, report.total_usage(), "")
    meta = f' <span class="meta">{esc(tags)}</span>' if tags else ""
    return (
        f"<details><summary>{esc(label)} {esc(report.name)} "
        f"{badge(report.status, report.status)}{meta}</summary>{body}</details>"
    )


def _kind(report: RunReport) -> str:
    return report.kind if isinstance(report, FlowReport) else "run"


# -- pieces ------------------------------------------------------------------------------


def _error(error: dict[str, Any]) -> str:
    code, message = error.get("code", ""), error.get("message", "")
    return f'<div class="err">{esc(code)}: {esc(message)}</div>'


def _row(cells: str, timing: Timing) -> str:
    return f"<tr>{cells}<td>{secs(timing.duration)}</td></tr>"


def esc(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def clip(value: Any, limit: int = _CLIP) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, BaseException):
        text = f"{type(value).__name__}: {value}"
    else:
        dump = getattr(value, "model_dump", None)
        plain = dump(mode="json") if callable(dump) else value
        text = json.dumps(plain, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def badge(kind: str, label: str) -> str:
    known = {"completed", "failed", "cancelled", "incomplete", "passed", "awaiting_approval"}
    known_kind = kind if kind in known else ""
    return f'<span class="st {known_kind}">{esc(label)}</span>'


def bar(left: float, width: float, kind: str) -> str:
    left, width = min(max(left, 0.0), 1.0), min(max(width, 0.0), 1.0)
    return (
        f'<div class="track"><div class="bar {kind}" '
        f'style="left:{left * 100:.2f}%;width:{width * 100:.2f}%"></div></div>'
    )


def usage_line(usage: Usage) -> str:
    cost = "cost unknown" if usage.cost is None else f"${usage.cost.total:.6f}"
    cached = f", {usage.cached_tokens} cached" if usage.cached_tokens else ""
    return (
        f"{usage.requests} requests · {usage.total_input_tokens} in{cached} · "
        f"{usage.output_tokens} out · {cost}"
    )


def secs(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def table(headers: Iterable[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def more(count: int) -> str:
    return f'<div class="meta">… and {count - ROWS} more</div>' if count > ROWS else ""
