"""Notebook views: `_repr_html_` of results and reports, as self-contained HTML.

No script and nothing fetched: a style block and plain elements, so a view renders the
same in Jupyter, VS Code and an exported notebook. Every string that comes from a run
(model text, tool arguments and outputs, errors, names, keys) goes through `_esc`;
only numbers computed here go into style attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from html import escape
from typing import TYPE_CHECKING, Any

from ..usage import Usage
from .report import AgentReport, AgentResult, FlowReport, FlowResult, RunReport, Timing

if TYPE_CHECKING:
    from .._batch.call import BatchResult
    from ..eval import EvalReport

__all__ = ["batch_html", "eval_html", "report_html"]

ROWS = 50  # items or cases listed in a batch or eval view; the rest are counted
_CLIP = 300  # characters of text, arguments or output shown per cell

_STYLE = """<style>
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
    return f'<div class="rg">{_STYLE}{_run_body(report, usage, text)}</div>'


def flow_html(report: FlowReport, result: AgentResult | FlowResult | None = None) -> str:
    """A workflow or supervisor run: status, usage and cost, its answer or error, and its
    steps (kind, status, attempts, duration, a bar on the run's span), each step's runs
    folded under it (nested flows the same way)."""
    usage = result.usage if result is not None else report.total_usage()
    answer: Any = None
    if isinstance(result, FlowResult):
        answer = result.text or result.data
    return f'<div class="rg">{_STYLE}{_flow_body(report, usage, answer)}</div>'


def batch_html(result: BatchResult) -> str:
    """A batch: counts, usage and cost, throughput and latency, and the first items
    with their latency as bars (a batch item keeps its duration, not its start)."""
    report = result.report
    counts = (
        f"{_badge('completed', f'{report.succeeded} completed')} "
        f"{_badge('failed', f'{report.failed} failed')} "
        f"{_badge('cancelled', f'{report.cancelled} cancelled')}"
    )
    if report.awaiting_approval:
        counts += f" {_badge('awaiting_approval', f'{report.awaiting_approval} awaiting approval')}"
    latency = f"p50 {_secs(report.latency_p50)} · p95 {_secs(report.latency_p95)}"
    head = (
        f"<div><b>batch</b> · {report.total} items {counts}</div>"
        f'<div class="meta">{_secs(report.duration)} · {report.throughput:.1f} items/s · '
        f"latency {latency} · {report.attempts} attempts ({report.retries} retries)</div>"
        f"<div>{_usage_line(result.usage)}</div>"
    )
    if report.stopped:
        head += f'<div class="err">stopped: {_esc(report.stopped)}</div>'
    if report.errors:
        listed = ", ".join(f"{_esc(code)} × {n}" for code, n in report.errors.items())
        head += f'<div class="err">errors: {listed}</div>'
    longest = max((i.latency or 0.0 for i in result.items[:ROWS]), default=0.0)
    rows = []
    for item in result.items[:ROWS]:
        if item.error is None:
            cell = _esc(_clip(item.data))
        else:
            cell = f'<span class="err">{_esc(_clip(item.error))}</span>'
        bar = _bar(0.0, (item.latency or 0.0) / longest if longest else 0.0, "item")
        rows.append(
            f"<tr><td>{item.index}</td><td>{_esc(_clip(item.key))}</td>"
            f"<td>{_badge(item.status, item.status)}</td><td>{item.attempts}</td>"
            f"<td>{bar}</td><td>{_secs(item.latency)}</td><td>{cell}</td></tr>"
        )
    table = _table(["#", "key", "status", "attempts", "latency", "", "data / error"], rows)
    return f'<div class="rg">{_STYLE}{head}{table}{_more(len(result.items))}</div>'


def eval_html(report: EvalReport) -> str:
    """An eval: pass rate, each scorer's rate, usage and cost, and the first cases."""
    scorers = "".join(
        f"<tr><td>{_esc(name)}</td><td>{_bar(0.0, rate, 'trip')}</td><td>{rate:.0%}</td></tr>"
        for name, rate in report.scorers.items()
    )
    head = (
        f"<div><b>eval {_esc(report.name)}</b> · {report.passed_count}/{report.total} passed "
        f"({report.pass_rate:.0%})</div>"
        f"<div>runs: {_usage_line(report.usage)}</div>"
        f"<div>judges: {_usage_line(report.judge_usage)}</div>"
        f"{_table(['scorer', 'pass rate', ''], [scorers])}"
    )
    rows = []
    for case in report.cases[:ROWS]:
        verdict = "passed" if case.passed else "failed"
        scores = "<br>".join(
            f"{'✓' if s.passed else '✗'} {_esc(s.scorer)}"
            + (f' <span class="meta">{_esc(_clip(s.reason))}</span>' if s.reason else "")
            for s in case.scores
        )
        error = (case.error or {}).get("message")
        shown = _esc(_clip(case.output))
        if error:
            shown = f'<span class="err">{_esc(_clip(error))}</span>'
        rows.append(
            f"<tr><td>{_esc(_clip(case.key))}</td><td>{_badge(verdict, verdict)}</td>"
            f"<td>{_esc(_clip(case.input))}</td><td>{shown}</td>"
            f"<td>{_esc(_clip(case.expected))}</td><td>{scores}</td>"
            f"<td>{_secs(case.latency)}</td></tr>"
        )
    table = _table(["case", "", "input", "output", "expected", "scores", "latency"], rows)
    return f'<div class="rg">{_STYLE}{head}{table}{_more(len(report.cases))}</div>'


# -- one run -----------------------------------------------------------------------------


