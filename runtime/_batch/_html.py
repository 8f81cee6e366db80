"""The notebook view of a batch result (`BatchResult._repr_html_`)."""

from __future__ import annotations

from ..observers.views import ROWS, STYLE, badge, bar, clip, esc, more, secs, table, usage_line
from ..seams.batch import BatchItem
from ..usage import Usage, dollars
from .provider.options import ProviderBatchSummary
from .report import BatchReport, tool_errors_of, tool_errors_text

__all__ = ["batch_html"]


def batch_html(report: BatchReport, items: list[BatchItem], usage: Usage) -> str:
    """A batch (its result's report, items and usage): counts, usage and cost,
    throughput and latency, and the first items with their latency as bars (a batch item
    keeps its duration, not its start)."""
    counts = (
        f"{badge('completed', f'{report.succeeded} completed')} "
        f"{badge('failed', f'{report.failed} failed')} "
        f"{badge('cancelled', f'{report.cancelled} cancelled')}"
    )
    if report.awaiting_approval:
        counts += f" {badge('awaiting_approval', f'{report.awaiting_approval} awaiting approval')}"
    if report.items_with_tool_errors:
        # Completed is not clean: the model read a failed tool call's error and went on.
        counts += f" {badge('failed', f'{report.items_with_tool_errors} with tool errors')}"
    latency = f"p50 {secs(report.latency_p50)} · p95 {secs(report.latency_p95)}"
    startup = f" (+{secs(report.startup)} start-up)" if report.startup >= 0.05 else ""
    head = (
        f"<div><b>batch</b> · {report.total} items {counts}</div>"
        f'<div class="meta">{secs(report.duration)}{startup} · {report.throughput:.1f} items/s · '
        f"latency {latency} · {report.attempts} attempts ({report.retries} retries)</div>"
        f"<div>{usage_line(usage)}</div>"
    )
    if report.throttled or report.rate_wait:
        head += (
            f'<div class="meta">rate: {report.requests_per_minute:,.0f} req/min · '
            f"429s {report.throttled} · rate wait {secs(report.rate_wait)} (wall clock)</div>"
        )
    if report.stopped:
        head += f'<div class="err">stopped: {esc(report.stopped)}</div>'
    if report.tool_errors:
        first = report.first_tool_error
        head += (
            f'<div class="err">tool errors: {tool_errors_text(report)}'
            f"{f' (first: {esc(clip(first))})' if first else ''}</div>"
        )
    if report.errors:
        listed = ", ".join(f"{esc(code)} × {n}" for code, n in report.errors.items())
        head += f'<div class="err">errors: {listed}</div>'
    if report.provider_batch is not None:
        head += _provider_batches(report.provider_batch)
    if report.sink is not None:
        head += _sink_note(report, len(items))
        if not items:
            return f'<div class="rg">{STYLE}{head}</div>'
    longest = max((i.latency or 0.0 for i in items[:ROWS]), default=0.0)
    rows = []
    for item in items[:ROWS]:
        if item.error is None:
            cell = esc(clip(item.data))
        else:
            cell = f'<span class="err">{esc(clip(item.error))}</span>'
        latency_bar = bar(0.0, (item.latency or 0.0) / longest if longest else 0.0, "item")
        rows.append(
            f"<tr><td>{item.index}</td><td>{esc(clip(item.key))}</td>"
            f"<td>{badge(item.status, item.status)}</td><td>{item.attempts}</td>"
            f"<td>{latency_bar}</td><td>{secs(item.latency)}</td>"
            f"<td>{tool_errors_of(item) or ''}</td><td>{cell}</td></tr>"
        )
    headers = ["#", "key", "status", "attempts", "latency", "", "tool errors", "data / error"]
    listed = table(headers, rows)
    return f'<div class="rg">{STYLE}{head}{listed}{more(len(items))}</div>'


def _provider_batches(summary: ProviderBatchSummary) -> str:
    """A provider-batch job's batches (id, provider, lines, status), its lines and its
    cost beside the same replies' online price."""

    def usd(value: float | None) -> str:
        return "–" if value is None else dollars(value)

    line = (
        f"<div><b>provider batches</b> · {len(summary.batches)} batches · {summary.lines} lines"
        f" ({summary.online_lines} trips online) · cost {usd(summary.cost)}"
        f" (online {usd(summary.online_cost)})</div>"
    )
    rows = [
        f"<tr><td>{esc(b.id)}</td><td>{esc(b.provider)}</td><td>{b.lines}</td>"
        f"<td>{esc(b.status)}</td></tr>"
        for b in summary.batches[:ROWS]
    ]
    listed = table(["batch", "provider", "lines", "status"], rows)
    return line + listed + more(len(summary.batches))


def _sink_note(report: BatchReport, listed: int) -> str:
    """With a sink the results live there: say so, rather than show an empty table (the
    result keeps only the items that did not complete)."""
    where = esc(report.sink)
    if not listed:
        return f'<div class="meta">every item is in the sink: {where}</div>'
    return (
        f'<div class="meta">the items that did not complete are listed; '
        f"every item is in the sink: {where}</div>"
    )
