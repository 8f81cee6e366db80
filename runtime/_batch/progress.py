"""The progress bar of a batch: tqdm, a widget in a notebook that has ipywidgets, else
the text bar (never `tqdm.auto`, which warns "IProgress not found" in a notebook without
ipywidgets)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .provider.pool import LinesStatus

__all__ = [
    "Progress",
    "bar_class",
    "has_widgets",
    "in_notebook",
    "lines_text",
    "wants_progress",
]

_POSTFIX_EVERY = 0.25  # seconds between postfix redraws: formatting it per item is costly
_BATCHES_SHOWN = 3  # provider batches named in the bar; the others are counted


def wants_progress(choice: bool | None) -> bool:
    """`progress=None` means: on in a terminal or a notebook, off otherwise (CI, tests,
    pipes)."""
    if choice is not None:
        return choice
    if "ipykernel" in sys.modules:
        return True
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel that shows widgets (as `tqdm.autonotebook`
    decides: not the qtconsole or Spyder, whose kernels have no widget area)."""
    if "ipykernel.zmqshell" not in sys.modules:
        return False
    return not any(name == "QT_API" or name.startswith("SPYDER") for name in os.environ)


def has_widgets() -> bool:
    """Whether ipywidgets can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):
        return False


def bar_class(*, notebook: bool, widgets: bool) -> Any:
    """The tqdm bar for these facts: the widget only in a notebook with ipywidgets."""
    if notebook and widgets:
        from tqdm.notebook import tqdm as widget_bar

        return widget_bar
    from tqdm.std import tqdm as text_bar

    return text_bar


def lines_text(status: LinesStatus) -> str:
    """A provider-batch job's lines, as its bar shows them: the batches out (id and the
    provider's status), the lines answered of those sent, those gathering for the next
    batch, and when the next poll is."""
    shown = [f"{batch_id} {state}" for batch_id, state in status.out[:_BATCHES_SHOWN]]
    if len(status.out) > _BATCHES_SHOWN:
        shown.append(f"+{len(status.out) - _BATCHES_SHOWN} more")
    out = f"{len(status.out)} out" + (f" ({', '.join(shown)})" if shown else "")
    parts = [f"batches: {out}, {status.ended} ended"]
    parts.append(f"lines {status.answered}/{status.sent} answered")
    if status.gathering:
        parts.append(f"{status.gathering} gathering")
    if status.next_poll is not None:
        parts.append(f"next poll in {status.next_poll:.0f}s")
    return " · ".join(parts)


class Progress:
    """done (the bar), failed and retrying counts, items/s, the tool calls that failed;
    the rate the job holds once a limit held it back; with `provider_batch=`, the job's
    batches and lines too (`lines`); a no-op when disabled.

    Its clock (elapsed, items/s, ETA, requests a minute) runs from the first item's
    start (`began`), not from the call: on Ray the call first starts or joins Ray and
    the runners, which is no part of the job's pace."""

    def __init__(self, enabled: bool, total: int | None, skipped: int = 0) -> None:
        self._bar: Any = None
        self._last = 0.0
        self._lines = ""  # the provider-batch part of the postfix
        self._rates = ""  # the rate-limit part, once a limit held the job back
        self._tools = ""  # the failed tool calls, once there are some
        self._route = ""  # with deadline=: where the items went (the route's line)
        self._began = time.monotonic()
        self._clock_set = False
        self._counts: dict[str, int] = _counts(0, 0, 0)
        if enabled:
            bar = bar_class(notebook=in_notebook(), widgets=has_widgets())
            self._bar = bar(total=total, initial=skipped, unit="item", desc="batch")

    def skipped(self, count: int) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def began(self, seconds_ago: float) -> None:
        """The first item began `seconds_ago`: the bar's clock starts then (once)."""
        if self._clock_set:
            return
        self._clock_set = True
        self._began = time.monotonic() - seconds_ago
        bar = self._bar
        if bar is not None:
            # tqdm's clock is `time.time` (its `start_t` is public: tqdm's own `reset`
            # sets it), and its rate is n over elapsed: counted from the first start.
            bar.start_t = max(bar.start_t, time.time() - seconds_ago)
            # Its smoothed rate measures each update from the last print: not from the
            # bar's creation either.
            bar.last_print_t = max(bar.last_print_t, bar.start_t)

    def update(
        self,
        failed: int,
        cancelled: int,
        retrying: int,
        rates: tuple[int, int, float] | Callable[[], tuple[int, int, float]] | None = None,
        tools: tuple[int, int] = (0, 0),
    ) -> None:
        """One more item ended. `rates`: (requests sent, 429s met, wall-clock seconds
        during which a request waited for a rate limit) so far, shown once a limit has
        held the job back (or what gives them, asked only when the bar is redrawn).
        `tools`: (failed tool calls, items with one), shown once there are some."""
        bar = self._bar
        if bar is None:
            return
        bar.update(1)
        now = time.monotonic()
        if now - self._last >= _POSTFIX_EVERY:
            self._last = now
            self._counts = _counts(failed, retrying, cancelled)
            self._tools = _tools_text(*tools)
            if rates is not None:
                figures = rates() if callable(rates) else rates
                self._rates = _rates_text(*figures, now - self._began)
            self._postfix(refresh=False)

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def lines(self, status: LinesStatus) -> None:
        """Show where a provider-batch job's lines are (redrawn now: while every item
        waits for its lines, nothing else moves the bar)."""
        if self._bar is not None:
            self._lines = lines_text(status)
            self._postfix(refresh=True)

    def route(self, text: str) -> None:
        """Show where a job with a deadline's items went (redrawn with the next item)."""
        if self._bar is not None:
            self._route = text

    def close(
        self, failed: int, cancelled: int, retrying: int, tools: tuple[int, int] = (0, 0)
    ) -> None:
        if self._bar is not None:
            self._counts = _counts(failed, retrying, cancelled)
            self._tools = _tools_text(*tools)
            self._postfix(refresh=True)
            self._bar.close()

    def _postfix(self, *, refresh: bool) -> None:
        text = ", ".join(f"{name}={count}" for name, count in self._counts.items())
        if self._tools:
            text = f"{text}, {self._tools}"
        if self._rates:
            text = f"{text} · {self._rates}"
        if self._route:
            text = f"{text} · {self._route}"
        if self._lines:
            text = f"{text} · {self._lines}"
        self._bar.set_postfix_str(text, refresh=refresh)


def _counts(failed: int, retrying: int, cancelled: int) -> dict[str, int]:
    # A dict keeps this order (tqdm sorts keyword postfixes); cancelled only once it counts.
    counts = {"failed": failed, "retrying": retrying}
    if cancelled:
        counts["cancelled"] = cancelled
    return counts


def _tools_text(calls: int, items: int) -> str:
    """`tool errors=3 (2 items)`: completed items may hide failed tool calls."""
    return f"tool errors={calls} ({items} item{'s' if items != 1 else ''})" if calls else ""


def _rates_text(requests: int, throttled: int, waited: float, elapsed: float) -> str:
    """The rate the job holds, once a limit held it back (429s met or waits)."""
    if not throttled and waited < 0.05:
        return ""
    per_minute = 60 * requests / elapsed if elapsed > 0 else 0.0
    return f"{per_minute:,.0f} req/min, 429s={throttled}, rate wait={waited:.1f}s"
