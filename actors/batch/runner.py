"""The batch runner actor: the in-flight core of a batch, fed jobs by the driver.

A runner lives as long as the driver that made it and serves its batches, several at
once if need be, each by its id. For each batch the driver `open`s it, `submit`s
numbered chunks of jobs (run in their numbers' order: Ray may deliver one caller's calls
out of order, and the items of a session must keep theirs), reads the items that ended
from `results` (a streaming call kept open for the batch) and `close`s it once it has
nothing more to send. A runner decides each job's fate once, and gives it back in the
results stream.

The driver routes every item that names a session to the runner that owns the session
(a stable hash of it), so the runner serialises its sessions in-process (the in-flight
core keeps their order) and its runs write to the store themselves, fenced by position,
with no session-host call. Tools that ask for no placement run here too
(`RayOptions.tools_in_runners`): a runner is a worker of its own, so another hop to a tool
executor would cost a Ray call per tool call and buy little (`in_batch_runner`).

Why runners outlive a batch: the actors the runs in a runner create (model gateways,
session hosts) are owned by it and would die with it, under every other user; and a new
runner costs a worker process start per batch.

Items go back pickled by us, each on its own, a batch of them at a time: a result that
cannot be pickled here (or unpickled in the driver) fails its own item instead of
breaking the stream (which the driver would take for a dead runner), and one batch
costs Ray one object instead of one per item. A class the driver sent by value (an
output model defined in a notebook or a script) goes back by reference to the driver's
own class (`_ItemPickler`): by value, the driver would rebuild it for every item.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import io
import pickle
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray.cloudpickle

from raygent.backend import (
    AttemptPlan,
    Backend,
    BatchItem,
    InFlight,
    Job,
    RaygentError,
    RelayedLines,
    Retry,
    attempt_for,
    close_toolsets,
    owning_toolsets,
    redacting_logger,
    use_backend,
    with_lines,
)

from .._ray import in_batch_runner, spawn

if TYPE_CHECKING:
    from raygent.backend import Attempt, RunOptions

__all__ = ["BatchRunner", "ResultBatch", "UnsentResultError", "load_executable"]

logger = redacting_logger(__name__)
_dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps
_loads: Callable[[bytes], Any] = ray.cloudpickle.loads
# cloudpickle's registry of the classes that travelled by value (each with an id that is
# the same in every process it reached); absent in a cloudpickle without it: then
# classes simply go by value.
_TRACKED: Any = getattr(ray.cloudpickle.cloudpickle, "_DYNAMIC_CLASS_TRACKER_BY_CLASS", {})
_TRACKED_BY_ID: Any = getattr(ray.cloudpickle.cloudpickle, "_DYNAMIC_CLASS_TRACKER_BY_ID", {})
# The classes this runner was sent by value by its driver (with the executables).
_from_driver: weakref.WeakSet[type] = weakref.WeakSet()


def _tracked_class(tracker_id: str) -> type:
    """In the driver: its own class that went to the runner by value under this id."""
    found = _TRACKED_BY_ID.get(tracker_id)
    if found is None:
        raise pickle.UnpicklingError(f"no class here was sent as {tracker_id}")
    return found  # type: ignore[no-any-return]


class _ItemPickler(ray.cloudpickle.Pickler):
    """cloudpickle, but the classes that came from the driver go back by reference."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and obj in _from_driver:
            return _tracked_class, (_TRACKED[obj],)
        return super().reducer_override(obj)  # type: ignore[no-untyped-call]


def load_executable(payload: bytes) -> Any:
    """The executable the driver sent; the classes it brought by value are noted."""
    executable = _loads(payload)
    for cls in list(_TRACKED):
        _from_driver.add(cls)
    return executable


# Items go by plain pickle until one needs cloudpickle (see `_dump_item`).
_plain_pickle = True


def _dump_item(item: BatchItem) -> bytes:
    global _plain_pickle
    if _plain_pickle:
        # Plain pickle (a third of cloudpickle's cost here) pickles every class by
        # reference and checks that the name finds that very class, so anything it
        # cannot send as the driver would load it (a class that came by value, a lambda)
        # raises instead: then cloudpickle does it, for this item and every later one.
        try:
            return pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            _plain_pickle = False
    buffer = io.BytesIO()
    pickler = _ItemPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[no-untyped-call]
    pickler.dump(item)  # type: ignore[no-untyped-call]
    return buffer.getvalue()


# Items that ended within this many seconds of each other go back as one batch, or
# sooner once a share of the slots (1/FLUSH_SHARE) has ended: a slot is the driver's to
# refill only when its result is back, so a result waiting here is a slot idle (a fixed
# 20 ms wait on every result cost a third of the throughput at 100 ms a trip).
FLUSH_INTERVAL = 0.02
FLUSH_SHARE = 8


