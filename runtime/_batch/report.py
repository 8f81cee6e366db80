"""What a batch did, counted as items end: `BatchReport` and the tally behind it."""

from __future__ import annotations

import math
import random
import statistics
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..budgets import BudgetReport
from ..seams.batch import BatchItem
from ..usage import Usage
from .provider.options import ProviderBatchSummary
from .routing.options import RouteSummary

__all__ = [
    "BatchReport",
    "Stopped",
    "Tally",
    "WallClock",
    "counts_line",
    "rates_of",
    "tool_errors_of",
    "tool_errors_text",
    "trips_of",
]

_RESERVOIR = 10_000  # latencies kept for the percentiles: exact up to this many items
_SPANS_KEPT = 4_096  # rate-wait spans merged at once; older ones are folded into a sum


class Stopped(BaseModel):
    """Why a batch ended before its input did.

    `why`: "configuration" (an item met an error every item would meet: see
    docs/batch.md), "cancelled" (a signal, Ctrl-C, the task), "sink" (results could no
    longer be written), "failed" (the batch could not go on: its input, its runners).
    `message` is what the report and the CLI print; a stop an item caused names it
    (`index` in the input, `key`) and its `error` (as a dict)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    why: Literal["configuration", "cancelled", "sink", "failed"]
    message: str
    index: int | None = None
    key: str | None = None
    error: dict[str, Any] | None = None

    def __str__(self) -> str:
        return self.message


class BatchReport(BaseModel):
    """Counts and timings of one batch.

    `total` counts the items that ended (completed + failed + cancelled +
    awaiting_approval: a durable item stopped before a tool call that needs approval,
    continued by a later batch with `approvals=`); `skipped` the
    items a resume found already completed in the sink. `startup` is the seconds from
    the call to its first item's start (on Ray: connecting, or starting a local Ray, and
    the runners); `duration` the seconds from then to the end, the job's own time, which
    `throughput` (ended items per second) and `requests_per_minute` are measured over.
    Latencies are per item, first attempt to end, in seconds (sampled past 10,000
    items). `stopped` says why a batch ended early, if it did (a `Stopped`).
    """

    model_config = ConfigDict(extra="forbid")
    total: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    awaiting_approval: int = 0
    skipped: int = 0
    # The items the input holds, when known up front (a list, a JSONL, CSV or Parquet
    # file): an interrupted job says "220 of 300".
    input_items: int | None = None
    attempts: int = 0
    retries: int = 0
    startup: float = 0.0
    duration: float = 0.0
    throughput: float = 0.0
    latency_p50: float | None = None
    latency_p95: float | None = None
    errors: dict[str, int] = Field(default_factory=dict)
    on_item_errors: int = 0
    first_on_item_error: str | None = None
    stopped: Stopped | None = None
    sink: str | None = None
    # With `provider_batch=`: every provider batch sent, and the cost beside online's.
    provider_batch: ProviderBatchSummary | None = None
    # With `deadline=`: items and trips by way, what moved online and why, what was
    # paid twice, the cost against all online, and whether the deadline held.
    route: RouteSummary | None = None
    # With a response cache (`cache=`): the trips its items' runs got from it, and what
    # those replies cost when they were paid (USD), each item's last attempt counted.
    cache_hits: int = 0
    saved: float = 0.0
    # Trips whose response cache could not reach its store (each sent as a miss), in
    # whichever process ran them (each process's cache logs its first failure once).
    cache_errors: int = 0
    # Tool calls that failed in the items' runs (each item's last attempt), the items
    # that had any, and the first one's error: with `tool_errors="continue"` the model
    # read those errors and went on, so the items may still have completed.
    tool_errors: int = 0
    items_with_tool_errors: int = 0
    first_tool_error: str | None = None
    budget: BudgetReport | None = None
    # Trips by the service tier their replies name (each item's last attempt; a trip
    # whose reply named none, a cancelled one say, is not counted), and the requests
    # sent again at a `Tier`'s fallback.
    tiers: dict[str, int] = Field(default_factory=dict)
    tier_fallbacks: int = 0
    # Rates: the 429s met by every attempt of every item; `rate_wait` the wall-clock
    # seconds during which at least one request waited for a rate limit (configured or
    # learnt; 0 where none held the job back), and the requests a minute the job held.
    throttled: int = 0
    rate_wait: float = 0.0
    requests_per_minute: float = 0.0

    def __repr__(self) -> str:
        return _report_repr(self)


def tool_errors_of(item: BatchItem) -> int:
    """The failed tool calls of an item's run (its last attempt), nested runs' included."""
    report = getattr(item.result, "report", None)  # a run's (an agent's, a flow's)
    count = getattr(report, "tool_errors", 0)
    return count if isinstance(count, int) else 0


def trips_of(report: Any) -> list[Any]:
    """Every trip of a run's report (an agent's, a flow's), nested runs' included."""
    if report is None:
        return []
    runs = getattr(report, "runs", None)
    if callable(runs):  # a flow: the runs under it
        return [trip for run in runs() for trip in trips_of(run)]
    trips = list(getattr(report, "trips", None) or ())
    for call in getattr(report, "tool_calls", None) or ():
        trips.extend(trips_of(call.child))
    return trips


def rates_of(result: Any) -> tuple[int, list[tuple[float, float]]]:
    """What a run result's trips (nested runs' included) met of rates: the 429s, and
    each rate wait as (wall-clock start, seconds). A trip waits for its rate before it
    sends, so its wait is taken to begin with the trip."""
    throttled, spans = 0, []
    for trip in trips_of(getattr(result, "report", None)):
        throttled += trip.throttled
        if trip.rate_wait > 0:
            spans.append((trip.timing.started_at.timestamp(), trip.rate_wait))
    return throttled, spans


def tool_errors_text(report: BatchReport) -> str:
    """`300 failed tool calls in 100 items` ("" when no tool call failed)."""
    calls, items = report.tool_errors, report.items_with_tool_errors
    if not calls:
        return ""
    return (
        f"{calls} failed tool call{'s' if calls != 1 else ''} in {items} "
        f"item{'s' if items != 1 else ''}"
    )


def _first_tool_error(report: Any) -> str | None:
    for call in getattr(report, "tool_calls", None) or ():
        if call.error is not None:
            return f"{call.error.get('code')}: {call.error.get('message')}"
    return None


def counts_line(report: BatchReport) -> str:
    """`220 of 300 items: 218 completed, 2 failed, 0 cancelled`: what ended, of the whole
    input when it is known (a resume's skipped items are counted in)."""
    ended = report.total
    whole = report.input_items
    done = ended + report.skipped
    of = f"{ended} of {whole - report.skipped}" if whole is not None and done < whole else ended
    noun = "item" if of == 1 else "items"
    line = (
        f"{of} {noun}: {report.succeeded} completed, {report.failed} failed, "
        f"{report.cancelled} cancelled"
    )
    if report.awaiting_approval:
        line += f", {report.awaiting_approval} awaiting approval"
    if report.skipped:
        line += f", {report.skipped} skipped (already done)"
    return line


def timing_text(report: BatchReport) -> str:
    """`17.0 s` of the job, and its start-up apart when it took a while (`+9.1 s
    start-up`: starting Ray)."""
    text = f"{report.duration:.1f} s"
    if report.startup >= 0.05:
        text += f" (+{report.startup:.1f} s start-up)"
    return text


def _report_repr(report: BatchReport) -> str:
    tools = tool_errors_text(report)
    extra = f", tool errors: {tools}" if tools else ""
    extra += f", {timing_text(report)}"
    if report.stopped:
        extra += f", stopped={str(report.stopped)!r}"
    if report.errors:
        extra += f", errors={report.errors}"
    return f"BatchReport({counts_line(report)}{extra})"


class WallClock:
    """The wall-clock seconds covered by a union of spans (start, seconds), in bounded
    memory: spans are merged in groups, and past `_SPANS_KEPT` merged ones the oldest
    are folded into a sum (a later span reaching back that far counts from there on)."""

    def __init__(self) -> None:
        self._spans: list[tuple[float, float]] = []  # (start, end)
        self._merged = 0  # the first this many are merged and sorted
        self._folded = 0.0
        self._floor = float("-inf")  # folded spans end by here

    def add(self, start: float, seconds: float) -> None:
        end = start + seconds
        start = max(start, self._floor)
        if end > start:
            self._spans.append((start, end))
            if len(self._spans) - self._merged >= _SPANS_KEPT:
                self._merge()

    def total(self) -> float:
        if len(self._spans) > self._merged:
            self._merge()
        return self._folded + sum(end - start for start, end in self._spans)

    def _merge(self) -> None:
        merged: list[tuple[float, float]] = []
        for start, end in sorted(self._spans):
            if merged and start <= merged[-1][1]:
                if end > merged[-1][1]:
                    merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        if len(merged) > _SPANS_KEPT:
            old, merged = merged[: -_SPANS_KEPT // 2], merged[-_SPANS_KEPT // 2 :]
            self._folded += sum(end - start for start, end in old)
            self._floor = old[-1][1]
        self._spans, self._merged = merged, len(merged)


class Tally:
    """Counts items as they end (plain counters: a pydantic field set per item costs);
    keeps a bounded, uniform sample of latencies."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.first_start: float | None = None  # when the first item began (monotonic)
        self.waits = WallClock()
        self.usage = Usage()
        self.total = self.succeeded = self.failed = self.cancelled = self.awaiting = 0
        self.skipped = self.attempts = self.on_item_errors = self.cache_hits = 0
        self.cache_errors = self.throttled = 0
        self.saved = 0.0
        self.tool_errors = self.items_with_tool_errors = self.tier_fallbacks = 0
        self.tiers: dict[str, int] = {}
        self.first_tool_error: str | None = None
        self.first_on_item_error: str | None = None
        self.errors: dict[str, int] = {}
        self._latencies: list[float] = []
        self._seen = 0
        self._random = random.Random(0)
        self._weight = 1.0
        self._next = _RESERVOIR

    def add(self, item: BatchItem) -> None:
        self.total += 1
        self.attempts += item.attempts
        if item.status == "completed":
            self.succeeded += 1
        elif item.status == "failed":
            self.failed += 1
        elif item.status == "awaiting_approval":
            self.awaiting += 1
        else:
            self.cancelled += 1
        if item.status != "completed" and item.error is not None:
            code = str(getattr(item.error, "code", None) or type(item.error).__name__)
            self.errors[code] = self.errors.get(code, 0) + 1
        self.usage = self.usage + item.usage
        report = getattr(item.result, "report", None)  # a run's (an agent's, a flow's)
        hits = getattr(report, "cache_hits", 0)
        if hits:
            self.cache_hits += hits
            self.saved += report.saved  # type: ignore[union-attr]
        self.cache_errors += getattr(report, "cache_errors", 0)
        self.tier_fallbacks += getattr(report, "tier_fallbacks", 0)
        self.throttled += item.throttled  # its earlier attempts'
        for start, seconds in item.rate_waits:
            self.waits.add(start, seconds)
        for trip in trips_of(report):
            tier = trip.service_tier
            if tier:
                self.tiers[tier] = self.tiers.get(tier, 0) + 1
            self.throttled += trip.throttled
            if trip.rate_wait > 0:
                self.waits.add(trip.timing.started_at.timestamp(), trip.rate_wait)
        if item.latency is not None:
            self._sample(item.latency)
            # It began `latency` ago (on Ray, a little earlier: the way back to the driver).
            began = time.monotonic() - item.latency
            if self.first_start is None or began < self.first_start:
                self.first_start = max(self.started, began)
        failed_calls = tool_errors_of(item)
        if failed_calls:
            self.tool_errors += failed_calls
            self.items_with_tool_errors += 1
            if self.first_tool_error is None:
                self.first_tool_error = _first_tool_error(report)

    def on_item_failed(self, error: BaseException) -> None:
        self.on_item_errors += 1
        if self.first_on_item_error is None:
            self.first_on_item_error = f"{type(error).__name__}: {error}"

    @property
    def rate_wait(self) -> float:
        """Wall-clock seconds during which at least one request waited for a rate."""
        return self.waits.total()

    def finish(self, retries: int) -> BatchReport:
        ended = time.monotonic()
        began = self.first_start if self.first_start is not None else self.started
        startup, duration = began - self.started, ended - began
        report = BatchReport(
            total=self.total,
            succeeded=self.succeeded,
            failed=self.failed,
            cancelled=self.cancelled,
            awaiting_approval=self.awaiting,
            skipped=self.skipped,
            attempts=self.attempts,
            retries=retries,
            startup=startup,
            duration=duration,
            throughput=self.total / duration if duration > 0 else 0.0,
            errors=dict(self.errors),
            on_item_errors=self.on_item_errors,
            first_on_item_error=self.first_on_item_error,
            cache_hits=self.cache_hits,
            cache_errors=self.cache_errors,
            saved=self.saved,
            tool_errors=self.tool_errors,
            items_with_tool_errors=self.items_with_tool_errors,
            first_tool_error=self.first_tool_error,
            tiers=dict(self.tiers),
            tier_fallbacks=self.tier_fallbacks,
            throttled=self.throttled,
            rate_wait=self.rate_wait,
            requests_per_minute=60 * self.usage.requests / duration if duration > 0 else 0.0,
        )
        if self._latencies:
            ordered = sorted(self._latencies)
            report.latency_p50 = statistics.median(ordered)
            report.latency_p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
        return report

    def _sample(self, latency: float) -> None:
        # Reservoir sampling, Li's algorithm L: a uniform sample of all latencies in
        # bounded memory, drawing random numbers only for the items that go in.
        self._seen += 1
        if len(self._latencies) < _RESERVOIR:
            self._latencies.append(latency)
            if len(self._latencies) == _RESERVOIR:
                self._skip()
            return
        if self._seen == self._next:
            self._latencies[self._random.randrange(_RESERVOIR)] = latency
            self._skip()

    def _skip(self) -> None:
        draw = self._random.random
        self._weight *= math.exp(math.log(draw() or 1e-300) / _RESERVOIR)
        gap = math.floor(math.log(draw() or 1e-300) / math.log1p(-self._weight)) + 1
        self._next = self._seen + gap