def _run_body(report: AgentReport, usage: Usage, text: str) -> str:
    parts = [
        f"<div><b>{_esc(report.name)}</b> {_badge(report.status, report.status)} "
        f'<span class="meta">{_esc(report.model.provider)}:{_esc(report.model.name)} · '
        f"{_secs(report.duration)} · {len(report.trips)} trips · "
        f"{len(report.tool_calls)} tool calls · run {_esc(report.run_id)}"
        + (f" · session {_esc(report.session_id)}" if report.session_id else "")
        + "</span></div>",
        f"<div>{_usage_line(usage)}</div>",
    ]
    if report.error:
        parts.append(_error(report.error))
    if text:
        parts.append(f'<div class="out">{_esc(_clip(text, 2000))}</div>')
    if report.pending:
        calls = "".join(
            f"<tr><td>{_esc(p.call_id)}</td><td>{_esc(p.tool)}</td>"
            f"<td>{_esc(_clip(p.arguments))}</td></tr>"
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
        parts.append(f'<div class="meta">resumed: {_esc(resumed)}</div>')
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
            f"trip {trip.index} · {_esc(trip.purpose)}"
            f' <span class="meta">{_esc(trip.finish_reason or "")} · '
            f"{trip.usage.total_tokens} tokens</span>"
        )
        cells = f"<td>{label}</td><td>{_bar(left, width, 'trip')}</td>"
        rows.append((trip.timing.started_at, _row(cells, trip.timing)))
    for call in report.tool_calls:
        left, width = place(call.timing)
        kind = "bad" if call.error else "tool"
        arguments = _clip(call.input, 120)
        label = f"{_esc(call.name)}(<span class='meta'>{_esc(arguments)}</span>)"
        if call.error:
            detail = f'<div class="err">{_esc(_clip(call.error.get("message")))}</div>'
        else:
            detail = f'<div class="meta">→ {_esc(_clip(call.output))}</div>'
        if call.child is not None:
            detail += _folded(call.child, f"nested {_kind(call.child)}")
        cells = f"<td>{label}{detail}</td><td>{_bar(left, width, kind)}</td>"
        rows.append((call.timing.started_at, _row(cells, call.timing)))
    rows.sort(key=lambda row: row[0])
    return _table(["step", "timeline", ""], [row for _, row in rows])


# -- one flow ----------------------------------------------------------------------------


def _flow_body(report: FlowReport, usage: Usage, answer: Any) -> str:
    runs = report.runs()
    parts = [
        f"<div><b>{_esc(report.name)}</b> {_badge(report.status, report.status)} "
        f'<span class="meta">{_esc(report.kind)}'
        + (f" {_esc(report.version)}" if report.version else "")
        + f" · {_secs(report.duration)} · {len(report.steps)} steps · {len(runs)} runs · "
        f"run {_esc(report.run_id)}"
        + (f" · session {_esc(report.session_id)}" if report.session_id else "")
        + "</span></div>",
        f"<div>{_usage_line(usage)}</div>",
    ]
    if report.error:
        parts.append(_error(report.error))
    if answer is not None and answer != "":
        parts.append(f'<div class="out">{_esc(_clip(answer, 2000))}</div>')
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
        label = _esc(step.name) + (
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
            f"<tr><td>{label}{detail}</td><td>{_esc(step.kind)}</td>"
            f"<td>{_badge(step.status, step.status)}</td><td>{step.attempts}</td>"
            f"<td>{_bar(left, max(width, 0.0), kind)}</td><td>{_secs(step.duration)}</td></tr>"
        )
    table = _table(["step", "kind", "status", "attempts", "timeline", ""], rows)
    return table + _more(len(report.steps))


def _folded(report: RunReport, label: str, tags: str = "") -> str:
    """A run under a step or a tool call, folded: its name and status, then its view."""
    if isinstance(report, FlowReport):
        body = _flow_body(report, report.total_usage(), None)
    else:
        body = _run_body(report, report.total_usage(), "")
    meta = f' <span class="meta">{_esc(tags)}</span>' if tags else ""
    return (
        f"<details><summary>{_esc(label)} {_esc(report.name)} "
        f"{_badge(report.status, report.status)}{meta}</summary>{body}</details>"
    )


def _kind(report: RunReport) -> str:
    return report.kind if isinstance(report, FlowReport) else "run"


# -- pieces ------------------------------------------------------------------------------


def _error(error: dict[str, Any]) -> str:
    code, message = error.get("code", ""), error.get("message", "")
    return f'<div class="err">{_esc(code)}: {_esc(message)}</div>'


def _row(cells: str, timing: Timing) -> str:
    return f"<tr>{cells}<td>{_secs(timing.duration)}</td></tr>"


def _esc(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _clip(value: Any, limit: int = _CLIP) -> str:
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


def _badge(kind: str, label: str) -> str:
    known = {"completed", "failed", "cancelled", "incomplete", "passed", "awaiting_approval"}
    known_kind = kind if kind in known else ""
    return f'<span class="st {known_kind}">{_esc(label)}</span>'


def _bar(left: float, width: float, kind: str) -> str:
    left, width = min(max(left, 0.0), 1.0), min(max(width, 0.0), 1.0)
    return (
        f'<div class="track"><div class="bar {kind}" '
        f'style="left:{left * 100:.2f}%;width:{width * 100:.2f}%"></div></div>'
    )


def _usage_line(usage: Usage) -> str:
    cost = "cost unknown" if usage.cost is None else f"${usage.cost.total:.6f}"
    cached = f", {usage.cached_tokens} cached" if usage.cached_tokens else ""
    return (
        f"{usage.requests} requests · {usage.total_input_tokens} in{cached} · "
        f"{usage.output_tokens} out · {cost}"
    )


def _secs(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _table(headers: Iterable[str], rows: Iterable[str]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _more(count: int) -> str:
    return f'<div class="meta">… and {count - ROWS} more</div>' if count > ROWS else ""