class UnsentResultError(RaygentError):
    """An item's result could not be pickled to go back to the driver."""

    code = "UNSENT_RESULT"
    category = "batch"


ResultBatch = tuple[list[tuple[int, bytes]], int, int, Any]
"""((index, pickled BatchItem) of each item, retries so far, items waiting to retry,
and with `provider_batch=` the lines the runs sent since, with their spend: see
`RelayedLines.take`; else None)."""


@dataclass
class _Batch:
    """One batch's share on this runner."""

    pool: InFlight
    jobs: asyncio.Queue[list[Job] | None]
    ready: asyncio.Event
    ended: list[BatchItem] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    received: int = 0  # chunks fed to the pool, in their numbers' order
    early: dict[int, list[Job]] = field(default_factory=dict)  # chunks ahead of their turn
    expected: int | None = None
    lines: RelayedLines | None = None  # provider_batch=: the runs' lines, to the driver
    budget: Any = None  # budget=: the job's ledger (its lease here is told when we end)
    # Every call the driver makes for the batch has arrived (its `close`, and each chunk
    # it counted): only then may the batch be forgotten here.
    fed: bool = False

    slots: int = 1

    def wake(self) -> None:
        self.ready.set()

    def take(self, number: int, jobs: list[Job]) -> None:
        self.early[number] = jobs
        while self.received in self.early:
            self.jobs.put_nowait(self.early.pop(self.received))
            self.received += 1
        self.maybe_end()

    def maybe_end(self) -> None:
        if not self.fed and self.expected is not None and self.received == self.expected:
            self.fed = True
            self.jobs.put_nowait(None)
            self.wake()


