"""`raygent.batch`: run an agent (or any async callable) over many items.

    result = await raygent.batch(agent, "questions.jsonl", concurrency=64, sink="out.jsonl")

`concurrency` attempts are in flight all the time (a retrying item waits without a
slot); every item ends `completed`, `failed` or `cancelled`, is recorded once, and the
batch itself never fails: errors of the executable, of the input, of `on_item` end up
on items and in the report. The options are defined once (`BatchOptions`) and shared by
`batch`, `batch_sync`, `Agent.eval` and the `raygent batch` command.

On the local backend the in-flight core (`_batch.engine.InFlight`) runs in this event
loop. On the Ray backend, runner actors each run the same core over the chunks of items
the driver feeds them (`raygent.actors.batch`); the driver reads the items and
records the results, so the sink, `on_item` and the progress bar stay here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import Any

from typing_extensions import Unpack

from .._sync import on_interrupt, run_sync
from ..abort import AbortController, AbortSignal
from ..budgets import BudgetReport, amount_of
from ..seams.batch import Attempt, BatchItem, Deliver, Feed, Job, Outcome, cancelled, ended
from ..seams.contract import Backend, BatchExecution, BatchPool, PoolPlan
from ..seams.registry import current_backend
from ..seams.retry import Retry
from ..usage import Usage, dollars, total_cost
from ._html import batch_html
from .engine import InFlight
from .exec import (
    InputError,
    JobMaker,
    attempt_for,
    grace_for,
    is_runnable,
)
from .job_budget import job_ledger
from .plan import KEPT_FAILURES, BatchOptions, Plan
from .progress import Progress
from .provider.job import (
    check_batchable,
    line_pool,
    max_waiting,
    show_lines,
    warn_past,
    with_lines,
)
from .provider.pool import LinePool
from .report import BatchReport, Tally, counts_line
from .sinks import Sink, key_token, open_sink
from .sources import Source, feed, open_items

__all__ = [
    "BatchItem",
    "BatchOptions",
    "BatchReport",
    "BatchResult",
    "InputError",
    "Retry",
    "batch",
    "batch_sync",
]


@dataclass
class BatchResult:
    """What a batch did.

    Without a sink: `items` holds every item in input order and `data` each item's data
    at its position (None where the item did not complete). With a sink the results
    live there and memory stays bounded: `data` is empty and `items` holds only failed
    and cancelled items, the first 1000 of them. `usage` sums every attempt of every
    item, failed attempts included.
    """

    items: list[BatchItem]
    data: list[Any]
    usage: Usage
    report: BatchReport

    @property
    def ok(self) -> bool:
        """Every item completed and nothing stopped the batch early."""
        report = self.report
        return report.failed == 0 and report.cancelled == 0 and report.stopped is None

    def _repr_html_(self) -> str:
        return batch_html(self.report, self.items, self.usage)

    def __repr__(self) -> str:
        # One line (the default would print every item): counts, time, cost, the sink.
        report = self.report
        cost = total_cost(self.usage)
        money = "cost unknown" if cost is None else dollars(cost)
        sink = f", sink={report.sink!r}" if report.sink else ""
        stopped = f", stopped={report.stopped!r}" if report.stopped else ""
        return (
            f"BatchResult({counts_line(report)}, {report.duration:.1f} s, {money}{sink}{stopped})"
        )


async def batch(executable: Any, items: Any, **options: Unpack[BatchOptions]) -> BatchResult:
    """Run `executable` on every item; see `BatchOptions` for the options.

    `executable`: an agent (or anything with an async `execute(input, **run_options)`
    returning a run result), or an async callable `fn(item)`. `items`: a list, any
    iterable or generator (consumed as slots free up, never materialised), an async
    iterable, a JSONL / CSV / Parquet path, or a dataset with `iter_rows()` (a Ray
    Dataset). An agent's item is a str, a message list, or a mapping with an `input`
    field whose other fields become the item's `meta` (a `session_id` / `user_id` field
    runs the item in that session of the agent's memory); a callable gets the item as
    is.

    Never fails as a whole; raises only for options that make no sense (TypeError,
    ValueError, a missing input file), before any item runs. Cancelling the awaiting
    task ends every unfinished item as cancelled and closes the sink, then lets
    CancelledError through. Ctrl-C (a script's, a notebook kernel's interrupt) does what
    it does in `batch_sync`: the unfinished items end cancelled and the result comes
    back; a second Ctrl-C cancels the awaiting task.
    """
    if _interruptible.get():
        return await _batch(executable, items, options)
    controller = AbortController()
    user = options.get("signal")
    unlink = user.add_callback(lambda: controller.abort(user.reason)) if user else None
    task = asyncio.current_task()

    def interrupted() -> None:
        if controller.signal.aborted and task is not None:
            task.cancel()
        else:
            controller.abort("interrupted (Ctrl-C)")

    # Ctrl-C is taken by the outermost batch only (an item that runs a batch of its own
    # must not take the handler away from it on leaving).
    token = _interruptible.set(True)
    try:
        with on_interrupt(interrupted):
            linked = options.copy()
            linked["signal"] = controller.signal
            return await _batch(executable, items, linked)
    finally:
        _interruptible.reset(token)
        if unlink is not None:
            unlink()


async def _batch(executable: Any, items: Any, options: BatchOptions) -> BatchResult:
    plan = Plan.of(options)
    if plan.durable is not None and not callable(getattr(executable, "is_stored", None)):
        raise TypeError("durable= needs an agent (something with resume(run_id))")
    if options.get("tool_errors") is not None and not hasattr(executable, "tool_errors"):
        raise TypeError("tool_errors= needs an agent (flows and plain callables run no tools)")
    ledger = job_ledger(executable, plan.budget)
    if ledger is not None:
        attempts = dataclasses.replace(plan.attempts, job_budget=ledger)
        plan = dataclasses.replace(plan, attempts=attempts)
    lined = attempt_for(executable, plan.run_options, plan.attempts)
    attempt: Attempt = lined
    lines: LinePool | None = None
    if plan.provider_batch is not None:
        check_batchable(executable)
    runners = _runners_for(executable, plan)
    if runners is not None:
        runners.check(executable)
    source = open_items(items)
    sink = open_sink(plan.sink_job) if plan.sink_job is not None else None
    collector = _Collector(plan, sink, source.size)
    waiting: int | None = None  # provider_batch=: the items in flight (`_batch.active`)
    if plan.provider_batch is not None:
        waiting = max_waiting(plan.provider_batch, executable)
        lines = line_pool(plan.provider_batch, plan.sink, plan.resume)
        if runners is None:
            attempt = with_lines(
                lined, lines, lines.options, lines.job, plan.deadline, plan.concurrency
            )
    deliver = collector.deliver if lines is None else _ending_lines(lines, collector.deliver)
    pool = _pool(executable, attempt, plan, deliver, runners, lines, waiting)
    collector.pool = pool
    make = JobMaker(runnable=is_runnable(executable), item_key=plan.item_key)
    skips = (sink is not None and sink.done) or collector.answers
    jobs = feed(source, make, collector.skip if skips else None)
    if waiting is not None:
        jobs = warn_past(jobs, source.total, waiting)
    ticker = show_lines(lines, collector.progress) if lines is not None else None
    try:
        await pool.run(jobs)
        await collector.reused_on_item()
        if pool.signal.aborted and source.total is not None and sink is None:
            await collector.cancel_unread(jobs, pool.signal)
    finally:
        if ticker is not None:
            ticker.cancel()
        await _close(jobs, source)
        if lines is not None:
            await lines.close(interrupted=pool.signal.aborted)
            collector.progress.lines(lines.status())
        collector.close()
    result = collector.result()
    result.report.input_items = source.size
    if lines is not None:
        result.report.provider_batch = lines.summary
    if ledger is not None and plan.budget is not None:
        _spent, reserved = await ledger.standing()
        result.report.budget = BudgetReport.of(plan.budget, amount_of(result.usage), reserved)
    return result


def _ending_lines(lines: LinePool, deliver: Deliver) -> Deliver:
    """`deliver`, telling the job's pool first that the item ended."""

    async def ended(item: BatchItem) -> None:
        lines.ended(item.key)
        await deliver(item)

    return ended


