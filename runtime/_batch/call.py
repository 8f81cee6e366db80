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
import time
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import Any

from typing_extensions import Unpack

from .._sync import on_interrupt, run_sync
from ..abort import AbortController, AbortSignal
from ..budgets import BudgetReport, amount_of
from ..models._names import PYTHON, Spelling
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
from .plan import KEPT_FAILURES, BatchOptions, Plan, refuse_unknown_options
from .preflight import check_job
from .progress import Progress
from .provider.job import (
    check_batchable,
    line_pool,
    max_waiting,
    show_lines,
    warn_past,
    with_lines,
)
from .provider.pool import LinePool, grace_of
from .report import BatchReport, Stopped, Tally, counts_line, timing_text, tool_errors_text
from .routing.job import RouteJob, plan_job
from .sinks import Sink, key_token, open_sink
from .sources import Source, feed, open_items
from .stops import StopRule

__all__ = [
    "BatchItem",
    "BatchOptions",
    "BatchReport",
    "BatchResult",
    "InputError",
    "Retry",
    "batch",
    "batch_sync",
    "run_batch",
    "run_batch_sync",
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
        """Every item completed and nothing stopped the batch early. An item completes
        even when the model read a failed tool call's error and went on: `clean` says
        that none did."""
        report = self.report
        return report.failed == 0 and report.cancelled == 0 and report.stopped is None

    @property
    def clean(self) -> bool:
        """`ok`, and no tool call failed in any item's run (`report.tool_errors == 0`)."""
        return self.ok and self.report.tool_errors == 0

    def _repr_html_(self) -> str:
        return batch_html(self.report, self.items, self.usage)

    def __repr__(self) -> str:
        # One line (the default would print every item): counts, the tool calls that
        # failed, time, cost, the sink.
        report = self.report
        cost = total_cost(self.usage)
        money = "cost unknown" if cost is None else dollars(cost)
        tools = tool_errors_text(report)
        tools = f", tool errors: {tools}" if tools else ""
        sink = f", sink={report.sink!r}" if report.sink else ""
        stopped = f", stopped={str(report.stopped)!r}" if report.stopped else ""
        return (
            f"BatchResult({counts_line(report)}{tools}, {timing_text(report)}, {money}"
            f"{sink}{stopped})"
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
    return await run_batch(executable, items, options)


async def run_batch(
    executable: Any, items: Any, options: BatchOptions, spelling: Spelling = PYTHON
) -> BatchResult:
    """`batch`, its options given as a mapping, its messages naming them as
    `spelling`'s reader writes them (the `raygent batch` command's: `--resume`)."""
    if _interruptible.get():
        return await _batch(executable, items, options, spelling)
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
            return await _batch(executable, items, linked, spelling)
    finally:
        _interruptible.reset(token)
        if unlink is not None:
            unlink()


async def _batch(
    executable: Any, items: Any, options: BatchOptions, spelling: Spelling
) -> BatchResult:
    # Refused here, in the driver, before any runner starts or any request is sent.
    refuse_unknown_options(options, executable, spelling=spelling)
    plan = Plan.of(options, spelling)
    say = spelling.option
    if plan.durable is not None and not callable(getattr(executable, "is_stored", None)):
        raise TypeError(f"{say('durable')} needs an agent (something with resume(run_id))")
    if options.get("tool_errors") is not None and not hasattr(executable, "tool_errors"):
        raise TypeError(
            f"{say('tool_errors')} needs an agent (flows and plain callables run no tools)"
        )
    if plan.check:
        # Before anything is sent or written, and before Ray's runners start: one error
        # listing every problem the job would meet on every item.
        await check_job(executable, plan)
    ledger = job_ledger(executable, plan.budget)
    if ledger is not None:
        attempts = dataclasses.replace(plan.attempts, job_budget=ledger)
        plan = dataclasses.replace(plan, attempts=attempts)
    lined = attempt_for(executable, plan.run_options, plan.attempts)
    attempt: Attempt = lined
    lines: LinePool | None = None
    if plan.provider_batch is not None and plan.route is None:
        check_batchable(executable, spelling)
    runners = _runners_for(executable, plan)
    if runners is not None:
        runners.check(executable)
    source = open_items(items)
    route = await _routed(executable, plan, source)  # a refusal: before the sink is touched
    sink = open_sink(plan.sink_job) if plan.sink_job is not None else None
    collector = _Collector(plan, sink, source.size)
    waiting: int | None = None  # provider_batch=: the items in flight (`_batch.active`)
    if plan.provider_batch is not None:
        waiting = max_waiting(plan.provider_batch, executable)
        lines = line_pool(plan.provider_batch, plan.sink, plan.resume)
        lines.routing = route
        if runners is None:
            attempt = with_lines(
                lined, lines, lines.options, lines.job, plan.deadline, plan.concurrency, route
            )
    deliver = collector.deliver if lines is None else _ending_lines(lines, collector.deliver)
    if route is not None:
        deliver = route.delivering(deliver, collector.progress)
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
        if route is not None:
            result.report.route = await route.close(lines.summary)
    if ledger is not None and plan.budget is not None:
        _spent, reserved = await ledger.standing()
        result.report.budget = BudgetReport.of(plan.budget, amount_of(result.usage), reserved)
    return result


async def _routed(executable: Any, plan: Plan, source: Source) -> RouteJob | None:
    """A job with a deadline: its route, planned from what the store knows (or a
    DeadlineError, the input closed, before anything is sent or written)."""
    if plan.route is None or plan.deadline is None:
        return None
    batching = plan.provider_batch
    assert batching is not None  # a route's batches are tuned by it
    try:
        return await plan_job(
            executable,
            plan.route,
            deadline=plan.deadline,
            items=source.size,
            demand=plan.demand,
            concurrency=plan.concurrency,
            overhead=batching.gather_seconds + batching.poll_seconds,
            budget=None if plan.budget is None else plan.budget.usd,
            grace=grace_of(batching),
        )
    except BaseException:
        await source.aclose()
        raise


def _ending_lines(lines: LinePool, deliver: Deliver) -> Deliver:
    """`deliver`, telling the job's pool first that the item ended."""

    async def ended(item: BatchItem) -> None:
        lines.ended(item.key)
        await deliver(item)

    return ended


# What `report.stopped` adds to a cancelled job's reason when it has a sink (the CLI says
# it in its own words instead).
RESUME_HINT = " (to go on with this job: resume=True, the same sink)"

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
                stop_on_config=plan.check,
            ),
        )
    return InFlight(
        attempt,
        concurrency=held or plan.concurrency,
        retry=plan.retry,
        deliver=deliver,
        signal=plan.signal,
        grace=grace,
        stop_on_config=plan.check,
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
    return run_batch_sync(executable, items, options)


def run_batch_sync(
    executable: Any, items: Any, options: BatchOptions, spelling: Spelling = PYTHON
) -> BatchResult:
    """`batch_sync`, its options as a mapping, spelt for `spelling`'s reader."""
    try:
        return run_sync(lambda: run_batch(executable, items, options, spelling))
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
        self.stopped: Stopped | None = None
        # Stops the job on an error every item would meet (and keeps it out of the sink).
        self.stops = StopRule(resume=sink is not None, enabled=plan.check)
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
        item = self._count(dataclasses.replace(answer, index=job.index))
        self._reused.append(item)
        return True

    async def reused_on_item(self) -> None:
        """`on_item` for the items `reuse=` answered (the feed that found them is sync)."""
        reused, self._reused = self._reused, []
        for item in reused:
            await self._on_item(item)

    async def deliver(self, item: BatchItem) -> None:
        await self._on_item(self._count(item))

    def _count(self, item: BatchItem) -> BatchItem:
        verdict = self.stops.observe(item)
        if verdict is not None:
            item = verdict.item
            if verdict.stop is not None and self.stopped is None:
                self.stopped = verdict.stop
                if self.pool is not None:
                    self.pool.abort(verdict.stop.message)
        self.tally.add(item)
        if self.sink is None:
            self.kept.append(item)
        else:
            for ready in (item,) if verdict is None else verdict.record:
                self._record(ready)
            if not item.ok and len(self.kept) < KEPT_FAILURES:
                self.kept.append(item)
        if getattr(item.error, "fatal", False) and self.stopped is None:
            self.stopped = Stopped(why="failed", message=str(item.error), index=item.index)
        tally = self.tally
        progress = self.progress
        if not progress.enabled:
            return item
        if tally.first_start is not None:
            progress.began(time.monotonic() - tally.first_start)
        retrying = self.pool.retrying if self.pool is not None else 0
        progress.update(
            tally.failed,
            tally.cancelled,
            retrying,
            lambda: (tally.usage.requests, tally.throttled, tally.rate_wait),
            (tally.tool_errors, tally.items_with_tool_errors),
        )
        return item

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
            self.stopped = Stopped(
                why="sink", message=f"the sink failed: {type(exc).__name__}: {exc}"
            )
            if self.pool is not None:
                self.pool.abort(self.stopped.message)

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
        tally = self.tally
        self.progress.close(
            tally.failed, tally.cancelled, 0, (tally.tool_errors, tally.items_with_tool_errors)
        )
        if self.sink is not None:
            for failed in self.stops.release():  # unconfirmed, and never confirmed
                self._record(failed)
            try:
                self.sink.close()
            except Exception as exc:
                self.stopped = self.stopped or Stopped(
                    why="sink", message=f"the sink failed: {type(exc).__name__}: {exc}"
                )

    def result(self) -> BatchResult:
        pool = self.pool
        assert pool is not None
        report = self.tally.finish(pool.retries)
        if pool.failure is not None and self.stopped is None:
            # The pool could not go on (Ray runners unable to load the executable).
            self.stopped = Stopped(why="failed", message=f"the batch failed: {pool.failure}")
        if pool.signal.aborted and self.stopped is None:
            message = f"cancelled: {pool.signal.reason or 'no reason given'}"
            # The CLI says how to go on itself, with the command as given.
            if self.sink is not None and not self.plan.spelling.cli:
                message += RESUME_HINT
            self.stopped = Stopped(why="cancelled", message=message)
        for failure in (pool.feed_error, pool.deliver_error):  # last guards, not paths
            if failure is not None and self.stopped is None:
                self.stopped = Stopped(
                    why="failed", message=f"the batch failed: {type(failure).__name__}: {failure}"
                )
        report.stopped = self.stopped
        report.sink = str(self.sink.path) if self.sink is not None else None
        items = sorted(self.kept, key=lambda item: item.index)
        data = [item.data for item in items] if self.sink is None else []
        return BatchResult(items=items, data=data, usage=self.tally.usage, report=report)
