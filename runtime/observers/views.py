"""Notebook views: the pieces of the self-contained HTML that `_repr_html_` of results
and reports is made of (the run and flow views are `report`'s, the batch view
`_batch._html`'s, the eval view `eval`'s).

No script and nothing fetched: a style block and plain elements, so a view renders the
same in Jupyter, VS Code and an exported notebook. Every string that comes from a run
(model text, tool arguments and outputs, errors, names, keys) goes through `esc`;
only numbers computed here go into style attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape
from typing import Any

from ..usage import Usage

__all__ = [
    "ROWS",
    "STYLE",
    "badge",
    "bar",
    "clip",
    "esc",
    "more",
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