_interruptible: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "raygent_batch_interruptible", default=False
)


def _runners_for(executable: Any, plan: Plan) -> BatchExecution | None:
    """The backend's batch runners (the executable's backend, else the current one),
    unless `runners=0` or the backend runs batches in this process."""
    if plan.runners == 0:
        return None
    backend = getattr(executable, "backend", None)
    if not isinstance(backend, Backend):
        backend = current_backend()
    return backend.batches


def _pool(
    executable: Any,
    attempt: Attempt,
    plan: Plan,
    deliver: Deliver,
    runners: BatchExecution | None,
    lines: LinePool | None,
    held: int | None,
) -> BatchPool:
    """The backend's runners (Ray), else an in-flight pool in this process. With
    `provider_batch=`, `held` items are in flight, `concurrency` of them working."""
    grace = grace_for(executable)
    if runners is not None:
        return runners.pool(
            executable,
            PoolPlan(
                run_options=plan.run_options,
                attempts=plan.attempts,
                concurrency=held or plan.concurrency,
                retry=plan.retry,
                deliver=deliver,
                signal=plan.signal,
                grace=grace,
                runners=plan.runners,
                lines=lines,
                deadline=plan.deadline,
                active=None if held is None else plan.concurrency,
            ),
        )
    return InFlight(
        attempt,
        concurrency=held or plan.concurrency,
        retry=plan.retry,
        deliver=deliver,
        signal=plan.signal,
        grace=grace,
    )


def batch_sync(executable: Any, items: Any, **options: Unpack[BatchOptions]) -> BatchResult:
    """`batch` from synchronous code. Works whether or not this thread runs an event
    loop: inside one (Jupyter, IPython) the batch runs on a helper thread with a loop of
    its own and this call blocks until done (in a notebook, `await raygent.batch(...)`
    works as well).

    Ctrl-C cancels the batch cleanly: unfinished items end cancelled, the sink is closed
    consistent, and the result comes back. A second Ctrl-C stops at once
    (KeyboardInterrupt, after the items in flight are recorded as cancelled).
    """
    try:
        return run_sync(lambda: batch(executable, items, **options))
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


