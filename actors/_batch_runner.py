"""The batch runner actor: the in-flight core of a batch, fed jobs by the driver.

The driver `submit`s chunks of jobs, and reads the items that ended from `results`, a
streaming call it keeps open for the runner's life; it `close`s the runner once it has
nothing more to send. A runner never decides an item's fate twice: each job it takes
ends once, and goes back in the results stream.

Items go back pickled by us, a batch at a time: a result that cannot be pickled fails
its own item instead of breaking the stream (which the driver would take for a dead
runner), and one pickled batch costs Ray one object instead of one per item.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import ray.cloudpickle

from ._core import Backend

if TYPE_CHECKING:
    from runtime._batch_engine import BatchItem, InFlight, Job
    from runtime._batch_exec import attempt_for
    from runtime._batch_retry import Retry
    from runtime.agents import RunOptions
    from runtime.backend import use_backend
    from runtime.errors import RaygentError
else:
    from raygent._batch_engine import BatchItem, InFlight, Job
    from raygent._batch_exec import attempt_for
    from raygent._batch_retry import Retry
    from raygent.backend import use_backend
    from raygent.errors import RaygentError

__all__ = ["BatchRunner", "ResultBatch", "UnsentResultError"]

logger = logging.getLogger(__name__)
_dumps: Callable[[Any], bytes] = ray.cloudpickle.dumps
_loads: Callable[[bytes], Any] = ray.cloudpickle.loads

# Items that ended within this many seconds of each other go back as one batch.
FLUSH_INTERVAL = 0.02


class UnsentResultError(RaygentError):
    """An item's result could not be pickled to go back to the driver."""

    code = "unsent_result"
    category = "batch"


ResultBatch = tuple[bytes, int, int]
"""(pickled list of BatchItem, retries so far, items waiting to retry)."""


class BatchRunner:
    """Runs the jobs it is fed, `slots` attempts in flight, retrying by `retry`."""

    def __init__(
        self,
        executable: bytes,
        run_options: RunOptions | None,
        slots: int,
        retry: Retry,
        grace: float,
        backend: Backend,
    ) -> None:
        # Runs in this worker use the driver's backend: their model calls go through
        # the same gateways, so provider bounds hold across every runner.
        use_backend(backend)
        self._attempt = attempt_for(_loads(executable), run_options)
        self._slots = slots
        self._retry = retry
        self._grace = grace
        self._jobs: asyncio.Queue[list[Job] | None] | None = None
        self._ended: list[BatchItem] = []
        self._ready: asyncio.Event | None = None
        self._pool: InFlight | None = None
        self._task: asyncio.Task[None] | None = None
        self._received = 0
        self._expected: int | None = None

    def _start(self) -> tuple[asyncio.Queue[list[Job] | None], InFlight, asyncio.Task[None]]:
        # Made on the actor's event loop, at the first call (not in __init__).
        if self._jobs is None or self._pool is None or self._task is None:
            self._jobs = asyncio.Queue()
            self._ready = asyncio.Event()
            self._pool = InFlight(
                self._attempt,
                concurrency=self._slots,
                retry=self._retry,
                deliver=self._deliver,
                grace=self._grace,
            )
            self._task = asyncio.ensure_future(self._pool.run(self._feed(self._jobs)))
            self._task.add_done_callback(lambda _: self._wake())
        return self._jobs, self._pool, self._task

    async def _feed(self, queue: asyncio.Queue[list[Job] | None]) -> AsyncIterator[Job]:
        while (chunk := await queue.get()) is not None:
            for job in chunk:
                yield job

    async def _deliver(self, item: BatchItem) -> None:
        self._ended.append(item)
        self._wake()

    def _wake(self) -> None:
        if self._ready is not None:
            self._ready.set()

    async def submit(self, jobs: list[Job]) -> None:
        """More jobs to run."""
        queue, _, _ = self._start()
        queue.put_nowait(jobs)
        self._received += 1
        self._maybe_end(queue)

    async def close(self, chunks: int) -> None:
        """Nothing more than `chunks` chunks in all will be submitted: `results` ends once
        they have arrived and every job has ended. (Ray may deliver a `close` before the
        last `submit`s of the same caller: the count says when the feed is whole.)"""
        queue, _, _ = self._start()
        self._expected = chunks
        self._maybe_end(queue)

    def _maybe_end(self, queue: asyncio.Queue[list[Job] | None]) -> None:
        if self._expected is not None and self._received == self._expected:
            queue.put_nowait(None)

    async def abort(self, reason: str | None) -> None:
        """End what is unfinished as cancelled (running attempts get the grace)."""
        _, pool, _ = self._start()
        pool.abort(reason)

    async def results(self) -> AsyncIterator[ResultBatch]:
        """The items as they end, in batches, until the runner is closed and drained."""
        _, pool, task = self._start()
        assert self._ready is not None
        while True:
            await self._ready.wait()
            if not task.done():
                await asyncio.sleep(FLUSH_INTERVAL)  # let neighbours join the batch
            self._ready.clear()
            ended, self._ended = self._ended, []
            if ended:
                yield _pickled(ended), pool.retries, pool.retrying
            if task.done() and not self._ended:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
                return

    def ping(self) -> bool:
        return True


def _pickled(items: list[BatchItem]) -> bytes:
    try:
        return _dumps(items)
    except Exception:
        return _dumps([_sendable(item) for item in items])


def _sendable(item: BatchItem) -> BatchItem:
    try:
        _dumps(item)
    except Exception as exc:
        logger.warning("item %s: its result cannot be pickled (%s)", item.index, exc)
        error = UnsentResultError(
            f"item {item.index}: the result could not be sent back to the driver: "
            f"{type(exc).__name__}: {exc}"
        )
        return BatchItem(
            index=item.index,
            key=item.key,
            status="failed",
            error=error,
            attempts=item.attempts,
            usage=item.usage,
            latency=item.latency,
            input=item.input,
            meta=item.meta,
        )
    return item