class BatchRunner:
    """Runs the jobs it is fed for each open batch, retrying by the batch's `Retry`."""

    def __init__(self, backend: Backend) -> None:
        # Runs in this worker use the driver's backend: their model calls go through
        # the same gateways, so provider bounds hold across every runner.
        use_backend(backend)
        self._batches: dict[str, _Batch] = {}

    async def open(
        self,
        batch_id: str,
        executable: bytes,
        run_options: RunOptions | None,
        slots: int,
        retry: Retry,
        grace: float,
        lines: tuple[Any, str, float | None, int | None, Any] | None = None,
        stop_on_config: bool = True,
        attempts: AttemptPlan | None = None,
    ) -> None:
        """Take a share of a batch: `slots` attempts in flight. `lines`: with
        `provider_batch=`, (its options, the job's name, its deadline, the attempts
        working at once, the route of a job with a deadline, or None): the runs'
        trips go as lines to the driver's pool, in the
        results stream, answered by `answer`; `slots` then counts the runs waiting
        for their lines too. `stop_on_config`: an item failed on an error every item
        would meet stops this share at once (the driver, told by its item, stops the
        others). `attempts`: what each attempt gets besides the run options (the job's
        ledger, how its items' runs are named)."""
        lined = attempt_for(load_executable(executable), run_options, attempts)
        attempt: Attempt = lined
        relay: RelayedLines | None = None
        if lines is not None:
            relay = RelayedLines(lambda: self._wake(batch_id))
            options, job_name, deadline, active, route = lines
            attempt = with_lines(lined, relay, options, job_name, deadline, active, route)
        state = _Batch(
            pool=InFlight(
                attempt,
                concurrency=slots,
                retry=retry,
                deliver=lambda item: self._deliver(batch_id, item),
                grace=grace,
                stop_on_config=stop_on_config,
            ),
            jobs=asyncio.Queue(),
            ready=asyncio.Event(),
            lines=relay,
            budget=None if attempts is None else attempts.job_budget,
            slots=slots,
        )
        # The runs of this batch own their sessions (the driver routed them here) and
        # run their unplaced tools here.
        hosted = in_batch_runner.set(True)
        try:
            # The servers its runs open (an MCP toolset's) are the batch's: they close
            # when it ends, however it ends (each batch loads its executable anew).
            with owning_toolsets() as opened:
                state.task = asyncio.ensure_future(state.pool.run(_Feed(state.jobs)))
        finally:
            in_batch_runner.reset(hosted)
        state.task.add_done_callback(lambda _: state.wake())
        state.task.add_done_callback(lambda _: spawn(close_toolsets(opened)))
        self._batches[batch_id] = state

    def _wake(self, batch_id: str) -> None:
        state = self._batches.get(batch_id)
        if state is not None:
            state.wake()

    async def answer(self, batch_id: str, answers: list[Any]) -> None:
        """Replies to lines this runner's runs sent: (custom_id, the line's bytes from
        its batch's results or a failure the driver's pool made, batch id)."""
        state = self._batches.get(batch_id)
        if state is not None and state.lines is not None:
            state.lines.answer(answers)

    async def _deliver(self, batch_id: str, item: BatchItem) -> None:
        state = self._batches[batch_id]
        state.ended.append(item)
        state.wake()

    async def submit(self, batch_id: str, number: int, jobs: list[Job]) -> None:
        """More jobs to run: the batch's chunk `number` (from 0)."""
        self._batches[batch_id].take(number, jobs)

    async def close(self, batch_id: str, chunks: int) -> None:
        """`chunks` chunks in all are submitted: `results` ends once they have arrived
        and every job has ended, aborted or not (the batch is kept until then, so no
        call of the driver's comes for a batch forgotten). Ray may run a `close` before
        the last `submit`s of the same caller: the count says when the feed is whole."""
        state = self._batches[batch_id]
        state.expected = chunks
        state.maybe_end()

    async def abort(self, batch_id: str, reason: str | None) -> None:
        """End the batch's unfinished jobs as cancelled (running ones get the grace)."""
        state = self._batches.get(batch_id)
        if state is not None:
            state.pool.abort(reason)

    async def results(self, batch_id: str) -> AsyncIterator[ResultBatch]:
        """The batch's items as they end, in batches, until it is closed and drained."""
        state = self._batches[batch_id]
        task = state.task
        assert task is not None
        try:
            while True:
                await state.ready.wait()
                if not task.done():
                    await _gather(state, max(1, state.slots // FLUSH_SHARE))
                state.ready.clear()
                flush = getattr(state.budget, "flush", None)
                if task.done() and flush is not None:
                    # The job's standing, current at the gateway before the driver sees
                    # the last items (it reads it next).
                    with contextlib.suppress(Exception):
                        await flush()
                ended, state.ended = state.ended, []
                relayed = None
                if state.lines is not None and state.lines.pending:
                    relayed = state.lines.take()
                if ended or relayed is not None:
                    yield _pickled(ended), state.pool.retries, state.pool.retrying, relayed
                if task.done() and not state.ended:
                    if not task.cancelled() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                    # An aborted pool ends before its feed does: the driver's `close`
                    # (and chunks sent before it) may still be on their way, and must
                    # find the batch here. Jobs that come now are not run: the driver
                    # holds them, and ends them cancelled once this stream ends.
                    if state.fed:
                        return
        finally:
            if not task.done():  # the driver went away mid-batch: stop its work
                state.pool.abort("the driver stopped reading the batch")
                task.add_done_callback(lambda _: self._batches.pop(batch_id, None))
            else:
                self._batches.pop(batch_id, None)


async def _gather(state: _Batch, enough: int) -> None:
    """Wait until `enough` items have ended, at most `FLUSH_INTERVAL`, or the task ends
    (a timer wakes the wait: no task and no timeout per item)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FLUSH_INTERVAL
    timer = loop.call_later(FLUSH_INTERVAL, state.ready.set)
    try:
        task = state.task
        while len(state.ended) < enough and task is not None and not task.done():
            if loop.time() >= deadline:
                return
            state.ready.clear()
            await state.ready.wait()
    finally:
        timer.cancel()


class _Feed:
    """The jobs of a batch's chunks, in order, as they arrive; `next_nowait` hands over
    what has arrived without a wait (the pool starts every job it can in one go)."""

    def __init__(self, queue: asyncio.Queue[list[Job] | None]) -> None:
        self.queue = queue
        self.held: collections.deque[Job] = collections.deque()
        self.ended = False

    def __aiter__(self) -> _Feed:
        return self

    async def __anext__(self) -> Job:
        while not self.held:
            if self.ended or (chunk := await self.queue.get()) is None:
                self.ended = True
                raise StopAsyncIteration
            self.held.extend(chunk)
        return self.held.popleft()

    def next_nowait(self) -> Job | None:
        """The next job if it has arrived, else None; StopAsyncIteration at the end."""
        while not self.held:
            if self.ended:
                raise StopAsyncIteration
            try:
                chunk = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                return None
            if chunk is None:
                self.ended = True
                raise StopAsyncIteration
            self.held.extend(chunk)
        return self.held.popleft()


def _pickled(items: list[BatchItem]) -> list[tuple[int, bytes]]:
    """Each item pickled on its own: one that cannot be pickled here, or unpickled in
    the driver, fails alone."""
    return [(item.index, _pickled_item(item)) for item in items]


def _pickled_item(item: BatchItem) -> bytes:
    try:
        return _dump_item(item)
    except Exception as exc:
        logger.warning("item %s: its result cannot be pickled (%s)", item.index, exc)
        error = UnsentResultError(
            f"item {item.index}: the result could not be sent back to the driver: "
            f"{type(exc).__name__}: {exc}"
        )
        failed = dataclasses.replace(item, status="failed", result=None, data=None, error=error)
        return _dumps(failed)