async def _close(jobs: Feed, source: Source) -> None:
    # The items are read: a reader failing to close must not cost the result.
    with contextlib.suppress(Exception):
        if isinstance(jobs, AsyncGenerator):
            await jobs.aclose()
        elif isinstance(jobs, Generator):
            jobs.close()
        await source.aclose()


class _Collector:
    """Receives each item as it ends: counts it, records it (sink or memory), shows
    progress, calls `on_item` (isolated)."""

    def __init__(self, plan: Plan, sink: Sink | None, total: int | None) -> None:
        self.plan = plan
        self.sink = sink
        self.tally = Tally()
        self.kept: list[BatchItem] = []
        self.pool: BatchPool | None = None
        self.stopped: str | None = None
        self._sink_broken = False
        self.progress = Progress(plan.progress, total)
        self.answers = dict(plan.reused or {})
        self._reused: list[BatchItem] = []

    def skip(self, job: Job) -> bool:
        """Leave out what the sink already holds completed (resume), and what `reuse=`
        answered (recorded here as the job's, at its place in the input)."""
        token = key_token(job.key)
        if self.sink is not None and token in self.sink.done:
            self.tally.skipped += 1
            self.progress.skipped(1)
            return True
        answer = self.answers.pop(token, None) if self.answers else None
        if answer is None:
            return False
        item = dataclasses.replace(answer, index=job.index)
        self._count(item)
        self._reused.append(item)
        return True

    async def reused_on_item(self) -> None:
        """`on_item` for the items `reuse=` answered (the feed that found them is sync)."""
        reused, self._reused = self._reused, []
        for item in reused:
            await self._on_item(item)

    async def deliver(self, item: BatchItem) -> None:
        self._count(item)
        await self._on_item(item)

    def _count(self, item: BatchItem) -> None:
        self.tally.add(item)
        if self.sink is None:
            self.kept.append(item)
        else:
            self._record(item)
            if not item.ok and len(self.kept) < KEPT_FAILURES:
                self.kept.append(item)
        if getattr(item.error, "fatal", False) and self.stopped is None:
            self.stopped = str(item.error)
        tally = self.tally
        retrying = self.pool.retrying if self.pool is not None else 0
        rates = (tally.usage.requests, tally.throttled, tally.rate_wait)
        self.progress.update(tally.failed, tally.cancelled, retrying, rates)

    async def _on_item(self, item: BatchItem) -> None:
        if self.plan.on_item is not None:
            try:
                value = self.plan.on_item(item)
                if inspect.isawaitable(value):
                    await value
            except Exception as exc:
                self.tally.on_item_failed(exc)

    def _record(self, item: BatchItem) -> None:
        if self._sink_broken or self.sink is None:
            return
        try:
            self.sink.write(item)
        except Exception as exc:
            # Results can no longer be kept: stop, rather than run items for nothing.
            self._sink_broken = True
            self.stopped = f"the sink failed: {type(exc).__name__}: {exc}"
            if self.pool is not None:
                self.pool.abort(self.stopped)

    async def cancel_unread(self, jobs: Feed, signal: AbortSignal) -> None:
        """A cancelled batch over a list: the items never started end cancelled too, so
        that `data` keeps one slot per item."""
        error = cancelled(signal)
        remaining: list[Job] = []
        if isinstance(jobs, Generator):
            remaining = list(jobs)
        for job in remaining:
            await self.deliver(ended(job, Outcome("cancelled", error=error)))

    def close(self) -> None:
        self.progress.close(self.tally.failed, self.tally.cancelled, 0)
        if self.sink is not None:
            try:
                self.sink.close()
            except Exception as exc:
                self.stopped = self.stopped or f"the sink failed: {type(exc).__name__}: {exc}"

    def result(self) -> BatchResult:
        pool = self.pool
        assert pool is not None
        report = self.tally.finish(pool.retries)
        if pool.failure is not None and self.stopped is None:
            # The pool could not go on (Ray runners unable to load the executable).
            self.stopped = f"the batch failed: {pool.failure}"
        if pool.signal.aborted and self.stopped is None:
            self.stopped = f"cancelled: {pool.signal.reason or 'no reason given'}"
            if self.sink is not None:
                self.stopped += " (to go on with this job: resume=True, the same sink)"
        for failure in (pool.feed_error, pool.deliver_error):  # last guards, not paths
            if failure is not None and self.stopped is None:
                self.stopped = f"the batch failed: {type(failure).__name__}: {failure}"
        report.stopped = self.stopped
        report.sink = str(self.sink.path) if self.sink is not None else None
        items = sorted(self.kept, key=lambda item: item.index)
        data = [item.data for item in items] if self.sink is None else []
        return BatchResult(items=items, data=data, usage=self.tally.usage, report=report)
